/**
 * LangChain.js / LangGraph.js: every tool call an agent makes is judged before the tool
 * runs.
 *
 * - {@link interlockMiddleware}: a `createAgent` middleware (`wrapToolCall`). A refusal
 *   is an error `ToolMessage` (status `error`) carrying the reason, the approval URL or
 *   the cause: the model reads it and the loop goes on. `refusal: "throw"` throws the
 *   refusal instead, which ends the run (LangChain turns a middleware throw into a
 *   `MiddlewareError` out of `invoke`).
 * - {@link guardTool}: a tool (`tool()` / any `StructuredTool`) that judges its own
 *   calls, so a tool used outside the middleware — a LangGraph `ToolNode`, a direct
 *   `invoke` — is still judged. It judges the arguments the tool receives (after its
 *   schema parsed them). Called as a tool call it answers a refusal with the same error
 *   `ToolMessage`; invoked with plain arguments it throws the refusal.
 *
 * A tool call the middleware judged is not judged again by a guarded tool inside it
 * (one decision, one audit record per call) — only that call: one the middleware's
 * mapper passed through, or whose arguments changed after it was judged (another
 * middleware rewrote them), is judged by the guarded tool.
 *
 * @example
 * const agent = createAgent({ model, tools: [shell], middleware: [interlockMiddleware({ client })] });
 */
import { AsyncLocalStorage } from "node:async_hooks";

import { ToolMessage } from "@langchain/core/messages";
import { createMiddleware } from "langchain";

import type { InterlockBlocked } from "../errors.js";
import { type GuardOptions, type Judgement, type Mapped, judge, settled } from "../judge.js";
import { refusalFor, undetermined } from "../refusal.js";
import type { ActionInput, CallOptions, Decision } from "../types.js";

/** A tool call as LangChain has it (`request.toolCall`, a `ToolCall`). */
export interface LangChainToolCall {
  readonly name: string;
  readonly args: Record<string, unknown>;
  readonly id?: string | undefined;
}

export interface LangChainGuardOptions extends GuardOptions {
  /** Turns a tool call into the action(s) to judge; null passes it through unjudged.
   * Default: `{kind: "tool", name, arguments: args}`. */
  map?: (call: LangChainToolCall) => Mapped;
  /** `"message"` (default): an error `ToolMessage` the model reads. `"throw"`: throw
   * the refusal (`ActionDenied`, `ApprovalRequired`, `ActionUndetermined`). */
  refusal?: "message" | "throw";
  /** Cancels checks when the host gives no signal of its own (the run's signal wins). */
  signal?: AbortSignal;
}

/** The action a tool call is judged as, unless a mapper says otherwise. */
export function toolCallAction(call: LangChainToolCall): ActionInput {
  return { kind: "tool", name: call.name, arguments: { ...call.args } };
}

/** The tool call the middleware judged (its id and arguments), for the tool running
 * inside it: a guarded tool that receives exactly that call does not judge it again. */
const judgedByMiddleware = new AsyncLocalStorage<string>();

/** One tool call as a key: its id and its arguments in a canonical JSON (sorted keys). */
function callKey(id: string | undefined, args: unknown): string {
  return JSON.stringify([id ?? null, canonical(args)]);
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (typeof value !== "object" || value === null) return value;
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([key, item]) => [key, canonical(item)]));
}

/** The error `ToolMessage` the model reads for a refusal. */
export function refusalToolMessage(refusal: InterlockBlocked, call: LangChainToolCall): ToolMessage {
  return new ToolMessage({
    content: refusal.message,
    tool_call_id: call.id ?? "",
    name: call.name,
    status: "error",
  });
}

function callOptions(signal: AbortSignal | undefined): CallOptions {
  return signal ? { signal } : {};
}

function mapper(options: LangChainGuardOptions): (call: LangChainToolCall) => Mapped {
  return options.map ?? toolCallAction;
}

/** Judge one tool call: its refusal (null: run it), and its decision (null: the mapper
 * passed it through, unjudged). */
