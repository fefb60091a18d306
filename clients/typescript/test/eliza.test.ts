/**
 * ElizaOS against a live `interlock serve`: a real `AgentRuntime` (`registerAction`,
 * `processActions`) on the smallest database adapter it accepts — an object with the
 * two methods `processActions` uses, `createMemory` and `log`, recording what the
 * runtime wrote. No model is needed: the model's answer is the response memory naming
 * the action, exactly what `processActions` receives from the message loop.
 */
import * as elizaos from "@elizaos/core";
import { describe, expect, inject, it } from "vitest";

import {
  type Action,
  type ElizaGuardOptions,
  elizaAction,
  guardAction,
  guardHandler,
  interlockValidator,
} from "../src/adapters/eliza.js";
import { InterlockClient } from "../src/client.js";
import type { Decision } from "../src/types.js";
import {
  FAILURES,
  LOOKUP_CHARGE,
  LOOKUP_COST,
  TABLE,
  adapterOptions,
  expectRow,
  expectUndetermined,
  failingClient,
  setUpRow,
  toolSpend,
} from "./support/adapter-rows.js";
import { guardedPlugin } from "../examples/eliza.js";
import { exampleSource, pagePolicy, tsBlocks } from "./support/adapter-docs.js";
import { startMisbehavingServer, startServer } from "./support/server.js";

const server = inject("toolCalls");

/** The runtime, typed by hand: `@elizaos/core`'s declarations do not resolve under
 * NodeNext (extensionless re-exports), its JavaScript does. */
interface Runtime {
  registerAction(action: Action): void;
  processActions(message: unknown, responses: unknown[], state: unknown, callback: unknown): Promise<void>;
}
const { AgentRuntime } = elizaos as unknown as {
  AgentRuntime: new (options: { character: { name: string; bio: string }; adapter: unknown }) => Runtime;
};

const USER = "00000000-0000-4000-8000-000000000001";
const ROOM = "00000000-0000-4000-8000-000000000002";

interface Written {
  table: string;
  actionName: unknown;
  actionStatus: unknown;
  text: unknown;
}

/** A runtime on the smallest in-memory database adapter `processActions` needs. */
function runtimeWith(actions: Action[]) {
  const written: Written[] = [];
  const adapter = {
    async createMemory(memory: { content: Record<string, unknown> }, table: string) {
      const { actionName, actionStatus, text } = memory.content;
      written.push({ table, actionName, actionStatus, text });
      return "00000000-0000-4000-8000-00000000000a";
    },
    async log() {},
  };
  const runtime = new AgentRuntime({
    character: { name: "guarded", bio: "an agent whose actions Interlock judges" },
    adapter,
  });
  for (const action of actions) runtime.registerAction(action);
  return { runtime, written };
}

/** The user's message carrying the call's arguments, and the model's answer naming it. */
function turn(actionName: string, args: Record<string, unknown>) {
  const message = { id: "00000000-0000-4000-8000-000000000010", entityId: USER, roomId: ROOM, content: { text: "please", ...args } };
  const response = {
    id: "00000000-0000-4000-8000-000000000011",
    entityId: USER,
    roomId: ROOM,
    content: { text: "", actions: [actionName] },
  };
  return { message, response };
}

/** The table's two actions, counting their runs; `validate` says yes. */
function actions() {
  const runs = { shell: 0, pay: 0 };
  const make = (name: "shell" | "pay"): Action => ({
    name,
    description: `${name} for the user`,
    similes: [],
    examples: [],
    validate: async () => true,
    handler: async () => {
      runs[name] += 1;
      return { success: true, text: `${name} done` };
    },
  });
  return { runs, shell: make("shell"), pay: make("pay"), count: () => runs.shell + runs.pay };
}

async function process(runtime: Runtime, name: string, args: Record<string, unknown>) {
  const { message, response } = turn(name, args);
  await runtime.processActions(message, [response], undefined, async () => []);
}

