/**
 * The Vercel AI SDK adapter in real `generateText` / `streamText` loops (fake models
 * from `ai/test` only) against a live `interlock serve`.
 */
import { generateText, isStepCount, jsonSchema, streamText, tool, wrapLanguageModel } from "ai";
import { describe, expect, inject, it } from "vitest";
import {
  guardTool,
  guardTools,
  interlockMiddleware,
  interlockToolApproval,
  toolAction,
  usageOf,
} from "../src/adapters/ai-sdk.js";
import { InterlockClient } from "../src/client.js";
import { ActionDenied, ActionUndetermined, InterlockBlocked } from "../src/errors.js";
import { budgetedClient, lastToolOutput, modelTokens } from "./support/loops.js";
import { generatingModel, streamParts, streamingModel } from "./support/models.js";
import { ROWS, type Row, expectObserversLogged, expectRefusal, expectRefusalText, setUp } from "./support/rows.js";
import { approveWhenPending, downServerUrl, startMisbehavingServer } from "./support/server.js";
import { MockLanguageModelV4, convertArrayToReadableStream } from "ai/test";

const stateful = inject("stateful");
const budgeted = budgetedClient();

const inputSchema = jsonSchema<Record<string, unknown>>({ type: "object", additionalProperties: true });

function countingTool() {
  const calls: unknown[] = [];
  const made = tool({
    inputSchema,
    execute: async (input: Record<string, unknown>) => {
      calls.push(input);
      return "ran";
    },
  });
  return { made, calls };
}

/** The tool-result (or tool-error) the model read back in its second call. */
const toolResultSeen = lastToolOutput;

async function driveRow(row: Row, mode: "generate" | "stream", refusal: "throw" | "message") {
  const setup = await setUp(row);
  try {
    const { made, calls } = countingTool();
    const steps = [{ toolCall: { toolName: row.tool, input: row.args } }, { text: "fine" }];
    const guarded = guardTool(row.tool, made, {
      ...setup.options,
      refusal,
      map: (call) => (setup.mapper ? setup.mapper(toolAction(call)) : toolAction(call)),
    });
    const tools = { [row.tool]: guarded };
    let contentOf: unknown[];
    let prompt: unknown[];
    if (mode === "generate") {
      const model = generatingModel(steps);
      const result = await generateText({ model, tools, prompt: "go", stopWhen: isStepCount(3) });
      contentOf = result.steps[0]?.content ?? [];
      prompt = model.doGenerateCalls[1]?.prompt ?? [];
      expect(result.text).toBe("fine");
    } else {
      const model = streamingModel(steps);
      const result = streamText({ model, tools, prompt: "go", stopWhen: isStepCount(3) });
      expect(await result.text).toBe("fine");
      contentOf = (await result.steps)[0]?.content ?? [];
      prompt = model.doStreamCalls[1]?.prompt ?? [];
    }
    expect(calls.length).toBe(row.runs ? 1 : 0);
    const seen = toolResultSeen(prompt);
    const error = contentOf.find((part) => (part as { type: string }).type === "tool-error") as { error: unknown } | undefined;
    if (row.runs) {
      expect(seen).toEqual({ type: "text", value: "ran" });
      expect(error).toBeUndefined();
    } else if (refusal === "throw") {
      expectRefusal(row, error?.error);
      expect(seen.type).toBe("error-text");
      expect(String(seen.value)).toContain((row.message ?? row.says) as string);
    } else {
      expect(seen.type).toBe("text");
      expectRefusalText(row, String(seen.value));
      expect(error).toBeUndefined();
    }
    expectObserversLogged(row, setup.warnings);
  } finally {
    await setup.done();
  }
}

describe("guardTool: the conformance table in a generateText loop", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "generate", "throw"));
});

describe("guardTool: the conformance table in a streamText loop", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "stream", "throw"));
});

describe("guardTool, refusal as a message: the conformance table", () => {
  for (const row of ROWS) it(row.behaviour, () => driveRow(row, "generate", "message"));
});

