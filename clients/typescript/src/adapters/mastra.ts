/**
 * Interlock for Mastra (`@mastra/core` 1): its own agent loop, guarded at its own hooks.
 *
 * - `interlockToolHooks(options)`: the `hooks` of an `Agent` (or of one `generate` /
 *   `stream` call). `beforeToolCall` judges each tool call before its body runs. A
 *   refusal is, by default, `{proceed: false, output: <the refusal text>}` (the model
 *   reads it as the tool's result and the loop goes on); with `refusal: "throw"` it is
 *   thrown (the model reads it as an error result).
 * - `interlockModel(model, options)`: the agent's AI SDK model with the budget
 *   middleware around it (reserve before each model call, commit the usage after; at
 *   the end of the stream for `agent.stream`). Mastra's output-step processors run
 *   after the tool body and cannot guard: use these instead.
 *
 * `@mastra/core` is a peer dependency: this module only imports its types.
 */
import type { ToolHooks } from "@mastra/core/tools";
import { type GuardOptions, type Mapped, judge } from "../judge.js";
import { refusalFor, undetermined } from "../refusal.js";
import { type MiddlewareOptions, type ToolCallInfo, guardModel } from "./ai-sdk.js";
import type { ActionInput } from "../types.js";

export interface MastraToolGuardOptions extends GuardOptions {
  /** `message` (default): `{proceed: false, output: <refusal text>}`; `throw`: throw it. */
  refusal?: "message" | "throw";
  /** Map the call to actions (default: one `tool` action with the input as arguments). */
  map?: (call: ToolCallInfo) => Mapped;
}

const RUNTIME = "mastra";

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The default action of a Mastra tool call. */
export function mastraToolAction(call: ToolCallInfo): ActionInput {
  const context: NonNullable<ActionInput["context"]> = { runtime: RUNTIME };
  if (call.toolCallId) context.call_id = call.toolCallId.slice(0, 200);
  return {
    kind: "tool",
    name: call.toolName,
    arguments: isPlainObject(call.input) ? call.input : { input: call.input },
    context,
  };
}

/**
 * Tool hooks for a Mastra `Agent`: every tool call judged before its body runs.
 *
 * @example
 * const agent = new Agent({ name, instructions, model, tools, hooks: interlockToolHooks({ client }) });
 */
export function interlockToolHooks(options: MastraToolGuardOptions): ToolHooks {
  const map = options.map ?? mastraToolAction;
  return {
    async beforeToolCall({ toolName, input, context }) {
      const execution = isPlainObject(context) ? context : {};
      const toolCallId = typeof execution.toolCallId === "string" ? execution.toolCallId : undefined;
      const signal = execution.abortSignal instanceof AbortSignal ? execution.abortSignal : undefined;
      const judgement = await judge(options, () => map({ toolName, input, toolCallId }), signal ? { signal } : {});
      let refusal = judgement.refusal;
      if (!refusal && signal?.aborted && judgement.decision !== null) {
        // Cancelled while judged: the verdict came too late to run the body.
        refusal = refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
      }
      if (!refusal) return undefined;
      if (options.refusal === "throw") throw refusal;
      return { proceed: false, output: refusal.message };
    },
  };
}

/** The agent's model with the budget middleware around it (see the module comment). */
export function interlockModel<M extends Parameters<typeof guardModel>[0]>(model: M, options: MiddlewareOptions): M {
  return guardModel(model, options);
}