describe("the runtime does not enforce validate", () => {
  it("a validator alone lets a refused action's handler run; the guarded handler does not", async () => {
    const client = new InterlockClient({ url: server.url, apiKey: server.agentKey });
    // The validator alone: it says no, and the runtime runs the handler anyway.
    const kit = actions();
    const validatorOnly: Action = { ...kit.shell, validate: interlockValidator(kit.shell, { client }) };
    const bare = runtimeWith([validatorOnly]);
    const { message } = turn("shell", { command: "rm -rf /" });
    expect(await validatorOnly.validate(bare.runtime, message)).toBe(false);
    await process(bare.runtime, "shell", { command: "rm -rf /" });
    expect(kit.runs.shell).toBe(1); // ran: validate was never asked

    // The guarded action: the same call never reaches the body.
    const guardedKit = actions();
    const guarded = runtimeWith([guardAction(guardedKit.shell, { client })]);
    await process(guarded.runtime, "shell", { command: "rm -rf /" });
    expect(guardedKit.runs.shell).toBe(0);
    const record = guarded.written.find((row) => row.actionName === "shell");
    expect(record?.actionStatus).toBe("failed");
    expect(record?.text).toMatch(/^Interlock denied tool 'shell': no recursive deletes/);
  });
});

describe("guardAction through runtime.processActions", () => {
  it.each(TABLE.rows)("$behaviour", async (row) => {
    const run = await setUpRow(row);
    try {
      const kit = actions();
      const options: ElizaGuardOptions = adapterOptions(run, elizaAction);
      const { runtime, written } = runtimeWith([guardAction(kit.shell, options), guardAction(kit.pay, options)]);
      await process(runtime, row.tool, row.args);
      const record = written.find((item) => item.actionName === row.tool);
      expect(record).toBeDefined();
      const refusal = record!.actionStatus === "failed" ? String(record!.text) : null;
      expectRow(row, run, { ran: kit.count(), refusal });
      expect(record!.actionStatus).toBe(row.runs ? "completed" : "failed");
    } finally {
      await run.stop();
    }
  });
});

describe("the validator", () => {
  it.each(TABLE.rows)("$behaviour: true only when the call may run", async (row) => {
    const run = await setUpRow(row);
    try {
      const kit = actions();
      const action = kit[row.tool as "shell" | "pay"];
      const validate = interlockValidator(action, adapterOptions(run, elizaAction));
      const { runtime } = runtimeWith([]);
      const { message } = turn(row.tool, row.args);
      expect(await validate(runtime, message)).toBe(row.runs);
      expect(kit.count()).toBe(0);
      expect(run.decisions.map((decision) => decision.verdict)).toEqual(row.verdict === null ? [] : [row.verdict]);
    } finally {
      await run.stop();
    }
  });

  it("surfaces the reason to the observer and the runtime's logger", async () => {
    const blocked: string[] = [];
    const logged: unknown[][] = [];
    const kit = actions();
    const validate = interlockValidator(kit.shell, {
      client: new InterlockClient({ url: server.url, apiKey: server.agentKey }),
      onBlocked: (refusal) => blocked.push(refusal.message),
    });
    const runtime = { logger: { warn: (...args: unknown[]) => logged.push(args) } };
    expect(await validate(runtime, turn("shell", { command: "rm -rf /" }).message)).toBe(false);
    expect(blocked).toEqual([expect.stringMatching(/no recursive deletes/)]);
    expect(logged[0]?.[1]).toBe(blocked[0]);
  });

  it("guardAction asks the action's own validate first: a no there costs no check", async () => {
    const decisions: Decision[] = [];
    const kit = actions();
    const own: Action = { ...kit.shell, validate: async () => false };
    const guarded = guardAction(own, {
      client: new InterlockClient({ url: server.url, apiKey: server.agentKey }),
      onDecision: (decision) => decisions.push(decision),
    });
    const { runtime } = runtimeWith([]);
    expect(await guarded.validate(runtime, turn("shell", { command: "ls" }).message)).toBe(false);
    expect(decisions).toEqual([]);
  });
});