async function judgeCall(
  options: LangChainGuardOptions,
  call: LangChainToolCall,
  hostSignal: AbortSignal | undefined,
): Promise<{ refusal: InterlockBlocked | null; decision: Decision | null }> {
  const signal = hostSignal ?? options.signal;
  const judgement: Judgement = await judge(options, () => mapper(options)(call), callOptions(signal));
  const decision = judgement.decision;
  if (judgement.refusal) return { refusal: judgement.refusal, decision };
  if (decision !== null && signal?.aborted) {
    // Cancelled while it was judged: an allow that came too late does not run the body.
    const late = refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
    if (decision.reservation) await options.client.release(decision.reservation.id).catch(() => null);
    return { refusal: late, decision };
  }
  return { refusal: null, decision };
}

/** Whether a tool's answer says it failed (an error `ToolMessage`). */
function failedAnswer(result: unknown): boolean {
  return ToolMessage.isInstance(result) && result.status === "error";
}



/**
 * A `createAgent` middleware that judges every tool call before the tool runs.
 *
 * @example
 * const agent = createAgent({
 *   model,
 *   tools: [shell],
 *   middleware: [interlockMiddleware({ client, refusal: "message" })],
 * });
 */
export function interlockMiddleware(options: LangChainGuardOptions) {
  return createMiddleware({
    name: "InterlockMiddleware",
    wrapToolCall: async (request, handler) => {
      const call = request.toolCall as LangChainToolCall;
      const { refusal, decision } = await judgeCall(options, call, request.runtime?.signal);
      if (refusal) {
        if (options.refusal === "throw") throw refusal;
        return refusalToolMessage(refusal, call);
      }
      // A call passed through unjudged is left to a guarded tool to judge.
      if (decision === null) return handler(request);
      const run = async () => handler(request);
      return judgedByMiddleware.run(callKey(call.id, call.args), () => settled(options, decision, run, failedAnswer));
    },
  });
}

/** The part of a LangChain tool `guardTool` needs (any `StructuredTool` has it). */
interface CallableTool {
  name: string;
  _call(arg: unknown, runManager?: unknown, parentConfig?: unknown): Promise<unknown>;
}

/** Where a tool's config says which tool call it answers, and the run's signal. */
interface ToolConfig {
  toolCall?: { id?: string; args?: unknown };
  toolCallId?: string;
  signal?: AbortSignal;
}

const GUARDED = Symbol.for("interlock.langchain.guarded");

/**
 * A tool that judges its own calls (the arguments after its schema parsed them). The
 * returned tool is the original with one method replaced (its `_call`, the one every
 * path — `invoke`, `call`, a `ToolNode` — goes through); the original is untouched.
 *
 * @example
 * const guarded = guardTool(tool(async ({ command }) => run(command), { name: "shell", schema }), { client });
 * await guarded.invoke({ command: "ls" });            // throws ActionDenied when refused
 */
export function guardTool<T extends object>(tool: T, options: LangChainGuardOptions): T {
  const target = tool as unknown as CallableTool;
  if (typeof target._call !== "function" || typeof target.name !== "string") {
    throw new TypeError("guardTool takes a LangChain tool (a StructuredTool, as tool() makes)");
  }
  const original = target._call;
  const guarded = Object.create(tool) as CallableTool & { [GUARDED]?: true };
  guarded[GUARDED] = true;
  guarded._call = async function (
    this: CallableTool,
    arg: unknown,
    runManager?: unknown,
    parentConfig?: unknown,
  ): Promise<unknown> {
    const config = (parentConfig ?? {}) as ToolConfig;
    const id = config.toolCall?.id ?? config.toolCallId;
    // Judged by the middleware: the very call it judged (same id, same arguments) only.
    const judged = config.toolCall !== undefined && judgedByMiddleware.getStore() === callKey(id, config.toolCall.args);
    if (!judged) {
      const args = typeof arg === "object" && arg !== null && !Array.isArray(arg) ? arg : { input: arg };
      const call: LangChainToolCall = { name: target.name, args: args as Record<string, unknown>, id };
      const { refusal, decision } = await judgeCall(options, call, config.signal);
      if (refusal) {
        if (options.refusal === "throw" || id === undefined) throw refusal;
        return refusalToolMessage(refusal, call);
      }
      const run = () => original.call(this, arg, runManager, parentConfig);
      return settled(options, decision, run, failedAnswer);
    }
    return original.call(this, arg, runManager, parentConfig);
  };
  return guarded as unknown as T;
}

/** Whether `tool` is one {@link guardTool} returned. */
export function isGuardedTool(tool: unknown): boolean {
  return typeof tool === "object" && tool !== null && (tool as { [GUARDED]?: true })[GUARDED] === true;
}
