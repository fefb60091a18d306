/**
 * LangChain.js / LangGraph.js against a live `interlock serve`: a real `createAgent`
 * loop on `fakeModel()` (invoke and stream), a guarded tool on its own and in a
 * LangGraph `ToolNode`; the conformance table through each, the fail-closed rows, a
 * cancelled run.
 */
import { AIMessage, type BaseMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import { createAgent, createMiddleware, tool } from "langchain";
import { afterEach, describe, expect, inject, it } from "vitest";
import { z } from "zod";

import { type LangChainGuardOptions, guardTool, interlockMiddleware, toolCallAction } from "../src/adapters/langchain.js";
import { InterlockClient } from "../src/client.js";
import { ActionDenied, ActionUndetermined } from "../src/errors.js";
import type { Decision } from "../src/types.js";
import {
  FAILURES,
  LOOKUP_CHARGE,
  LOOKUP_COST,
  TABLE,
  type Outcome,
  adapterOptions,
  expectRow,
  expectUndetermined,
  failingClient,
  setUpRow,
  toolSpend,
} from "./support/adapter-rows.js";
import { ActionDenied as PublishedActionDenied } from "interlock-guard";
import { main as example } from "../examples/langchain.js";
import { exampleSource, pagePolicy, tsBlocks } from "./support/adapter-docs.js";
import { startMisbehavingServer, startServer } from "./support/server.js";

const server = inject("toolCalls");

/** The table's two tools, counting their runs. */
function tools() {
  const runs = { shell: 0, pay: 0 };
  const shell = tool(
    async ({ command }: { command: string }) => {
      runs.shell += 1;
      return `ran ${command}`;
    },
    { name: "shell", description: "run a shell command", schema: z.object({ command: z.string() }) },
  );
  const pay = tool(
    async ({ amount }: { amount: unknown }) => {
      runs.pay += 1;
      return `paid ${String(amount)}`;
    },
    { name: "pay", description: "pay an amount", schema: z.object({ amount: z.unknown() }) },
  );
  return { runs, shell, pay, count: () => runs.shell + runs.pay };
}

/** A model that calls `name(args)` once, then answers "done". */
function modelCalling(name: string, args: Record<string, unknown>) {
  return fakeModel()
    .respondWithTools([{ name, args, id: "call-1" }])
    .respond(new AIMessage("done"));
}

function toolMessage(messages: BaseMessage[]): ToolMessage {
  const found = messages.find((message) => ToolMessage.isInstance(message));
  if (!found) throw new Error("the run has no tool message");
  return found as ToolMessage;
}

/** The refusal the model read, or null when the tool's result came back. */
function refusalIn(message: ToolMessage): string | null {
  return message.status === "error" ? String(message.content) : null;
}

type Mode = "invoke" | "stream";

async function runAgent(
  mode: Mode,
  options: LangChainGuardOptions,
  name: string,
  args: Record<string, unknown>,
  signal?: AbortSignal,
  kit = tools(),
) {
  const agent = createAgent({
    model: modelCalling(name, args),
    tools: [kit.shell, kit.pay],
    middleware: [interlockMiddleware(options)],
  });
  const input = { messages: [{ role: "user", content: "go" }] };
  let messages: BaseMessage[];
  if (mode === "invoke") {
    messages = (await agent.invoke(input, signal ? { signal } : {})).messages;
  } else {
    let last: { messages: BaseMessage[] } | undefined;
    for await (const chunk of await agent.stream(input, { streamMode: "values", ...(signal ? { signal } : {}) })) {
      last = chunk as { messages: BaseMessage[] };
    }
    messages = last?.messages ?? [];
  }
  return { kit, messages };
}

describe.each(["invoke", "stream"] as const)("the middleware in a createAgent loop (%s)", (mode) => {
  it.each(TABLE.rows)("$behaviour", async (row) => {
    const run = await setUpRow(row);
    try {
      const { kit, messages } = await runAgent(mode, adapterOptions(run, toolCallAction), row.tool, row.args);
      const answer = toolMessage(messages);
      const outcome: Outcome = { ran: kit.count(), refusal: refusalIn(answer) };
      expectRow(row, run, outcome);
      if (!row.runs) expect(answer.content).toBe(outcome.refusal);
      // The loop went on: the model read the tool message and answered.
      expect(messages.at(-1)?.content).toBe("done");
    } finally {
      await run.stop();
    }
  });
});

describe("the middleware's refusals", () => {
  it("gives Python's exact words, and the approval URL where the policy names one", async () => {
    const row = TABLE.rows.find((item) => item.verdict === "require_approval")!;
    const run = await setUpRow(row);
    const { messages } = await runAgent("invoke", adapterOptions(run, toolCallAction), "pay", { amount: 500 });
    const answer = toolMessage(messages);
    expect(answer.status).toBe("error");
    expect(answer.tool_call_id).toBe("call-1");
    expect(answer.name).toBe("pay");
    expect(answer.content).toBe(row.message);

    const stateful = inject("stateful");
    let wired = 0;
    const wire = tool(
      async () => {
        wired += 1;
        return "sent";
      },
      { name: "wire", description: "wire money", schema: z.object({ to: z.string() }) },
    );
    const agent = createAgent({
      model: modelCalling("wire", { to: "acme" }),
      tools: [wire],
      middleware: [interlockMiddleware({ client: new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey }) })],
    });
    const held = toolMessage((await agent.invoke({ messages: [{ role: "user", content: "go" }] })).messages);
    expect(held.content).toMatch(
      /^Interlock requires approval for tool 'wire' \(approve at https:\/\/approvals\.example\.com\/a\/\S+\): wires need a human$/,
    );
    expect(wired).toBe(0);
  });

  it("throws instead when asked: the run ends and the tool never ran", async () => {
    const decisions: Decision[] = [];
    const options: LangChainGuardOptions = {
      client: new InterlockClient({ url: server.url, apiKey: server.agentKey }),
      refusal: "throw",
      onDecision: (decision) => decisions.push(decision),
    };
    const kit = tools();
    const agent = createAgent({
      model: modelCalling("shell", { command: "rm -rf /" }),
      tools: [kit.shell],
      middleware: [interlockMiddleware(options)],
    });
    const failure = await agent.invoke({ messages: [{ role: "user", content: "go" }] }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(Error);
    // LangChain wraps it (MiddlewareError); the refusal is its cause.
    let cause: unknown = failure;
    while (cause instanceof Error && !(cause instanceof ActionDenied) && cause.cause !== undefined) cause = cause.cause;
    expect(cause).toBeInstanceOf(ActionDenied);
    expect(kit.count()).toBe(0);
    expect(decisions.map((decision) => decision.verdict)).toEqual(["deny"]);
  });

  it.each(FAILURES)("fails closed when the server is %s: undetermined, the tool not run", async (how) => {
    const { client, stop } = await failingClient(how);
    try {
      const { kit, messages } = await runAgent("invoke", { client }, "shell", { command: "ls" });
      expect(kit.count()).toBe(0);
      expectUndetermined(refusalIn(toolMessage(messages)));
    } finally {
      await stop();
    }
  });

  it("a run cancelled while the call is judged never runs the tool", async () => {
    const slow = await startMisbehavingServer("slow", 2000);
    const decisions: Decision[] = [];
    const controller = new AbortController();
    try {
      const options: LangChainGuardOptions = {
        client: new InterlockClient({ url: slow.url, apiKey: "k" }),
        onDecision: (decision) => {
          decisions.push(decision);
        },
      };
      setTimeout(() => controller.abort(new Error("the user left")), 200);
      const kit = tools();
      await runAgent("invoke", options, "shell", { command: "ls" }, controller.signal, kit).catch(() => null);
      // The run's signal reached the check: undetermined, whatever LangGraph does next.
      expect(decisions.map((decision) => decision.verdict)).toEqual(["undetermined"]);
      expect(decisions[0]?.cause).toMatch(/cancelled/);
      expect(kit.count()).toBe(0);
      expect(slow.requests).toBe(1);
    } finally {
      await slow.stop();
    }
  });
});

