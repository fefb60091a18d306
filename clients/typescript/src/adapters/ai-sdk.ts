/**
 * Interlock for the Vercel AI SDK (`ai` 7): guarded tools, a bridge to the native
 * `toolApproval` option, and a language-model middleware for budgets.
 *
 * - `guardTool(name, tool, options)` / `guardTools(tools, options)` wrap each tool's
 *   `execute`: the call is judged before the body runs. A refusal throws (the SDK hands
 *   the model an error tool-result and the loop goes on), or, with `refusal: "message"`,
 *   is returned as the tool's result text.
 * - `interlockToolApproval(options)` is a `toolApproval` function: deny and undetermined
 *   are `{type: "denied", reason}` (the body never runs; the model reads the reason);
 *   require_approval waits for the Interlock approval and checks again (or hands the
 *   call to the SDK's own user-approval flow, `approval: "native"`).
 * - `interlockMiddleware(options)` for `wrapLanguageModel`: each model call is judged
 *   (kind `llm`) and reserved before the provider is called, and committed with the
 *   usage it reports — for `streamText`, from the stream's `finish` part, exactly once;
 *   a stream that errors or is cancelled releases its reservation.
 *
 * `ai` is a peer dependency: this module only imports its types.
 */
import type { LanguageModelMiddleware, Tool, ToolExecutionOptions, ToolSet } from "ai";
import { describe as describeError, type LlmReservation } from "../client.js";
import { type GuardOptions, type Mapped, guarded, judge } from "../judge.js";
import { raiseFor, refusalFor } from "../refusal.js";
import type { ActionInput, Decision, TokenUsage } from "../types.js";

/** What a tool mapper sees: the tool's name, its input and the SDK's call options. */
export interface ToolCallInfo {
  toolName: string;
  input: unknown;
  toolCallId: string | undefined;
}

export interface ToolGuardOptions extends GuardOptions {
  /** `throw` (default): a refusal is an error tool-result; `message`: the refusal text
   * is returned as the tool's result. */
  refusal?: "throw" | "message";
  /** Map the call to actions (default: one `tool` action with the input as arguments). */
  map?: (call: ToolCallInfo) => Mapped;
}

const RUNTIME = "vercel-ai-sdk";

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The default action of a tool call. */
export function toolAction(call: ToolCallInfo): ActionInput {
  const action: ActionInput = {
    kind: "tool",
    name: call.toolName,
    arguments: isPlainObject(call.input) ? call.input : { input: call.input },
    context: { runtime: RUNTIME },
  };
  if (call.toolCallId) action.context = { runtime: RUNTIME, call_id: call.toolCallId.slice(0, 200) };
  return action;
}

type Execute = (input: unknown, options: ToolExecutionOptions<unknown>) => unknown;

function isAsyncGeneratorFunction(fn: unknown): boolean {
  return typeof fn === "function" && fn.constructor?.name === "AsyncGeneratorFunction";
}

/**
 * `tool` with its `execute` guarded: judged before the body runs, the body never run on
 * anything but allow. The SDK's `abortSignal` for the call is the check's signal.
 *
 * @example
 * const tools = { shell: guardTool("shell", tool({ inputSchema, execute }), { client }) };
 */
export function guardTool<T extends Tool>(toolName: string, original: T, options: ToolGuardOptions): T {
  const execute = (original as { execute?: Execute }).execute;
  if (typeof execute !== "function") return original; // no body here: nothing runs on this side
  const map = options.map ?? toolAction;
  const refuse = (error: unknown): unknown => {
    if (options.refusal === "message" && error instanceof Error && "decision" in error) return error.message;
    throw error;
  };
  const info = (input: unknown, call: ToolExecutionOptions<unknown>): ToolCallInfo => ({
    toolName,
    input,
    toolCallId: call?.toolCallId,
  });
  let wrapped: Execute;
  if (isAsyncGeneratorFunction(execute)) {
    // A streaming tool: the verdict comes before its first yield.
    wrapped = async function* (input, call) {
      let stream: AsyncIterable<unknown>;
      try {
        stream = await guarded(options, () => map(info(input, call)), () => execute.call(original, input, call) as AsyncIterable<unknown>, signalOf(call));
      } catch (error) {
        yield refuse(error);
        return;
      }
      yield* stream;
    };
  } else {
    wrapped = async (input, call) => {
      try {
        return await guarded(options, () => map(info(input, call)), () => execute.call(original, input, call), signalOf(call));
      } catch (error) {
        if (options.refusal === "message" && error instanceof Error && "decision" in error) return error.message;
        throw error;
      }
    };
  }
  return { ...original, execute: wrapped } as T;
}

function signalOf(call: ToolExecutionOptions<unknown> | undefined): { signal?: AbortSignal } {
  return call?.abortSignal ? { signal: call.abortSignal } : {};
}

/** Every tool of `tools` guarded (`guardTool`), under its key as its name. */
export function guardTools<T extends ToolSet>(tools: T, options: ToolGuardOptions): T {
  const out: Record<string, Tool> = {};
  for (const [name, item] of Object.entries(tools)) out[name] = guardTool(name, item as Tool, options);
  return out as T;
}

