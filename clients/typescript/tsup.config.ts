import { defineConfig } from "tsup";

export default defineConfig({
  entry: {
    index: "src/index.ts",
    "adapters/ai-sdk": "src/adapters/ai-sdk.ts",
    "adapters/mastra": "src/adapters/mastra.ts",
  },
  format: ["esm", "cjs"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node20",
  // Frameworks are peer dependencies: never bundled.
  external: [/^ai($|\/)/, /^@mastra\//, /^@ai-sdk\//, /^langchain/, /^@langchain\//, /^@elizaos\//, /^@modelcontextprotocol\//],
});