describe("guardTool: a tool that judges its own calls", () => {
  const options = (): LangChainGuardOptions => ({
    client: new InterlockClient({ url: server.url, apiKey: server.agentKey }),
  });

  it("invoked directly: allow runs, a refusal throws and never runs the body", async () => {
    const kit = tools();
    const shell = guardTool(kit.shell, options());
    expect(await shell.invoke({ command: "ls" })).toBe("ran ls");
    await expect(shell.invoke({ command: "rm -rf /" })).rejects.toBeInstanceOf(ActionDenied);
    expect(kit.runs.shell).toBe(1);
    // The original tool is untouched.
    expect(await kit.shell.invoke({ command: "rm -rf /" })).toBe("ran rm -rf /");
  });

  it("judges what the tool receives: the arguments its schema parsed", async () => {
    const seen: unknown[] = [];
    const kit = tools();
    const shell = guardTool(kit.shell, {
      ...options(),
      map: (call) => {
        seen.push(call.args);
        return { kind: "tool", name: call.name, arguments: call.args };
      },
    });
    await shell.invoke({ command: "ls", extra: "dropped by the schema" } as { command: string });
    expect(seen).toEqual([{ command: "ls" }]);
  });

  it.each(TABLE.rows)("in a LangGraph ToolNode: $behaviour", async (row) => {
    const run = await setUpRow(row);
    try {
      const kit = tools();
      const options = adapterOptions(run, toolCallAction);
      const node = new ToolNode([guardTool(kit.shell, options), guardTool(kit.pay, options)]);
      const call = new AIMessage({ content: "", tool_calls: [{ name: row.tool, args: row.args, id: "call-1" }] });
      const { messages } = (await node.invoke({ messages: [call] })) as { messages: ToolMessage[] };
      const answer = messages[0]!;
      expectRow(row, run, { ran: kit.count(), refusal: refusalIn(answer) });
      if (!row.runs) {
        expect(answer.tool_call_id).toBe("call-1");
        expect(answer.content).toBe(row.message ?? answer.content);
      }
    } finally {
      await run.stop();
    }
  });

  it("in a createAgent loop without the middleware, the model reads the refusal", async () => {
    const kit = tools();
    const agent = createAgent({
      model: modelCalling("shell", { command: "rm -rf /" }),
      tools: [guardTool(kit.shell, options())],
    });
    const { messages } = await agent.invoke({ messages: [{ role: "user", content: "go" }] });
    const answer = toolMessage(messages);
    expect(answer.status).toBe("error");
    expect(String(answer.content)).toMatch(/^Interlock denied tool 'shell': no recursive deletes/);
    expect(kit.count()).toBe(0);
  });

  it("under the middleware a call is judged once, not twice", async () => {
    const decisions: Decision[] = [];
    const shared: LangChainGuardOptions = { ...options(), onDecision: (decision) => decisions.push(decision) };
    const kit = tools();
    const agent = createAgent({
      model: modelCalling("shell", { command: "ls" }),
      tools: [guardTool(kit.shell, shared)],
      middleware: [interlockMiddleware(shared)],
    });
    await agent.invoke({ messages: [{ role: "user", content: "go" }] });
    expect(kit.count()).toBe(1);
    expect(decisions.map((decision) => decision.verdict)).toEqual(["allow"]);
  });

  it.each(FAILURES)("fails closed when the server is %s", async (how) => {
    const { client, stop } = await failingClient(how);
    try {
      const kit = tools();
      const shell = guardTool(kit.shell, { client });
      const failure = await shell.invoke({ command: "ls" }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(ActionUndetermined);
      expect(kit.count()).toBe(0);
    } finally {
      await stop();
    }
  });

  it("refuses what is not a LangChain tool", () => {
    expect(() => guardTool({ name: "x" }, options())).toThrow(/takes a LangChain tool/);
  });
});

describe("docs/typescript-langchain.md", () => {
  it("shows examples/langchain.ts verbatim", () => {
    expect(tsBlocks("typescript-langchain.md")).toContain(exampleSource("langchain.ts"));
  });

  it("its example runs under its policy as it says", async () => {
    const live = await startServer(pagePolicy("typescript-langchain.md"));
    try {
      const result = await example({ INTERLOCK_URL: live.url, INTERLOCK_KEY: live.agentKey });
      expect(result.status).toBe("error");
      expect(result.refusal).toMatch(/^Interlock denied tool 'shell': no recursive deletes/);
      expect(result.answer).toBe("I am not allowed to delete that.");
      expect(result.listing).toBe("ran ls");
      // The example runs the built package: its ActionDenied, not src's.
      expect(result.blocked).toBeInstanceOf(PublishedActionDenied);
      expect((result.blocked as ActionDenied).decision.ruleIds).toEqual(["no-rm"]);
    } finally {
      await live.stop();
    }
  }, 120_000); // a server of its own: slow to start on a loaded machine
});

describe("judged once: only the very call the middleware judged skips a guarded tool's check", () => {
  const client = () => new InterlockClient({ url: server.url, apiKey: server.agentKey });

  /** A middleware placed after Interlock's that hands the tool another call. */
  const rewriting = (args: Record<string, unknown> | null) =>
    createMiddleware({
      name: "Rewriter",
      wrapToolCall: async (request, handler) =>
        handler(args ? { ...request, toolCall: { ...request.toolCall, args } } : request),
    });

  async function run(
    calls: { name: string; args: Record<string, unknown>; id: string }[],
    middleware: ReturnType<typeof createMiddleware>[],
    tool: LangChainGuardOptions,
  ) {
    const kit = tools();
    const agent = createAgent({
      model: fakeModel().respondWithTools(calls).respond(new AIMessage("done")),
      tools: [guardTool(kit.shell, tool)],
      middleware,
    });
    const { messages } = await agent.invoke({ messages: [{ role: "user", content: "go" }] });
    const answers = messages.filter((message) => ToolMessage.isInstance(message)) as ToolMessage[];
    return { ran: kit.runs.shell, answers };
  }

  // [case, tool calls, middleware after Interlock's rewrites to, middleware mapper passes, tool runs, checks]
  const cases: [string, Record<string, unknown>[], Record<string, unknown> | null, boolean, number, string[]][] = [
    ["benign: the judged call reaches the tool unchanged", [{ command: "ls" }], null, false, 1, ["allow"]],
    ["benign: a middleware that hands the call on unchanged", [{ command: "ls" }], { command: "ls" }, false, 1, ["allow"]],
    ["a middleware rewrites the judged call into another", [{ command: "ls" }], { command: "rm -rf /" }, false, 0, ["allow", "deny"]],
    ["the middleware's mapper passes the call through", [{ command: "rm -rf /" }], null, true, 0, ["deny"]],
    ["two calls share one id: the refused one never runs", [{ command: "ls" }, { command: "rm -rf /" }], null, false, 1, ["allow", "deny"]],
  ];

  it.each(cases)("%s", async (_name, calls, rewriteTo, passThrough, runs, verdicts) => {
    const decisions: Decision[] = [];
    const onDecision = (decision: Decision) => decisions.push(decision);
    const middleware = [
      interlockMiddleware({ client: client(), onDecision, ...(passThrough ? { map: () => null } : {}) }),
      ...(rewriteTo ? [rewriting(rewriteTo)] : []),
    ];
    const result = await run(
      calls.map((args) => ({ name: "shell", args, id: "same-id" })),
      middleware,
      { client: client(), onDecision },
    );
    expect(result.ran).toBe(runs);
    expect(decisions.map((decision) => decision.verdict).sort()).toEqual([...verdicts].sort());
    expect(result.answers.filter((answer) => answer.status === "error")).toHaveLength(calls.length - runs);
  });
});

describe("a tool with a cost: its reservation is settled", () => {
  const stateful = inject("stateful");
  const client = () => new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey });
  const lookup = (fail: boolean) =>
    tool(
      async ({ q }: { q: string; est_cost: number }) => {
        if (fail) throw new Error("the lookup service is down");
        return `found ${q}`;
      },
      { name: "paid_lookup", description: "a paid lookup", schema: z.object({ q: z.string(), est_cost: z.number() }) },
    );

  it("the middleware commits what an allowed call reserved, once it ran", async () => {
    const before = await toolSpend(stateful);
    const agent = createAgent({
      model: modelCalling("paid_lookup", { q: "a", est_cost: LOOKUP_COST }),
      tools: [lookup(false)],
      middleware: [interlockMiddleware({ client: client() })],
    });
    await agent.invoke({ messages: [{ role: "user", content: "go" }] });
    const after = await toolSpend(stateful);
    expect(after.spent - before.spent).toBe(LOOKUP_CHARGE);
    expect(after.reserved).toBe(before.reserved);
  });

  it("a guarded tool releases it when the tool fails", async () => {
    const before = await toolSpend(stateful);
    const failing = guardTool(lookup(true), { client: client() });
    await expect(failing.invoke({ q: "b", est_cost: LOOKUP_COST })).rejects.toThrow(/lookup service is down/);
    const after = await toolSpend(stateful);
    expect(after.spent).toBe(before.spent);
    expect(after.reserved).toBe(before.reserved);
  });
});
