/**
 * MCP TypeScript SDK: a `tools/call` is judged before the tool runs, on either side.
 *
 * - Server side, {@link guardToolHandler} wraps one `registerTool` callback and
 *   {@link guardMcpServer} wraps every tool a server registers from then on.
 * - Client side, {@link guardClient} wraps the client's `request` for `tools/call`
 *   (`callTool` and every other way a call is sent): a refused call is never sent.
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

import { type InterlockBlocked, InterlockError } from "../errors.js";
import { type GuardOptions, type Mapped, judge, settled } from "../judge.js";
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

/** Judge one call: the refusal (null: run it), and the decision (null: passed through). */
async function judgeCall(
  options: McpGuardOptions,
  call: McpToolCall,
  hostSignal: AbortSignal | undefined,
  unreadable?: string,
): Promise<{ refusal: InterlockBlocked | null; decision: Decision | null }> {
  const given = options.map ?? mcpAction;
  const map = unreadable
    ? () => {
        throw new TypeError(unreadable);
      }
    : given;
  const signal = hostSignal ?? options.signal;
  const request: CallOptions = signal ? { signal } : {};
  const judgement = await judge(options, () => map(call), request);
  const decision = judgement.decision;
  if (judgement.refusal) return { refusal: judgement.refusal, decision };
  if (decision !== null && signal?.aborted) {
    if (decision.reservation) await options.client.release(decision.reservation.id).catch(() => null);
    const late = refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
    return { refusal: late, decision };
  }
  return { refusal: null, decision };
}

/** Whether a tool result says the tool failed (`isError`). */
function failedResult(result: unknown): boolean {
  return typeof result === "object" && result !== null && (result as { isError?: unknown }).isError === true;
}



/** The part of a request handler's `extra` the guard reads. */
interface Extra {
  signal?: AbortSignal;
}

// The SDK calls a tool's callback as (args, extra), or as (extra) when the tool
// declares no input schema; the guard keeps the shape it was given.
type AnyCallback = (...params: any[]) => unknown;

/**
 * A `registerTool` callback that judges the call first and runs `callback` only on
 * allow; a refusal is the `isError` result. `name` is the tool's name (or a function
 * giving its current name, for a tool that may be renamed).
 *
 * @example
 * server.registerTool("shell", { inputSchema: { command: z.string() } },
 *   guardToolHandler("shell", async ({ command }) => run(command), { client }));
 */
export function guardToolHandler<C extends AnyCallback>(
  name: string | (() => string),
  callback: C,
  options: McpGuardOptions,
): C {
  const nameOf = typeof name === "function" ? name : () => name;
  const guarded = async (...params: unknown[]): Promise<unknown> => {
    const withArgs = params.length >= 2;
    const extra = (withArgs ? params[1] : params[0]) as Extra | undefined;
    const call: McpToolCall = { name: nameOf(), arguments: withArgs ? argumentsOf(params[0]) : {} };
    const { refusal, decision } = await judgeCall(options, call, extra?.signal);
    if (refusal) return refusalResult(refusal);
    return settled(options, decision, async () => callback(...params), failedResult);
  };
  return guarded as unknown as C;
}

const GUARDED = Symbol.for("interlock.mcp.guarded");

type Marked<T> = T & { [GUARDED]?: true };

/** What `registerTool` returns, as far as the guard keeps it guarded. */
interface Registered {
  update(updates: { name?: string | null; callback?: unknown; [key: string]: unknown }): void;
}

/** The tools a server registered before it was guarded (a private field of 1.x). */
function registeredBefore(server: McpServer): string[] {
  const tools = (server as unknown as { _registeredTools?: Record<string, unknown> })._registeredTools;
  return tools ? Object.keys(tools) : [];
}

/**
 * Guard every tool `server` registers from now on (`registerTool`, and the older
 * `tool`): each callback is wrapped by {@link guardToolHandler}, and stays wrapped when
 * the tool is updated (a new callback, a new name). Returns the server. Guarding a
 * server twice changes nothing. A server that already has tools is refused (an
 * `InterlockError` naming them): guard it before registering, or wrap those callbacks
 * with {@link guardToolHandler}.
 */
export function guardMcpServer<S extends McpServer>(server: S, options: McpGuardOptions): S {
  const marked = server as Marked<S>;
  if (marked[GUARDED]) return server;
  const unguarded = registeredBefore(server);
  if (unguarded.length > 0) {
    throw new InterlockError(
      `guardMcpServer: the server already has tools that would not be guarded (${unguarded.join(", ")}); ` +
        "guard the server before registering them, or wrap their callbacks with guardToolHandler",
    );
  }
  const register =
    (original: (...params: unknown[]) => unknown) =>
    (...params: unknown[]): unknown => {
      const last = params.length - 1;
      const callback = params[last];
      if (typeof params[0] !== "string" || typeof callback !== "function") return original(...params);
      let current: string = params[0];
      const nameOf = () => current;
      const guard = (cb: unknown) => guardToolHandler(nameOf, cb as AnyCallback, options);
      const registered = original(...params.slice(0, last), guard(callback)) as Registered;
      const update = registered.update.bind(registered);
      registered.update = (updates) => {
        const next = { ...updates };
        if (typeof next.callback === "function") next.callback = guard(next.callback);
        update(next);
        if (typeof updates.name === "string") current = updates.name;
      };
      return registered;
    };
  Object.assign(server, {
    registerTool: register(server.registerTool.bind(server) as (...params: unknown[]) => unknown),
    tool: register(server.tool.bind(server) as (...params: unknown[]) => unknown),
  });
  marked[GUARDED] = true;
  return server;
}

/** The part of a client's `request` the guard wraps. */
type Request = (request: { method: string; params?: unknown }, resultSchema?: unknown, options?: RequestOptions) => Promise<unknown>;

interface RequestOptions {
  signal?: AbortSignal;
  [key: string]: unknown;
}

/**
 * Guard every `tools/call` `client` sends: `callTool`, a `tools/call` sent with
 * `client.request`, and the experimental task stream (all go through `request`). Each
 * is judged before it is sent, and a refused one is never sent — the caller gets the
 * `isError` result instead (a task-augmented call, which expects a task, gets an error).
 * Returns the client. Guarding a client twice changes nothing.
 *
 * @example
 * const client = guardClient(new Client({ name: "agent", version: "1.0.0" }), { client: interlock });
 * const result = await client.callTool({ name: "shell", arguments: { command: "rm -rf /" } });
 * result.isError;   // true: refused, and the server never saw the call
 */
export function guardClient<C extends Client>(client: C, options: McpGuardOptions): C {
  const marked = client as Marked<C>;
  if (marked[GUARDED]) return client;
  const request = (client.request as unknown as Request).bind(client);
  const guarded: Request = async (message, resultSchema, requestOptions) => {
    if (message.method === "tools/call") {
      const params = argumentsOf(message.params);
      const name = typeof params.name === "string" ? params.name : "";
      const call: McpToolCall = { name, arguments: argumentsOf(params.arguments) };
      const args = params.arguments;
      // What is judged must be what is sent: arguments that are not an object are not read.
      const unreadable =
        args !== undefined && argumentsOf(args) !== args ? "the tools/call arguments are not an object" : undefined;
      const { refusal, decision } = await judgeCall(options, call, requestOptions?.signal, unreadable);
      if (refusal) return refusalResult(refusal);
      return settled(options, decision, () => request(message, resultSchema, requestOptions), failedResult);
    }
    return request(message, resultSchema, requestOptions);
  };
  Object.assign(client, { request: guarded });
  marked[GUARDED] = true;
  return client;
}