// -- the native toolApproval bridge --------------------------------------------------------

export interface ToolApprovalOptions extends GuardOptions {
  /** On require_approval: `wait` (default) for the Interlock approval, then check again;
   * `native`: hand the call to the SDK's own user-approval flow, with the reason. */
  approval?: "wait" | "native";
  /** How long `wait` waits for a human (default five minutes). */
  approvalTimeoutMs?: number;
  map?: (call: ToolCallInfo) => Mapped;
}

type ApprovalStatus =
  | undefined
  | { type: "not-applicable" }
  | { type: "approved"; reason?: string }
  | { type: "denied"; reason?: string }
  | { type: "user-approval"; reason?: string };

/**
 * A `toolApproval` function for `generateText` / `streamText`: allow is not-applicable
 * (the tool's own settings stand), deny and undetermined are denied with the refusal
 * text as the reason, require_approval waits for the Interlock approval (see options).
 *
 * @example
 * await generateText({ model, tools, toolApproval: interlockToolApproval({ client }) });
 */
export function interlockToolApproval(
  options: ToolApprovalOptions,
): (call: { toolCall: { toolName: string; input: unknown; toolCallId: string } }) => Promise<ApprovalStatus> {
  const map = options.map ?? toolAction;
  return async ({ toolCall }) => {
    const call = { toolName: toolCall.toolName, input: toolCall.input, toolCallId: toolCall.toolCallId };
    const judgement = await judge(options, () => map(call));
    const decision = judgement.decision;
    if (decision === null || decision.verdict === "allow") return { type: "not-applicable" };
    const refusal = judgement.refusal;
    const reason = refusal?.message ?? decision.reason;
    if (decision.verdict !== "require_approval") return { type: "denied", reason };
    if (options.approval === "native") return { type: "user-approval", reason };
    const approvalId = decision.approval?.id;
    if (!approvalId || judgement.actions.length !== 1) return { type: "denied", reason };
    const waited = await options.client.checkWithApproval(judgement.actions[0] as ActionInput, {
      approvalTimeoutMs: options.approvalTimeoutMs,
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    });
    if (waited.verdict === "allow") return { type: "approved", reason: waited.reason };
    return { type: "denied", reason: refusalFor(waited, judgement.actions[0])?.message ?? waited.reason };
  };
}

// -- the language-model middleware ------------------------------------------------------

/** What a model-call mapper sees. */
export interface ModelCallInfo {
  modelId: string;
  provider: string;
  /** The prompt's text, per message (no file data). */
  messages: { role: string; content: string }[];
  maxOutputTokens: number | undefined;
}

export interface MiddlewareOptions extends GuardOptions {
  /** Map the model call to its `llm` action (default: {@link modelAction}). Returning
   * null passes the call through, unjudged and unbudgeted. */
  map?: (call: ModelCallInfo) => ActionInput | null | undefined;
}

/** The default `llm` action of a model call: the model id as its name, the prompt's
 * text and the output bound as arguments (the server estimates the tokens from them). */
export function modelAction(call: ModelCallInfo): ActionInput {
  const args: Record<string, unknown> = { provider: call.provider, messages: call.messages };
  if (call.maxOutputTokens !== undefined) args.max_output_tokens = call.maxOutputTokens;
  return { kind: "llm", name: call.modelId, arguments: args, context: { runtime: RUNTIME } };
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part: unknown) => {
      if (!isPlainObject(part)) return "";
      if (part.type === "text" || part.type === "reasoning") return typeof part.text === "string" ? part.text : "";
      if (part.type === "tool-call") return `${String(part.toolName)} ${JSON.stringify(part.input ?? null)}`;
      if (part.type === "tool-result") return JSON.stringify(part.output ?? null);
      return "";
    })
    .filter((text) => text !== "")
    .join("\n");
}

/** Token usage from what a provider reports (v4's nested totals or the flat v2/v3 form). */
export function usageOf(usage: unknown): TokenUsage | null {
  if (!isPlainObject(usage)) return null;
  const count = (value: unknown): number | undefined => {
    if (typeof value === "number") return value;
    if (isPlainObject(value) && typeof value.total === "number") return value.total;
    return undefined;
  };
  const input = count(usage.inputTokens);
  const output = count(usage.outputTokens);
  if (input === undefined && output === undefined) return null;
  return { inputTokens: Math.max(0, Math.round(input ?? 0)), outputTokens: Math.max(0, Math.round(output ?? 0)) };
}

interface ModelLike {
  modelId: string;
  provider: string;
}

interface ParamsLike {
  prompt: unknown;
  maxOutputTokens?: number | undefined;
  abortSignal?: AbortSignal | undefined;
}

/** Judge and reserve one model call; null when the mapper passed it through. Throws the
 * refusal unless allowed. */
