/**
 * The adapter pages' examples (as examples.test.ts has them for the client's pages): a
 * file under examples/ that the tests run, shown verbatim in its page's ```ts block. The
 * page's ```yaml policy is the one the example runs under.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { PACKAGE_ROOT, REPO_ROOT } from "./server.js";

const FENCE = /^```(\w+)[^\n]*\n([\s\S]*?)^```/gm;

function blocks(page: string, language: string): string[] {
  const text = readFileSync(join(REPO_ROOT, "docs", page), "utf8");
  return [...text.matchAll(FENCE)].filter((match) => match[1] === language).map((match) => match[2] ?? "");
}

/** An example file, as its page must show it. */
export function exampleSource(example: string): string {
  return readFileSync(join(PACKAGE_ROOT, "examples", example), "utf8");
}

/** The ```ts blocks of a docs page. */
export function tsBlocks(page: string): string[] {
  return blocks(page, "ts");
}

/** The page's policy: its first ```yaml block with `version:`. */
export function pagePolicy(page: string): string {
  const policy = blocks(page, "yaml").find((body) => /^version:/m.test(body));
  if (!policy) throw new Error(`docs/${page} shows no policy`);
  return policy;
}
