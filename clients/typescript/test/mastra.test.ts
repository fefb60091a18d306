/**
 * The Mastra adapter in a real Mastra `Agent` (`generate` and `stream`) on AI SDK fake
 * models, against a live `interlock serve`.
 */
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { interlockModel, interlockToolHooks, mastraToolAction } from "../src/adapters/mastra.js";
import { InterlockClient } from "../src/client.js";
import { budgetedClient, lastToolOutput, modelTokens } from "./support/loops.js";
import { generatingModel, streamingModel } from "./support/models.js";
import { ROWS, type Row, expectObserversLogged, expectRefusalText, setUp } from "./support/rows.js";
import { downServerUrl, startMisbehavingServer } from "./support/server.js";

const budgeted = budgetedClient();

function countingTool(id: string) {
  const calls: unknown[] = [];
  const made = createTool({
    id,
    description: `the ${id} tool`,
    inputSchema: z.record(z.string(), z.unknown()),
    execute: async (input: unknown) => {
      calls.push(input);
      return "ran";
    },
  });
  return { made, calls };
}

let agents = 0;

/** Mastra takes AI SDK v4 models; its declared type is narrower than `ai/test`'s mock
 * (two copies of the provider spec's types), so the mock is passed through this cast. */
type MastraModel = ConstructorParameters<typeof Agent>[0]["model"];
function mastraModel(model: unknown): MastraModel {
  return model as MastraModel;
}

async function driveRow(row: Row, mode: "generate" | "stream", refusal: "message" | "throw") {
  const setup = await setUp(row);
  try {
    const { made, calls } = countingTool(row.tool);
    const steps = [{ toolCall: { toolName: row.tool, input: row.args } }, { text: "fine" }];
    const model = mode === "generate" ? generatingModel(steps) : streamingModel(steps);
    agents += 1;
    const agent = new Agent({
      id: `agent-${agents}`,
      name: `agent-${agents}`,
      instructions: "use the tools",
      model: mastraModel(model),
      tools: { [row.tool]: made },
      hooks: interlockToolHooks({
        ...setup.options,
        refusal,
        map: (call) => (setup.mapper ? setup.mapper(mastraToolAction(call)) : mastraToolAction(call)),
      }),
    });
    let text: string;
    if (mode === "generate") {
      text = (await agent.generate("go", { maxSteps: 3 })).text;
    } else {
      text = await (await agent.stream("go", { maxSteps: 3 })).text;
    }
    expect(text).toBe("fine");
    expect(calls.length).toBe(row.runs ? 1 : 0);
    const prompt = mode === "generate" ? model.doGenerateCalls[1]?.prompt : model.doStreamCalls[1]?.prompt;
    const seen = lastToolOutput(prompt as unknown[]);
    if (row.runs) {
      expect(seen).toEqual({ type: "text", value: "ran" });
    } else {
      expect(seen.type).toBe(refusal === "message" ? "text" : "error-text");
      expectRefusalText(row, String(seen.value));
    }
    expectObserversLogged(row, setup.warnings);
  } finally {
    await setup.done();
  }
}

describe("interlockToolHooks: the conformance table in agent.generate", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "generate", "message"));
});

describe("interlockToolHooks: the conformance table in agent.stream", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "stream", "message"));
});

describe("interlockToolHooks, refusal thrown: the conformance table in agent.generate", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "generate", "throw"));
});

describe("interlockToolHooks fails closed", () => {
  const failures: [string, () => Promise<{ url: string; stop(): Promise<void> }>][] = [
    ["the server down", async () => ({ url: await downServerUrl(), stop: async () => {} })],
    ["the server slow past the timeout", () => startMisbehavingServer("slow", 2000)],
    ["the server answering 500", () => startMisbehavingServer("500")],
    ["the server answering malformed JSON", () => startMisbehavingServer("malformed")],
  ];
  for (const [what, start] of failures) {
    it(`${what}: undetermined, the body never runs`, async () => {
      const server = await start();
      try {
        const { made, calls } = countingTool("shell");
        const model = streamingModel([{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "ok" }]);
        const agent = new Agent({
          id: "fail-closed",
          name: "fail-closed",
          instructions: "x",
          model: mastraModel(model),
          tools: { shell: made },
          hooks: interlockToolHooks({ client: new InterlockClient({ url: server.url, apiKey: "k", timeoutMs: 200 }) }),
        });
        await (await agent.stream("go", { maxSteps: 3 })).text;
        expect(calls).toEqual([]);
        expect(String(lastToolOutput(model.doStreamCalls[1]?.prompt as unknown[]).value)).toMatch(
          /^Interlock could not decide on tool 'shell', so it did not run: /,
        );
      } finally {
        await server.stop();
      }
    });
  }
});

describe("interlockModel: budgets on a Mastra agent's model calls", () => {
  for (const mode of ["generate", "stream"] as const) {
    it(`agent.${mode}, two steps: each model call committed with its usage, exactly once`, async () => {
      const before = await modelTokens();
      const { made, calls } = countingTool("paid_lookup");
      const steps = [
        { toolCall: { toolName: "paid_lookup", input: { q: mode } }, usage: [31, 8] as [number, number] },
        { text: "answer", usage: [19, 6] as [number, number] },
      ];
      const inner = mode === "generate" ? generatingModel(steps) : streamingModel(steps);
      const agent = new Agent({
        id: `budget-${mode}`,
        name: `budget-${mode}`,
        instructions: "x",
        model: mastraModel(interlockModel(inner, { client: budgeted })),
        tools: { paid_lookup: made },
      });
      const text = mode === "generate" ? (await agent.generate("go", { maxSteps: 3 })).text : await (await agent.stream("go", { maxSteps: 3 })).text;
      expect(text).toBe("answer");
      expect(calls.length).toBe(1);
      const after = await modelTokens();
      expect(after.spent - before.spent).toBe(31 + 8 + 19 + 6);
      expect(after.reserved).toBe(before.reserved);
    });
  }

  it("a model call over the budget never reaches the provider", async () => {
    const inner = generatingModel([{ text: "never" }]);
    const agent = new Agent({
      id: "over-budget",
      name: "over-budget",
      instructions: "x",
      model: mastraModel(interlockModel(inner, { client: budgeted, map: (call) => ({ kind: "llm", name: call.modelId, arguments: { max_output_tokens: 5000 } }) })),
    });
    const outcome = await agent.generate("go").then(
      (result) => ({ error: result.error }),
      (error: unknown) => ({ error }),
    );
    expect(inner.doGenerateCalls.length).toBe(0);
    expect(String((outcome.error as Error | undefined)?.message ?? outcome.error)).toMatch(/Interlock denied llm 'fake-model'/);
  });
});