describe("failing closed", () => {
  it.each(FAILURES)("when the server is %s: validate false, the handler refuses, the body not run", async (how) => {
    const { client, stop } = await failingClient(how);
    try {
      const kit = actions();
      const { runtime, written } = runtimeWith([guardAction(kit.shell, { client })]);
      const { message } = turn("shell", { command: "ls" });
      expect(await interlockValidator(kit.shell, { client })(runtime, message)).toBe(false);
      await process(runtime, "shell", { command: "ls" });
      expect(kit.count()).toBe(0);
      expectUndetermined(String(written.find((item) => item.actionName === "shell")?.text));
    } finally {
      await stop();
    }
  });

  it("an aborted signal is undetermined: the handler never runs", async () => {
    const slow = await startMisbehavingServer("slow", 2000);
    try {
      const controller = new AbortController();
      const kit = actions();
      const decisions: Decision[] = [];
      const handler = guardHandler(kit.shell, {
        client: new InterlockClient({ url: slow.url, apiKey: "k" }),
        signal: controller.signal,
        onDecision: (decision) => decisions.push(decision),
      });
      setTimeout(() => controller.abort(new Error("the agent stopped")), 100);
      const { runtime } = runtimeWith([]);
      const result = (await handler(runtime, turn("shell", { command: "ls" }).message)) as { success: boolean };
      expect(result.success).toBe(false);
      expect(kit.count()).toBe(0);
      expect(decisions.map((decision) => decision.verdict)).toEqual(["undetermined"]);
      expect(decisions[0]?.cause).toMatch(/cancelled/);
    } finally {
      await slow.stop();
    }
  });

  it("the refused result carries the decision for a program", async () => {
    const kit = actions();
    const handler = guardHandler(kit.pay, { client: new InterlockClient({ url: server.url, apiKey: server.agentKey }) });
    const { runtime } = runtimeWith([]);
    const result = (await handler(runtime, turn("pay", { amount: 500 }).message)) as {
      success: boolean;
      data: { interlock: { verdict: string; approvalId: string | null; decisionId: string } };
    };
    expect(result.success).toBe(false);
    expect(result.data.interlock.verdict).toBe("require_approval");
    expect(result.data.interlock.approvalId).toMatch(/\S/);
    expect(result.data.interlock.decisionId).toMatch(/\S/);
    expect(kit.count()).toBe(0);
  });
});

describe("docs/typescript-elizaos.md", () => {
  it("shows examples/eliza.ts verbatim", () => {
    expect(tsBlocks("typescript-elizaos.md")).toContain(exampleSource("eliza.ts"));
  });

  it("its example runs under its policy as it says", async () => {
    const live = await startServer(pagePolicy("typescript-elizaos.md"));
    try {
      const plugin = guardedPlugin({ INTERLOCK_URL: live.url, INTERLOCK_KEY: live.agentKey });
      const { runtime, written } = runtimeWith(plugin.actions);
      await process(runtime, "TRANSFER", { to: "acme", amount: 50 });
      await process(runtime, "TRANSFER", { to: "acme", amount: 500 });
      expect(written.map((item) => [item.actionStatus, item.text])).toEqual([
        ["completed", "sent 50 to acme"],
        ["failed", "Interlock requires approval for tool 'transfer': large transfers need a human"],
      ]);
      const validate = plugin.actions[0]!.validate;
      expect(await validate(runtime, turn("TRANSFER", { to: "acme", amount: 50 }).message)).toBe(true);
      expect(await validate(runtime, turn("TRANSFER", { to: "acme", amount: 500 }).message)).toBe(false);
    } finally {
      await live.stop();
    }
  }, 120_000); // a server of its own: slow to start on a loaded machine
});

describe("an action with a cost: its reservation is settled", () => {
  const stateful = inject("stateful");
  const client = () => new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey });
  const lookup = (success: boolean): Action => ({
    name: "paid_lookup",
    description: "a paid lookup",
    validate: async () => true,
    handler: async () => ({ success, text: success ? "found" : "the lookup service is down" }),
  });
  const args = { q: "a", est_cost: LOOKUP_COST };

  it.each([
    ["completed: committed", true, LOOKUP_CHARGE],
    ["failed: released", false, 0],
  ] as const)("an action that %s", async (_name, success, charged) => {
    const before = await toolSpend(stateful);
    const { runtime } = runtimeWith([guardAction(lookup(success), { client: client() })]);
    await process(runtime, "paid_lookup", args);
    const after = await toolSpend(stateful);
    expect(after.spent - before.spent).toBe(charged);
    expect(after.reserved).toBe(before.reserved);
  });

  it("the validator asks without spending: what an allow reserved is released", async () => {
    const before = await toolSpend(stateful);
    const validate = interlockValidator(lookup(true), { client: client() });
    const { runtime } = runtimeWith([]);
    expect(await validate(runtime, turn("paid_lookup", args).message)).toBe(true);
    const after = await toolSpend(stateful);
    expect(after).toEqual(before);
  });
});
