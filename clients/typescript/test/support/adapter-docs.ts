/**
 * The adapter pages' examples are files under examples/ that the tests run; a page shows
 * its file verbatim in a ```ts block, with the package's own imports spelt as a user
 * writes them (`../src/index.js` → `interlock-guard`, `../src/adapters/NAME.js` →
 * `interlock-guard/NAME`). The page's ```yaml policy is the one the example runs under.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { PACKAGE_ROOT, REPO_ROOT } from "./server.js";

const FENCE = /^```(\w+)[^\n]*\n([\s\S]*?)^```/gm;

function blocks(page: string, language: string): string[] {
  const text = readFileSync(join(REPO_ROOT, "docs", page), "utf8");
  return [...text.matchAll(FENCE)].filter((match) => match[1] === language).map((match) => match[2] ?? "");
}

/** An example file as its page shows it. */
export function asPublished(example: string): string {
  const source = readFileSync(join(PACKAGE_ROOT, "examples", example), "utf8");
  return source
    .replace(/"\.\.\/src\/index\.js"/g, '"interlock-guard"')
    .replace(/"\.\.\/src\/adapters\/([\w-]+)\.js"/g, '"interlock-guard/$1"');
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
