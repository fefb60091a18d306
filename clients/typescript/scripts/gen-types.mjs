// Regenerate src/generated/openapi.ts from the server's OpenAPI document.
//
//   node scripts/gen-types.mjs                 # from `python scripts/openapi.py` (no server needed)
//   node scripts/gen-types.mjs --url URL       # from a running server's /v1/openapi.json
//   node scripts/gen-types.mjs --check         # fail (exit 1) when the checked-in file is stale
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import openapiTS, { astToString } from "openapi-typescript";
import { interlockPython, packageRoot } from "./python.mjs";

const TARGET = resolve(packageRoot, "src/generated/openapi.ts");
const HEADER =
  "// Generated from the Interlock server's OpenAPI document by `npm run gen:types`.\n" +
  "// Do not edit: `npm run check:types` fails the build when this file is stale.\n\n";

async function fetchDocument(args) {
  const at = args.indexOf("--url");
  if (at >= 0) {
    const url = new URL("/v1/openapi.json", args[at + 1]);
    const response = await fetch(url);
    if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}`);
    return await response.json();
  }
  const python = interlockPython();
  const text = execFileSync(python, [resolve(packageRoot, "scripts/openapi.py")], {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.parse(text);
}

export async function generate(args = []) {
  const document = await fetchDocument(args);
  delete document.info.version; // the package version is not part of the API's shape
  const ast = await openapiTS(document, { alphabetize: true, defaultNonNullable: false });
  return HEADER + astToString(ast);
}

const args = process.argv.slice(2);
const text = await generate(args);
if (args.includes("--check")) {
  const current = readFileSync(TARGET, "utf8");
  if (current !== text) {
    console.error(
      "src/generated/openapi.ts is stale: the server's API changed. Run `npm run gen:types` and commit it.",
    );
    process.exit(1);
  }
  console.log("src/generated/openapi.ts matches the server's OpenAPI document");
} else {
  writeFileSync(TARGET, text);
  console.log(`wrote ${TARGET}`);
}
