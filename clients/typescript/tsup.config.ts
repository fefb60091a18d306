import { readdirSync } from "node:fs";
import { defineConfig } from "tsup";

// One entry per adapter module (src/adapters/NAME.ts → dist/adapters/NAME.{js,cjs}),
// each exported in package.json as "interlock-guard/NAME".
const adapters = Object.fromEntries(
  readdirSync("src/adapters")
    .filter((file) => file.endsWith(".ts"))
    .map((file) => [`adapters/${file.slice(0, -3)}`, `src/adapters/${file}`]),
);

export default defineConfig({
  entry: { index: "src/index.ts", ...adapters },
  format: ["esm", "cjs"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node20",
  // Frameworks are peer dependencies: never bundled.
  external: [/^ai($|\/)/, /^@mastra\//, /^@ai-sdk\//, /^langchain/, /^@langchain\//, /^@elizaos\//, /^@modelcontextprotocol\//],
});
