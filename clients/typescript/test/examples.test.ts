/**
 * The documentation's examples: each file under examples/ is included verbatim in its
 * page (docs/typescript*.md, a ```ts block starting with `// examples/NAME.ts`), and
 * runs here against the live server on fake models, doing what the page says.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, inject, it, vi } from "vitest";
import { main as aiSdkExample } from "../examples/ai-sdk.js";
import { main as clientExample } from "../examples/client.js";
import { main as mastraExample } from "../examples/mastra.js";
import { generatingModel, streamingModel } from "./support/models.js";
import { PACKAGE_ROOT, REPO_ROOT, fixture } from "./support/server.js";

const stateful = inject("stateful");
const env = { INTERLOCK_URL: stateful.url, INTERLOCK_KEY: stateful.agentKey };

// The client's page first (its policy is the stateful one), then every adapter's page.
const PAGES = [
  "typescript.md",
  ...readdirSync(join(REPO_ROOT, "docs"))
    .filter((name) => /^typescript-[\w-]+\.md$/.test(name))
    .sort(),
].map((name) => join(REPO_ROOT, "docs", name));
const FENCE = /^```ts\n(.*?)^```/gms;

function tsBlocks(): Map<string, string> {
  const found = new Map<string, string>();
  for (const page of PAGES) {
    for (const match of readFileSync(page, "utf8").matchAll(FENCE)) {
      const body = match[1] as string;
      const name = /^\/\/ (examples\/[\w-]+\.ts)/.exec(body)?.[1];
      if (name) found.set(name, body);
    }
  }
  return found;
}

describe("the docs", () => {
  it("include every example verbatim", () => {
    const blocks = tsBlocks();
    const files = readdirSync(join(PACKAGE_ROOT, "examples")).filter((file) => file.endsWith(".ts"));
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      expect(blocks.get(`examples/${file}`), `examples/${file} in docs/typescript*.md`).toBe(
        readFileSync(join(PACKAGE_ROOT, "examples", file), "utf8"),
      );
    }
  });

  it("state the policy the examples run under", () => {
    const page = readFileSync(PAGES[0] as string, "utf8");
    expect(page).toContain(`\`\`\`yaml\n${fixture<{ policy: string }>("stateful").policy}\`\`\``);
  });
});

describe("the examples run", () => {
  it("examples/client.ts: allow, deny, an approval pending, a model call committed", async () => {
    const lines: string[] = [];
    const log = vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => void lines.push(args.map(String).join(" ")));
    try {
      const { decision, answer } = await clientExample(env);
      expect(decision.verdict).toBe("allow");
      expect(answer).toBe("the answer");
    } finally {
      log.mockRestore();
    }
    expect(lines[0]).toBe("allow lookups-ok");
    expect(lines[1]).toBe("Interlock denied tool 'shell': no rule matched; the policy default is deny");
    expect(lines[2]).toMatch(/^apr_\w+ https:\/\/approvals\.example\.com\/a\/apr_\w+$/);
    expect(lines[3]).toBe("pending");
  });

  it("examples/ai-sdk.ts: the refused shell call never runs; the model reads the refusal", async () => {
    const provider = generatingModel([{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "I may not." }]);
    const { text, content } = await aiSdkExample(env, provider);
    expect(text).toBe("I may not.");
    expect(content.some((part) => (part as { type: string }).type === "tool-result")).toBe(false);
    const error = content.find((part) => (part as { type: string }).type === "tool-error") as { error: Error };
    expect(error.error.message).toMatch(/^Interlock denied tool 'shell'/);
  });

  it("examples/mastra.ts: generate and stream, the shell call refused in both", async () => {
    const steps = [{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "I may not." }];
    const provider = generatingModel(steps);
    const streaming = streamingModel(steps);
    provider.doStream = streaming.doStream.bind(streaming);
    const result = await mastraExample(env, provider);
    expect(result).toEqual({ generated: "I may not.", streamed: "I may not." });
    const seen = JSON.stringify(provider.doGenerateCalls[1]?.prompt) + JSON.stringify(streaming.doStreamCalls[1]?.prompt);
    expect(seen.match(/Interlock denied tool 'shell'/g)?.length).toBe(2);
  });
});
