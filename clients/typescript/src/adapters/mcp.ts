/**
 * MCP TypeScript SDK: a `tools/call` is judged before the tool runs, on either side.
 *
 * - Server side, {@link guardToolHandler} wraps one `registerTool` callback and
 *   {@link guardMcpServer} wraps every tool a server registers from then on.
 * - Client side, {@link guardClient} wraps `client.callTool`: a refused call is never
 *   sent to the server.
 *
 * Either way a refusal is the result MCP has for a failed tool, `isError: true`, its
 * text the refusal (the reason, the approval URL, the cause) and the decision id, and
 * its `_meta["interlock/decision"]` the decision (id, verdict, rule ids, approval id
 * and URL) for a program to act on — the same result as Python's adapter. The client
 * gets it as it gets any failed tool; nothing throws. The request's own signal (the
 * server's `extra.signal`, the client's `options.signal`) cancels a check: undetermined.
 *
 * @example
 * const server = guardMcpServer(new McpServer({ name: "tools", version: "1.0.0" }), { client });
 * server.registerTool("shell", { inputSchema: { command: z.string() } }, async ({ command }) => run(command));
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";

import type { InterlockBlocked } from "../errors.js";
import { type GuardOptions, type Mapped, judge } from "../judge.js";
import { refusalFor, undetermined } from "../refusal.js";
import type { ActionInput, CallOptions, Decision } from "../types.js";

/** One `tools/call` as both sides see it: the tool's name and its arguments. */
export interface McpToolCall {
  readonly name: string;
  readonly arguments: Record<string, unknown>;
}

export interface McpGuardOptions extends GuardOptions {
  /** Turns a tool call into the action(s) to judge; null passes it through unjudged.
   * Default: {@link mcpAction}. */
  map?: (call: McpToolCall) => Mapped;
  /** Cancels checks when the request carries no signal of its own. */
  signal?: AbortSignal;
}

/** The key of a refusal's `_meta` that carries the decision (as Python's adapter). */
export const DECISION_META_KEY = "interlock/decision";

/** The action a tool call is judged as, unless a mapper says otherwise. */
export function mcpAction(call: McpToolCall): ActionInput {
  return { kind: "mcp", name: call.name, arguments: { ...call.arguments } };
}

/** What a refusal's `_meta["interlock/decision"]` holds. */
export function decisionMeta(decision: Decision): Record<string, unknown> {
  const meta: Record<string, unknown> = {
    decision_id: decision.decisionId,
    verdict: decision.verdict,
    rule_ids: [...decision.ruleIds],
  };
  if (decision.approval?.id) meta.approval_id = decision.approval.id;
  if (decision.approval?.url) meta.approval_url = decision.approval.url;
  return meta;
}

/** The `isError` result of a refused tool call. */
export function refusalResult(refusal: InterlockBlocked): CallToolResult {
  const decision = refusal.decision;
  const text = decision.decisionId ? `${refusal.message} (decision ${decision.decisionId})` : refusal.message;
  return {
    content: [{ type: "text", text }],
    isError: true,
    _meta: { [DECISION_META_KEY]: decisionMeta(decision) },
  };
}

function argumentsOf(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** Judge one call: the refusal, or null to run it. */
async function refusalOf(
  options: McpGuardOptions,
  call: McpToolCall,
  hostSignal: AbortSignal | undefined,
): Promise<InterlockBlocked | null> {
  const map = options.map ?? mcpAction;
  const signal = hostSignal ?? options.signal;
  const request: CallOptions = signal ? { signal } : {};
  const judgement = await judge(options, () => map(call), request);
  if (judgement.refusal) return judgement.refusal;
  if (judgement.decision !== null && signal?.aborted) {
    return refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
  }
  return null;
}

/** The part of a request handler's `extra` the guard reads. */
interface Extra {
  signal?: AbortSignal;
}

// The SDK calls a tool's callback as (args, extra), or as (extra) when the tool
// declares no input schema; the guard keeps the shape it was given.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyCallback = (...params: any[]) => unknown;

/**
 * A `registerTool` callback that judges the call first and runs `callback` only on
 * allow; a refusal is the `isError` result.
 *
 * @example
 * server.registerTool("shell", { inputSchema: { command: z.string() } },
 *   guardToolHandler("shell", async ({ command }) => run(command), { client }));
 */
export function guardToolHandler<C extends AnyCallback>(name: string, callback: C, options: McpGuardOptions): C {
  const guarded = async (...params: unknown[]): Promise<unknown> => {
    const withArgs = params.length >= 2;
    const extra = (withArgs ? params[1] : params[0]) as Extra | undefined;
    const call: McpToolCall = { name, arguments: withArgs ? argumentsOf(params[0]) : {} };
    const refusal = await refusalOf(options, call, extra?.signal);
    if (refusal) return refusalResult(refusal);
    return callback(...params);
  };
  return guarded as unknown as C;
}

const GUARDED = Symbol.for("interlock.mcp.guarded");

type Marked<T> = T & { [GUARDED]?: true };

/**
 * Guard every tool `server` registers from now on (`registerTool`, and the older
 * `tool`): each callback is wrapped by {@link guardToolHandler}. Returns the server.
 * Guarding a server twice changes nothing.
 */
export function guardMcpServer<S extends McpServer>(server: S, options: McpGuardOptions): S {
  const marked = server as Marked<S>;
  if (marked[GUARDED]) return server;
  const registerTool = server.registerTool.bind(server) as (...params: unknown[]) => unknown;
  const tool = server.tool.bind(server) as (...params: unknown[]) => unknown;
  const wrapLast = (name: unknown, params: unknown[]): unknown[] => {
    const last = params.length - 1;
    const callback = params[last];
    if (typeof name !== "string" || typeof callback !== "function") return params;
    return [...params.slice(0, last), guardToolHandler(name, callback as AnyCallback, options)];
  };
  Object.assign(server, {
    registerTool: (...params: unknown[]) => registerTool(...wrapLast(params[0], params)),
    tool: (...params: unknown[]) => tool(...wrapLast(params[0], params)),
  });
  marked[GUARDED] = true;
  return server;
}

/**
 * Guard `client.callTool`: every call is judged before it is sent, and a refused one
 * is never sent — `callTool` returns the `isError` result instead. Returns the client.
 * Guarding a client twice changes nothing.
 *
 * @example
 * const client = guardClient(new Client({ name: "agent", version: "1.0.0" }), { client: interlock });
 * const result = await client.callTool({ name: "shell", arguments: { command: "rm -rf /" } });
 * result.isError;   // true: refused, and the server never saw the call
 */
export function guardClient<C extends Client>(client: C, options: McpGuardOptions): C {
  const marked = client as Marked<C>;
  if (marked[GUARDED]) return client;
  const callTool = client.callTool.bind(client);
  const guarded: Client["callTool"] = async (params, resultSchema, requestOptions) => {
    const call: McpToolCall = { name: params.name, arguments: argumentsOf(params.arguments) };
    const refusal = await refusalOf(options, call, requestOptions?.signal);
    if (refusal) return refusalResult(refusal);
    return callTool(params, resultSchema, requestOptions);
  };
  Object.assign(client, { callTool: guarded });
  marked[GUARDED] = true;
  return client;
}