describe("guardTool fails closed", () => {
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
        const { made, calls } = countingTool();
        const client = new InterlockClient({ url: server.url, apiKey: "k", timeoutMs: 200 });
        const tools = guardTools({ shell: made }, { client });
        const model = generatingModel([{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "ok" }]);
        const result = await generateText({ model, tools, prompt: "go", stopWhen: isStepCount(3) });
        expect(calls).toEqual([]);
        const error = result.steps[0]?.content.find((part) => part.type === "tool-error") as { error: unknown };
        expect(error.error).toBeInstanceOf(ActionUndetermined);
        expect((error.error as Error).message).toMatch(/^Interlock could not decide on tool 'shell', so it did not run: /);
      } finally {
        await server.stop();
      }
    });
  }

  it("a call whose SDK signal is aborted while judged never runs", async () => {
    const slow = await startMisbehavingServer("slow", 300);
    try {
      const { made, calls } = countingTool();
      const guarded = guardTool("shell", made, { client: new InterlockClient({ url: slow.url, apiKey: "k" }) });
      const host = new AbortController();
      setTimeout(() => host.abort(new Error("user pressed stop")), 30);
      const error = await (guarded.execute as (i: unknown, o: unknown) => Promise<unknown>)(
        { command: "ls" },
        { toolCallId: "c1", messages: [], abortSignal: host.signal, context: {} },
      ).catch((e: unknown) => e);
      await new Promise((done) => setTimeout(done, 400)); // the slow allow arrives: still nothing runs
      expect(calls).toEqual([]);
      expect(error).toBeInstanceOf(ActionUndetermined);
      expect((error as Error).message).toContain("the check was cancelled: user pressed stop");
    } finally {
      await slow.stop();
    }
  });
});

