/**
 * The MCP TypeScript SDK against a live `interlock serve`: a real `McpServer` and
 * `Client` over `InMemoryTransport.createLinkedPair()`. Server side, the guarded tool
 * callbacks; client side, the guarded `callTool` (a refused call never reaches the
 * server). The conformance table through both, the fail-closed rows, a cancelled call.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, inject, it } from "vitest";
import { z } from "zod";

import {
  DECISION_META_KEY,
  type McpGuardOptions,
  guardClient,
  guardMcpServer,
  guardToolHandler,
  mcpAction,
} from "../src/adapters/mcp.js";
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
import { main as example } from "../examples/mcp.js";
import { exampleSource, pagePolicy, tsBlocks } from "./support/adapter-docs.js";
import { startMisbehavingServer, startServer } from "./support/server.js";

const interlock = inject("toolCalls");

interface ToolResult {
  content: { type: string; text?: string }[];
  isError?: boolean;
  _meta?: Record<string, unknown>;
}

/** A server with the table's two tools (guarded when `guard` is given), and a client
 * connected to it (guarded when `guardTheClient` is given). */
async function connect(guard?: McpGuardOptions, guardTheClient?: McpGuardOptions) {
  const runs = { shell: 0, pay: 0, ping: 0 };
  const server = new McpServer({ name: "tools", version: "1.0.0" });
  if (guard) guardMcpServer(server, guard);
  server.registerTool("shell", { description: "run a command", inputSchema: { command: z.string() } }, async ({ command }) => {
    runs.shell += 1;
    return { content: [{ type: "text", text: `ran ${command}` }] };
  });
  server.registerTool("pay", { description: "pay", inputSchema: { amount: z.unknown() } }, async ({ amount }) => {
    runs.pay += 1;
    return { content: [{ type: "text", text: `paid ${String(amount)}` }] };
  });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: "agent", version: "1.0.0" });
  if (guardTheClient) guardClient(client, guardTheClient);
  await client.connect(clientSide);
  return {
    runs,
    client,
    count: () => runs.shell + runs.pay,
    call: async (name: string, args: Record<string, unknown>, signal?: AbortSignal) =>
      (await client.callTool({ name, arguments: args }, undefined, signal ? { signal } : undefined)) as ToolResult,
    close: async () => {
      await client.close();
      await server.close();
    },
  };
}

function refusalIn(result: ToolResult): string | null {
  return result.isError ? (result.content[0]?.text ?? "") : null;
}

describe.each(["server", "client"] as const)("the %s-side guard", (side) => {
  it.each(TABLE.rows)("$behaviour", async (row) => {
    const run = await setUpRow(row);
    const options = adapterOptions(run, mcpAction);
    const mcp = await connect(side === "server" ? options : undefined, side === "client" ? options : undefined);
    try {
      const result = await mcp.call(row.tool, row.args);
      expectRow(row, run, { ran: mcp.count(), refusal: refusalIn(result) }, "mcp");
      if (!row.runs) {
        const meta = result._meta?.[DECISION_META_KEY] as { verdict: string; decision_id: string; rule_ids: string[] };
        expect(meta.verdict).toBe(row.verdict);
        expect(meta.rule_ids).toEqual(run.decisions[0]?.ruleIds ?? []);
        if (meta.decision_id) expect(refusalIn(result)).toContain(`(decision ${meta.decision_id})`);
      }
    } finally {
      await mcp.close();
      await run.stop();
    }
  });

  it.each(FAILURES)("fails closed when the Interlock server is %s", async (how) => {
    const { client, stop } = await failingClient(how);
    const mcp = await connect(side === "server" ? { client } : undefined, side === "client" ? { client } : undefined);
    try {
      const result = await mcp.call("shell", { command: "ls" });
      expect(result.isError).toBe(true);
      expectUndetermined(refusalIn(result));
      expect(mcp.count()).toBe(0);
    } finally {
      await mcp.close();
      await stop();
    }
  });
});

