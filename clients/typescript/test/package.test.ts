/**
 * The package as published: ESM and CJS builds of every entry (npm test builds before it
 * runs), no runtime dependency, frameworks as optional peers, and the generated API
 * types current with the server's OpenAPI document.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { builtinModules, createRequire } from "node:module";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { PACKAGE_ROOT, interlockPython } from "./support/server.js";

const run = promisify(execFile);
const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8"));
const adapters = readdirSync(join(PACKAGE_ROOT, "src/adapters"))
  .filter((file) => file.endsWith(".ts"))
  .map((file) => file.slice(0, -3));

describe("the package", () => {
  it("has no runtime dependencies; every framework is an optional peer with a range", () => {
    expect(pkg.dependencies ?? {}).toEqual({});
    for (const [name, range] of Object.entries(pkg.peerDependencies)) {
      expect(range, name).toMatch(/^\^\d+\.\d+\.\d+$/);
      expect(pkg.peerDependenciesMeta[name], name).toEqual({ optional: true });
    }
  });

  it("exports every adapter module as interlock-guard/NAME", () => {
    for (const name of adapters) expect(Object.keys(pkg.exports)).toContain(`./${name}`);
  });

  it("builds ESM and CJS for every entry (npm run build)", async () => {
    const dist = join(PACKAGE_ROOT, "dist");
    expect(existsSync(dist), "run npm run build first").toBe(true);
    const require = createRequire(join(PACKAGE_ROOT, "package.json"));
    const cjs = require("interlock-guard");
    expect(typeof cjs.InterlockClient).toBe("function");
    const esm = await import("interlock-guard");
    expect(typeof esm.InterlockClient).toBe("function");
    expect(new esm.ActionDenied("x", {} as never)).toBeInstanceOf(esm.InterlockBlocked);
    for (const name of adapters) {
      expect(Object.keys(require(`interlock-guard/${name}`)).length, name).toBeGreaterThan(0);
      expect(Object.keys(await import(`interlock-guard/${name}`)).length, name).toBeGreaterThan(0);
    }
  });

  it("the built code imports nothing at runtime but its own chunks, Node's modules and peers", () => {
    const peers = Object.keys(pkg.peerDependencies);
    const files = readdirSync(join(PACKAGE_ROOT, "dist"), { recursive: true, encoding: "utf8" }).filter((file) => /\.(c?js)$/.test(file));
    for (const file of files) {
      const text = readFileSync(join(PACKAGE_ROOT, "dist", file), "utf8");
      const specifiers = [...text.matchAll(/(?:from\s+|require\(|import\()\s*["']([^"']+)["']/g)].map((m) => m[1] as string);
      for (const specifier of specifiers) {
        // Node's own modules are not dependencies (the LangChain adapter's AsyncLocalStorage).
        const ours = specifier.startsWith(".") || builtinModules.includes(specifier.replace(/^node:/, ""));
        const peer = peers.some((name) => specifier === name || specifier.startsWith(`${name}/`));
        expect(ours || peer, `${file} imports ${specifier}`).toBe(true);
      }
    }
  });
});

describe("the generated API types", () => {
  it("are what the server's OpenAPI document generates (npm run gen:types)", async () => {
    const { stdout } = await run(process.execPath, [join(PACKAGE_ROOT, "scripts/gen-types.mjs"), "--check"], {
      env: { ...process.env, INTERLOCK_PYTHON: interlockPython() },
    });
    expect(stdout).toContain("matches");
  }, 120_000);
});