async function reserve(options: MiddlewareOptions, model: ModelLike, params: ParamsLike): Promise<LlmReservation | null> {
  const call: ModelCallInfo = {
    modelId: model.modelId,
    provider: model.provider,
    messages: Array.isArray(params.prompt)
      ? params.prompt.map((message: unknown) => ({
          role: isPlainObject(message) ? String(message.role) : "unknown",
          content: isPlainObject(message) ? textOf(message.content) : "",
        }))
      : [],
    maxOutputTokens: params.maxOutputTokens,
  };
  const map = options.map ?? modelAction;
  const judgement = await judge(options, () => map(call), params.abortSignal ? { signal: params.abortSignal } : {});
  if (judgement.decision === null) return null;
  const action = judgement.actions[0];
  raiseFor(judgement.decision, action);
  return options.client.reservationFor(action?.name ?? model.modelId, judgement.decision);
}

async function settle(options: MiddlewareOptions, what: string, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
  } catch (error) {
    // The model call happened (or did not): a failed settle must not fail the caller's
    // call; the server's reaper releases an unsettled reservation after its TTL.
    (options.logger ?? console).warn(`interlock: could not ${what} a model call's reservation: ${describeError(error)}`);
  }
}

/**
 * A `LanguageModelMiddleware` for `wrapLanguageModel`: judges each model call, reserves
 * before the provider is called and commits the usage it reports after (see the module
 * comment). A refused call throws the refusal; the provider is never called.
 *
 * @example
 * const model = wrapLanguageModel({ model: provider("gpt-5"), middleware: interlockMiddleware({ client }) });
 */
export function interlockMiddleware(options: MiddlewareOptions): LanguageModelMiddleware {
  return {
    specificationVersion: "v4",
    async wrapGenerate({ doGenerate, params, model }) {
      const reservation = await reserve(options, model, params);
      if (reservation === null) return doGenerate();
      let result: Awaited<ReturnType<typeof doGenerate>>;
      try {
        result = await doGenerate();
      } catch (error) {
        await settle(options, "release", () => reservation.release());
        throw error;
      }
      await settle(options, "commit", () => reservation.commit(usageOf(result.usage)));
      return result;
    },
    async wrapStream({ doStream, params, model }) {
      const reservation = await reserve(options, model, params);
      if (reservation === null) return doStream();
      let result: Awaited<ReturnType<typeof doStream>>;
      try {
        result = await doStream();
      } catch (error) {
        await settle(options, "release", () => reservation.release());
        throw error;
      }
      return { ...result, stream: settledAtTheEnd(options, reservation, result.stream) };
    },
  };
}

/** `stream`, committing the `finish` part's usage once it passes, releasing when the
 * stream errors, is cancelled or ends without one. */
function settledAtTheEnd<P extends { type: string }>(
  options: MiddlewareOptions,
  reservation: LlmReservation,
  stream: ReadableStream<P>,
): ReadableStream<P> {
  const reader = stream.getReader();
  return new ReadableStream<P>({
    async pull(controller) {
      let next: ReadableStreamReadResult<P>;
      try {
        next = await reader.read();
      } catch (error) {
        await settle(options, "release", () => reservation.release());
        controller.error(error);
        return;
      }
      if (next.done) {
        if (!reservation.settled) await settle(options, "release", () => reservation.release());
        controller.close();
        return;
      }
      const part = next.value;
      if (part.type === "finish") {
        const usage = usageOf((part as { usage?: unknown }).usage);
        await settle(options, "commit", () => reservation.commit(usage));
      }
      controller.enqueue(part);
    },
    async cancel(reason) {
      if (!reservation.settled) await settle(options, "release", () => reservation.release());
      await reader.cancel(reason);
    },
  });
}

interface ModelObject {
  modelId: string;
  provider: string;
  doGenerate(params: never): PromiseLike<unknown>;
  doStream(params: never): PromiseLike<unknown>;
}

/**
 * `model` with {@link interlockMiddleware} around its `doGenerate` / `doStream`, without
 * importing `ai` (`wrapLanguageModel` does the same for v4 models): for any AI SDK model
 * object (v2, v3, v4), e.g. a Mastra agent's `model`.
 */
export function guardModel<M extends ModelObject>(model: M, options: MiddlewareOptions): M {
  const middleware = interlockMiddleware(options);
  type Hook = (call: { doGenerate: () => PromiseLike<unknown>; doStream: () => PromiseLike<unknown>; params: unknown; model: unknown }) => PromiseLike<unknown>;
  const wrapGenerate = middleware.wrapGenerate as unknown as Hook;
  const wrapStream = middleware.wrapStream as unknown as Hook;
  const raw = {
    doGenerate: (params: never) => model.doGenerate(params),
    doStream: (params: never) => model.doStream(params),
  };
  const hooks = {
    doGenerate: (params: never) =>
      wrapGenerate({ doGenerate: () => raw.doGenerate(params), doStream: () => raw.doStream(params), params, model }),
    doStream: (params: never) =>
      wrapStream({ doGenerate: () => raw.doGenerate(params), doStream: () => raw.doStream(params), params, model }),
  };
  return new Proxy(model, {
    get(target, property, receiver) {
      if (property === "doGenerate" || property === "doStream") return hooks[property];
      return Reflect.get(target, property, receiver);
    },
  });
}