describe("the approval a refusal names", () => {
  it("carries the approval id in _meta and never runs the body", async () => {
    const client = new InterlockClient({ url: interlock.url, apiKey: interlock.agentKey });
    const mcp = await connect({ client });
    try {
      const result = await mcp.call("pay", { amount: 500 });
      const meta = result._meta?.[DECISION_META_KEY] as { verdict: string; approval_id?: string };
      expect(meta.verdict).toBe("require_approval");
      expect(meta.approval_id).toMatch(/\S/);
      expect(refusalIn(result)).toMatch(/^Interlock requires approval for MCP tool 'pay': big payments need a human/);
      expect(mcp.runs.pay).toBe(0);
    } finally {
      await mcp.close();
    }
  });
});

describe("the client-side guard", () => {
  it("a refused call is never sent: the server sees only the allowed one", async () => {
    const client = new InterlockClient({ url: interlock.url, apiKey: interlock.agentKey });
    const seen: string[] = [];
    // An unguarded server that records every tools/call it receives.
    const server = new McpServer({ name: "recording", version: "1.0.0" });
    server.registerTool("shell", { inputSchema: { command: z.string() } }, async ({ command }) => {
      seen.push(command);
      return { content: [{ type: "text", text: "ok" }] };
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const requests: string[] = [];
    const send = clientSide.send.bind(clientSide);
    clientSide.send = async (message, options) => {
      if ("method" in message) requests.push(message.method);
      return send(message, options);
    };
    await server.connect(serverSide);
    const agent = guardClient(new Client({ name: "agent", version: "1.0.0" }), { client });
    await agent.connect(clientSide);
    try {
      const refused = (await agent.callTool({ name: "shell", arguments: { command: "rm -rf /" } })) as ToolResult;
      const allowed = (await agent.callTool({ name: "shell", arguments: { command: "ls" } })) as ToolResult;
      expect(refused.isError).toBe(true);
      expect(allowed.isError).toBeFalsy();
      expect(seen).toEqual(["ls"]);
      expect(requests.filter((method) => method === "tools/call")).toHaveLength(1);
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("guarding twice judges once", async () => {
    const decisions: Decision[] = [];
    const options: McpGuardOptions = {
      client: new InterlockClient({ url: interlock.url, apiKey: interlock.agentKey }),
      onDecision: (decision) => decisions.push(decision),
    };
    const mcp = await connect(undefined, options);
    guardClient(mcp.client, options);
    try {
      await mcp.call("shell", { command: "ls" });
      expect(decisions).toHaveLength(1);
      expect(mcp.count()).toBe(1);
    } finally {
      await mcp.close();
    }
  });

  it("an aborted request signal is undetermined and nothing is sent", async () => {
    const slow = await startMisbehavingServer("slow", 2000);
    const decisions: Decision[] = [];
    const mcp = await connect(undefined, {
      client: new InterlockClient({ url: slow.url, apiKey: "k" }),
      onDecision: (decision) => decisions.push(decision),
    });
    try {
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("the user left")), 100);
      const result = await mcp.call("shell", { command: "ls" }, controller.signal);
      expect(result.isError).toBe(true);
      expectUndetermined(refusalIn(result));
      expect(decisions[0]?.cause).toMatch(/cancelled/);
      expect(mcp.count()).toBe(0);
    } finally {
      await mcp.close();
      await slow.stop();
    }
  });
});

describe("the server-side guard", () => {
  it("a cancelled request (extra.signal) is undetermined: the tool never runs", async () => {
    const slow = await startMisbehavingServer("slow", 2000);
    const decisions: Decision[] = [];
    const mcp = await connect({
      client: new InterlockClient({ url: slow.url, apiKey: "k" }),
      onDecision: (decision) => decisions.push(decision),
    });
    try {
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("the user left")), 100);
      await expect(mcp.call("shell", { command: "ls" }, controller.signal)).rejects.toThrow();
      // The client's cancellation reached the server's extra.signal, and the check.
      await expect.poll(() => decisions.map((decision) => decision.verdict)).toEqual(["undetermined"]);
      expect(decisions[0]?.cause).toMatch(/cancelled/);
      expect(mcp.count()).toBe(0);
    } finally {
      await mcp.close();
      await slow.stop();
    }
  });

  it("guardToolHandler wraps one callback, of either shape", async () => {
    const client = new InterlockClient({ url: interlock.url, apiKey: interlock.agentKey });
    let ran = 0;
    const server = new McpServer({ name: "tools", version: "1.0.0" });
    server.registerTool(
      "shell",
      { inputSchema: { command: z.string() } },
      guardToolHandler(
        "shell",
        async ({ command }: { command: string }) => {
          ran += 1;
          return { content: [{ type: "text" as const, text: command }] };
        },
        { client },
      ),
    );
    // No input schema: the SDK calls it with `extra` only; judged with no arguments.
    server.registerTool(
      "status",
      {},
      guardToolHandler(
        "status",
        async () => {
          ran += 100;
          return { content: [{ type: "text" as const, text: "up" }] };
        },
        { client },
      ),
    );
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const agent = new Client({ name: "agent", version: "1.0.0" });
    await agent.connect(clientSide);
    try {
      expect(((await agent.callTool({ name: "shell", arguments: { command: "rm -rf /" } })) as ToolResult).isError).toBe(true);
      expect(((await agent.callTool({ name: "shell", arguments: { command: "ls" } })) as ToolResult).isError).toBeFalsy();
      // `status` is not in the policy: the default (deny) refuses it.
      const status = (await agent.callTool({ name: "status", arguments: {} })) as ToolResult;
      expect(status.isError).toBe(true);
      expect(refusalIn(status)).toMatch(/^Interlock denied MCP tool 'status'/);
      expect(ran).toBe(1);
    } finally {
      await agent.close();
      await server.close();
    }
  });
});

describe("docs/typescript-mcp.md", () => {
  it("shows examples/mcp.ts verbatim", () => {
    expect(tsBlocks("typescript-mcp.md")).toContain(exampleSource("mcp.ts"));
  });

  it("its example runs under its policy as it says", async () => {
    const live = await startServer(pagePolicy("typescript-mcp.md"));
    try {
      const { listing, refused } = (await example({ INTERLOCK_URL: live.url, INTERLOCK_KEY: live.agentKey })) as { listing: ToolResult; refused: ToolResult };
      expect(listing.isError).toBeFalsy();
      expect(listing.content[0]?.text).toBe("ran ls");
      expect(refused.isError).toBe(true);
      expect(refusalIn(refused)).toMatch(/^Interlock denied MCP tool 'shell': no recursive deletes .* \(decision dec_\w+\)$/);
      expect((refused._meta?.[DECISION_META_KEY] as { rule_ids: string[] }).rule_ids).toEqual(["no-rm"]);
    } finally {
      await live.stop();
    }
  }, 120_000); // a server of its own: slow to start on a loaded machine
});

describe("no way around the guards", () => {
  const options = (decisions: Decision[]): McpGuardOptions => ({
    client: new InterlockClient({ url: interlock.url, apiKey: interlock.agentKey }),
    onDecision: (decision) => decisions.push(decision),
  });

  /** An unguarded server that records the tools/call requests it receives. */
  async function recordingServer() {
    const seen: string[] = [];
    const server = new McpServer({ name: "recording", version: "1.0.0" });
    server.registerTool("shell", { inputSchema: { command: z.string() } }, async ({ command }) => {
      seen.push(command);
      return { content: [{ type: "text", text: `ran ${command}` }] };
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    return { seen, server, clientSide };
  }

  // [case, request, judged verdict (null: not judged), reaches the server]
  const requests: [string, { method: string; params?: Record<string, unknown> }, string | null, boolean][] = [
    ["benign: callTool's own request, allowed", { method: "tools/call", params: { name: "shell", arguments: { command: "ls" } } }, "allow", true],
    ["a tools/call sent with client.request", { method: "tools/call", params: { name: "shell", arguments: { command: "rm -rf /" } } }, "deny", false],
    ["a tools/call without a name", { method: "tools/call", params: { arguments: { command: "ls" } } }, "undetermined", false],
    ["a tools/call whose arguments are not an object", { method: "tools/call", params: { name: "shell", arguments: "rm -rf /" } }, "undetermined", false],
    ["a tools/call whose arguments are a list", { method: "tools/call", params: { name: "shell", arguments: ["rm", "-rf", "/"] } }, "undetermined", false],
    ["benign: tools/list is not a call to judge", { method: "tools/list" }, null, true],
  ];

  it.each(requests)("client side: %s", async (_name, message, verdict, reaches) => {
    const decisions: Decision[] = [];
    const { seen, server, clientSide } = await recordingServer();
    const sent: string[] = [];
    const send = clientSide.send.bind(clientSide);
    clientSide.send = async (outgoing, sendOptions) => {
      if ("method" in outgoing) sent.push(outgoing.method);
      return send(outgoing, sendOptions);
    };
    const agent = guardClient(new Client({ name: "agent", version: "1.0.0" }), options(decisions));
    await agent.connect(clientSide);
    try {
      const result = (await agent
        .request(message as never, CallToolResultSchema.passthrough() as never)
        .catch((error: unknown) => ({ error }))) as ToolResult & { error?: unknown };
      expect(decisions.map((decision) => decision.verdict)).toEqual(verdict === null ? [] : [verdict]);
      expect(sent.includes(message.method)).toBe(reaches);
      if (!reaches) expect(result.isError).toBe(true);
      if (message.method === "tools/call" && !reaches) expect(seen).toEqual([]);
    } finally {
      await agent.close();
      await server.close();
    }
  });

  it("server side: a server that already has tools is refused, naming them", () => {
    const server = new McpServer({ name: "tools", version: "1.0.0" });
    server.registerTool("early", {}, async () => ({ content: [] }));
    expect(() => guardMcpServer(server, options([]))).toThrow(/early/);
  });

  it("server side: a tool keeps its guard through update, and is judged under its current name", async () => {
    const decisions: Decision[] = [];
    const ran: string[] = [];
    const server = guardMcpServer(new McpServer({ name: "tools", version: "1.0.0" }), options(decisions));
    const schema = { inputSchema: { command: z.string() } };
    const shell = server.registerTool("shell", schema, async () => ({ content: [] }));
    // A new callback stays guarded; renamed, it is judged as what it is now called.
    const callback = async ({ command }: { command: string }) => {
      ran.push(command);
      return { content: [{ type: "text" as const, text: command }] };
    };
    shell.update({ callback: callback as never });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const agent = new Client({ name: "agent", version: "1.0.0" });
    await agent.connect(clientSide);
    try {
      const refused = (await agent.callTool({ name: "shell", arguments: { command: "rm -rf /" } })) as ToolResult;
      expect(refused.isError).toBe(true);
      expect(((await agent.callTool({ name: "shell", arguments: { command: "ls" } })) as ToolResult).isError).toBeFalsy();
      shell.update({ name: "anything" }); // not in the policy: the default (deny)
      const renamed = (await agent.callTool({ name: "anything", arguments: { command: "ls" } })) as ToolResult;
      expect(renamed.isError).toBe(true);
      expect(refusalIn(renamed)).toMatch(/^Interlock denied MCP tool 'anything'/);
      expect(ran).toEqual(["ls"]);
      expect(decisions.map((decision) => decision.verdict)).toEqual(["deny", "allow", "deny"]);
    } finally {
      await agent.close();
      await server.close();
    }
  });
});

describe("a tool with a cost: its reservation is settled", () => {
  const stateful = inject("stateful");
  const options = (): McpGuardOptions => ({ client: new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey }) });

  async function lookupServer(guard: McpGuardOptions | undefined, fail: boolean) {
    const server = new McpServer({ name: "lookups", version: "1.0.0" });
    if (guard) guardMcpServer(server, guard);
    server.registerTool("paid_lookup", { inputSchema: { q: z.string(), est_cost: z.number() } }, async ({ q }) =>
      fail ? { isError: true, content: [{ type: "text", text: "the lookup service is down" }] } : { content: [{ type: "text", text: q }] },
    );
    return server;
  }

  it.each([
    ["server", false, LOOKUP_CHARGE],
    ["server", true, 0],
    ["client", false, LOOKUP_CHARGE],
    ["client", true, 0],
  ] as const)("%s side, the tool failing: %s → charged %d", async (side, fail, charged) => {
    const before = await toolSpend(stateful);
    const server = await lookupServer(side === "server" ? options() : undefined, fail);
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const agent = new Client({ name: "agent", version: "1.0.0" });
    if (side === "client") guardClient(agent, options());
    await agent.connect(clientSide);
    try {
      const result = (await agent.callTool({ name: "paid_lookup", arguments: { q: "a", est_cost: LOOKUP_COST } })) as ToolResult;
      expect(Boolean(result.isError)).toBe(fail);
      const after = await toolSpend(stateful);
      expect(after.spent - before.spent).toBe(charged);
      expect(after.reserved).toBe(before.reserved);
    } finally {
      await agent.close();
      await server.close();
    }
  });
});