describe("interlockToolApproval: the native toolApproval bridge", () => {
  const live = inject("toolCalls");
  const client = new InterlockClient({ url: live.url, apiKey: live.agentKey });

  it("deny is execution-denied with the refusal as the reason; the body never runs", async () => {
    const { made, calls } = countingTool();
    const model = generatingModel([{ toolCall: { toolName: "shell", input: { command: "rm -rf /" } } }, { text: "ok" }]);
    await generateText({
      model,
      tools: { shell: made },
      toolApproval: interlockToolApproval({ client }),
      prompt: "go",
      stopWhen: isStepCount(3),
    });
    expect(calls).toEqual([]);
    const seen = toolResultSeen(model.doGenerateCalls[1]?.prompt ?? []);
    expect(seen.type).toBe("execution-denied");
    expect(seen.reason).toBe(ROWS.find((row) => row.behaviour === "deny never runs the body")?.message);
  });

  it("allow leaves the tool alone: the body runs", async () => {
    const { made, calls } = countingTool();
    const model = generatingModel([{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "ok" }]);
    await generateText({ model, tools: { shell: made }, toolApproval: interlockToolApproval({ client }), prompt: "go", stopWhen: isStepCount(3) });
    expect(calls).toEqual([{ command: "ls" }]);
  });

  it("require_approval waits for the human: approved runs the body once", async () => {
    const { made, calls } = countingTool();
    const model = generatingModel([{ toolCall: { toolName: "wire", input: { amount: 9, via: "bridge-ok" } } }, { text: "ok" }]);
    const human = approveWhenPending(stateful, true, (item) => item.action.arguments.via === "bridge-ok");
    await generateText({
      model,
      tools: { wire: made },
      toolApproval: interlockToolApproval({ client: budgeted, approvalTimeoutMs: 20_000 }),
      prompt: "go",
      stopWhen: isStepCount(3),
    });
    await human;
    expect(calls).toEqual([{ amount: 9, via: "bridge-ok" }]);
  });

  it("require_approval denied by the human: denied, never run", async () => {
    const { made, calls } = countingTool();
    const model = generatingModel([{ toolCall: { toolName: "wire", input: { amount: 9, via: "bridge-no" } } }, { text: "ok" }]);
    const human = approveWhenPending(stateful, false, (item) => item.action.arguments.via === "bridge-no");
    await generateText({
      model,
      tools: { wire: made },
      toolApproval: interlockToolApproval({ client: budgeted, approvalTimeoutMs: 20_000 }),
      prompt: "go",
      stopWhen: isStepCount(3),
    });
    await human;
    expect(calls).toEqual([]);
    const seen = toolResultSeen(model.doGenerateCalls[1]?.prompt ?? []);
    expect(seen.type).toBe("execution-denied");
    expect(seen.reason).toMatch(/^Interlock requires approval for tool 'wire' \(approve at https:\/\/approvals.example.com\/a\/apr_/);
  });

  it("native: require_approval hands the call to the SDK's user-approval flow", async () => {
    const { made, calls } = countingTool();
    const model = generatingModel([{ toolCall: { toolName: "wire", input: { amount: 3, via: "native" } } }, { text: "ok" }]);
    const result = await generateText({
      model,
      tools: { wire: made },
      toolApproval: interlockToolApproval({ client: budgeted, approval: "native" }),
      prompt: "go",
      stopWhen: isStepCount(3),
    });
    expect(calls).toEqual([]);
    const request = result.steps[0]?.content.find((part) => part.type === "tool-approval-request");
    expect(request).toBeDefined();
    expect(model.doGenerateCalls.length).toBe(1); // the run waits for the user
  });

  it("a server down is denied, never run", async () => {
    const { made, calls } = countingTool();
    const down = new InterlockClient({ url: await downServerUrl(), apiKey: "k" });
    const model = generatingModel([{ toolCall: { toolName: "shell", input: { command: "ls" } } }, { text: "ok" }]);
    await generateText({ model, tools: { shell: made }, toolApproval: interlockToolApproval({ client: down }), prompt: "go", stopWhen: isStepCount(3) });
    expect(calls).toEqual([]);
    expect(toolResultSeen(model.doGenerateCalls[1]?.prompt ?? []).reason).toMatch(/could not decide/);
  });
});

describe("interlockMiddleware: budgets on model calls", () => {
  it("generateText, two steps: each model call reserved before and committed with its usage", async () => {
    const before = await modelTokens();
    const { made, calls } = countingTool();
    const inner = generatingModel([
      { toolCall: { toolName: "paid_lookup", input: { q: "a" } }, usage: [11, 7] },
      { text: "answer", usage: [13, 4] },
    ]);
    const seenReserved: number[] = [];
    const original = inner.doGenerate.bind(inner);
    inner.doGenerate = async (options) => {
      seenReserved.push((await modelTokens()).reserved); // reserved before the provider call
      return original(options);
    };
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    const result = await generateText({ model, tools: { paid_lookup: made }, prompt: "go", stopWhen: isStepCount(3) });
    expect(result.text).toBe("answer");
    expect(calls.length).toBe(1);
    expect(seenReserved.every((reserved) => reserved > before.reserved)).toBe(true);
    const after = await modelTokens();
    expect(after.spent - before.spent).toBe(11 + 7 + 13 + 4);
    expect(after.reserved).toBe(before.reserved);
  });

  it("streamText, two steps: commits each finish part's usage exactly once", async () => {
    const before = await modelTokens();
    const { made } = countingTool();
    const inner = streamingModel([
      { toolCall: { toolName: "paid_lookup", input: { q: "b" } }, usage: [21, 9] },
      { text: "streamed", usage: [17, 3] },
    ]);
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    const result = streamText({ model, tools: { paid_lookup: made }, prompt: "go", stopWhen: isStepCount(3) });
    expect(await result.text).toBe("streamed");
    const after = await modelTokens();
    expect(after.spent - before.spent).toBe(21 + 9 + 17 + 3);
    expect(after.reserved).toBe(before.reserved);
  });

  it("an aborted stream releases: nothing spent, nothing held", async () => {
    const before = await modelTokens();
    let release!: () => void;
    const gate = new Promise<void>((done) => {
      release = done;
    });
    const parts = streamParts({ text: "never finished", usage: [50, 50] }, 0);
    const inner = new MockLanguageModelV4({
      modelId: "fake-model",
      doStream: async () => ({
        stream: new ReadableStream({
          async start(controller) {
            for (const part of parts.slice(0, 3)) controller.enqueue(part as never);
            await gate; // the rest never comes before the abort
          },
        }),
      }),
    });
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    const host = new AbortController();
    const result = streamText({ model, prompt: "go", abortSignal: host.signal });
    const seen: string[] = [];
    for await (const part of result.fullStream) {
      seen.push(part.type);
      if (part.type === "text-delta") {
        expect((await modelTokens()).reserved).toBeGreaterThan(before.reserved);
        host.abort();
      }
    }
    release();
    await new Promise((done) => setTimeout(done, 100));
    expect(seen).toContain("abort");
    expect(await modelTokens()).toEqual(before);
  });

  it("a stream that errors releases", async () => {
    const before = await modelTokens();
    const inner = new MockLanguageModelV4({
      modelId: "fake-model",
      doStream: async () => ({
        stream: new ReadableStream({
          start(controller) {
            controller.enqueue({ type: "stream-start", warnings: [] } as never);
            controller.error(new Error("provider connection reset"));
          },
        }),
      }),
    });
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    const seen: { type: string; error?: unknown }[] = [];
    const result = streamText({ model, prompt: "go", maxRetries: 0, onError: () => {} });
    const thrown = await (async () => {
      for await (const part of result.fullStream) seen.push(part);
    })().catch((error: unknown) => error);
    const error = thrown ?? seen.find((part) => part.type === "error")?.error;
    expect(String(error)).toContain("provider connection reset");
    expect(await modelTokens()).toEqual(before);
  });

  it("a provider that throws releases", async () => {
    const before = await modelTokens();
    const inner = new MockLanguageModelV4({
      modelId: "fake-model",
      doGenerate: async () => {
        throw new Error("provider 503");
      },
    });
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    await expect(generateText({ model, prompt: "go", maxRetries: 0 })).rejects.toThrow("provider 503");
    expect(await modelTokens()).toEqual(before);
  });

  it("a model call over the budget is refused before the provider is called", async () => {
    const inner = generatingModel([{ text: "never" }]);
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: budgeted }) });
    const error = await generateText({ model, prompt: "go", maxOutputTokens: 5000, maxRetries: 0 }).catch((e: unknown) => e);
    expect(inner.doGenerateCalls.length).toBe(0);
    const cause = error instanceof ActionDenied ? error : (error as { cause?: unknown; lastError?: unknown }).lastError ?? (error as { cause?: unknown }).cause ?? error;
    expect(cause).toBeInstanceOf(InterlockBlocked);
    expect((cause as Error).message).toMatch(/^Interlock denied llm 'fake-model': /);
  });

  it("a model no rule allows is refused, the policy's hint said", async () => {
    const live = inject("toolCalls");
    const inner = generatingModel([{ text: "never" }]);
    const middleware = interlockMiddleware({ client: new InterlockClient({ url: live.url, apiKey: live.agentKey }) });
    const model = wrapLanguageModel({ model: inner, middleware });
    const error = await generateText({ model, prompt: "go", maxRetries: 0 }).catch((e: unknown) => e);
    expect(inner.doGenerateCalls.length).toBe(0);
    expect(String((error as Error).message)).toContain("no rule allows this model: add one with kind: llm");
  });

  it("the server down: the model call is undetermined, the provider never called", async () => {
    const inner = streamingModel([{ text: "never" }]);
    const down = new InterlockClient({ url: await downServerUrl(), apiKey: "k" });
    const model = wrapLanguageModel({ model: inner, middleware: interlockMiddleware({ client: down }) });
    const errors: unknown[] = [];
    const result = streamText({ model, prompt: "go", maxRetries: 0, onError: ({ error }) => void errors.push(error) });
    await result.consumeStream();
    expect(inner.doStreamCalls.length).toBe(0);
    expect(errors[0]).toBeInstanceOf(ActionUndetermined);
  });

  it("reads v4 nested and flat usage", () => {
    expect(usageOf({ inputTokens: { total: 3 }, outputTokens: { total: 4 } })).toEqual({ inputTokens: 3, outputTokens: 4 });
    expect(usageOf({ inputTokens: 5, outputTokens: 6 })).toEqual({ inputTokens: 5, outputTokens: 6 });
    expect(usageOf({ inputTokens: { total: undefined }, outputTokens: {} })).toBeNull();
    expect(usageOf(undefined)).toBeNull();
  });
});

void convertArrayToReadableStream;
