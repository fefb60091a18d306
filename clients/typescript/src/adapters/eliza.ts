/**
 * ElizaOS: an action is judged before its handler runs.
 *
 * ElizaOS calls an action's `validate` to choose which actions it offers the model,
 * but `runtime.processActions` runs the handler of the action the model named
 * **without** calling `validate`. A validator alone therefore never stops a refused
 * action from running; the guard lives in the handler:
 *
 * - {@link interlockValidator}: a `validate` that returns false on any verdict but
 *   allow (deny, approval pending, undetermined: fail closed), the refusal told to the
 *   `onBlocked` observer and the runtime's logger. It keeps a refused action out of the
 *   prompt.
 * - {@link guardHandler}: a handler that judges the call and runs the original only on
 *   allow. A refusal is an `ActionResult` with `success: false`, the refusal as its
 *   `text` and `error`, and the decision under `data.interlock`: the runtime records
 *   the action as failed, with the reason, and the body never ran.
 * - {@link guardAction}: both, on a copy of the action.
 *
 * The validate hook gets no invocation signal: pass `signal` in the options to cancel
 * checks (an aborted signal is undetermined).
 *
 * @example
 * runtime.registerAction(guardAction(sendTokens, { client }));
 */
import { describe } from "../client.js";
import type { InterlockBlocked } from "../errors.js";
import { type GuardOptions, type Mapped, judge, settled } from "../judge.js";
import { refusalFor, undetermined } from "../refusal.js";
import type { ActionInput, CallOptions, Decision } from "../types.js";

// The ElizaOS shapes the guard touches, declared structurally: `@elizaos/core` ships
// type declarations that NodeNext resolution cannot read (extensionless re-exports),
// and an `Action` of any 1.x release fits these.
/** A message (`Memory`): the guard reads its `content`. */
export interface Memory {
  content: { [key: string]: unknown };
  [key: string]: unknown;
}
export type State = any;
/** What the guard uses of the runtime: its logger. */
export interface IAgentRuntime {
  logger?: { warn(...args: unknown[]): void } | undefined;
  [key: string]: any;
}
export type Validator = (runtime: any, message: any, state?: any) => Promise<boolean>;
export type Handler = (
  runtime: any,
  message: any,
  state?: any,
  options?: any,
  callback?: any,
  responses?: any,
) => Promise<unknown>;
/** An ElizaOS `Action`: a name, a validator and a handler (and anything else). */
export interface Action {
  name: string;
  validate: Validator;
  handler: Handler;
  [key: string]: unknown;
}
/** An ElizaOS `ActionResult`. */
export interface ActionResult {
  success: boolean;
  text?: string;
  error?: string | Error;
  data?: Record<string, unknown>;
  values?: Record<string, unknown>;
}

export interface ElizaGuardOptions extends GuardOptions {
  /** Turns an action about to run on `message` into the action(s) to judge; null passes
   * it through unjudged. Default: {@link elizaAction}. */
  map?: (action: Action, message: Memory, state?: State) => Mapped;
  /** Cancels checks (ElizaOS hooks carry no signal of their own). */
  signal?: AbortSignal;
}

/** The message fields the runtime owns (routing, planning): not the action's arguments. */
const RUNTIME_FIELDS: ReadonlySet<string> = new Set([
  "actions",
  "providers",
  "thought",
  "simple",
  "source",
  "inReplyTo",
  "channelType",
  "mentionContext",
  "responseMessageId",
  "responseId",
]);

/** The action an ElizaOS action is judged as, unless a mapper says otherwise: kind
 * `tool`, the action's name, and the message content (without the runtime's routing
 * fields) as its arguments. */
export function elizaAction(action: Action, message: Memory): ActionInput {
  const args: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(message.content ?? {})) {
    if (!RUNTIME_FIELDS.has(key) && value !== undefined) args[key] = value;
  }
  return { kind: "tool", name: action.name, arguments: args };
}

/** Judge `action` on `message`: the refusal (null: run it) and the decision (null:
 * passed through unjudged). */
async function judgeAction(
  options: ElizaGuardOptions,
  action: Action,
  message: Memory,
  state: State | undefined,
): Promise<{ refusal: InterlockBlocked | null; decision: Decision | null }> {
  const map = options.map ?? ((a: Action, m: Memory) => elizaAction(a, m));
  const call: CallOptions = options.signal ? { signal: options.signal } : {};
  const judgement = await judge(options, () => map(action, message, state), call);
  const decision = judgement.decision;
  if (judgement.refusal) return { refusal: judgement.refusal, decision };
  if (decision !== null && options.signal?.aborted) {
    await release(options, decision);
    const late = refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
    return { refusal: late, decision };
  }
  return { refusal: null, decision };
}

/** Give back what an allowed decision reserved, for a call that will not run. */
async function release(options: ElizaGuardOptions, decision: Decision): Promise<void> {
  const id = decision.reservation?.id;
  if (!id) return;
  try {
    await options.client.release(id);
  } catch (error) {
    (options.logger ?? console).warn(`interlock: could not release reservation ${id}: ${describe(error)}`);
  }
}



function logRefusal(runtime: IAgentRuntime, action: Action, refusal: InterlockBlocked): void {
  try {
    runtime.logger?.warn(
      { src: "interlock", action: action.name, verdict: refusal.verdict, decisionId: refusal.decision.decisionId },
      refusal.message,
    );
  } catch {
    // A logger that fails never changes the verdict.
  }
}

/** A `validate` that is true only when the call is allowed (or not ours to judge). */
export function interlockValidator(action: Action, options: ElizaGuardOptions): Validator {
  return async (runtime: IAgentRuntime, message: Memory, state?: State) => {
    const { refusal, decision } = await judgeAction(options, action, message, state);
    if (refusal) logRefusal(runtime, action, refusal);
    // Asking is not running: what an allow reserved is given back at once.
    else if (decision !== null) await release(options, decision);
    return refusal === null;
  };
}

/** The `ActionResult` of a refused action: failed, saying why, the body not run. */
export function refusalResult(action: Action, refusal: InterlockBlocked): ActionResult {
  const decision = refusal.decision;
  return {
    success: false,
    text: refusal.message,
    error: refusal,
    data: {
      actionName: action.name,
      interlock: {
        verdict: decision.verdict,
        decisionId: decision.decisionId,
        ruleIds: [...decision.ruleIds],
        approvalId: decision.approval?.id ?? null,
        approvalUrl: decision.approval?.url ?? null,
      },
    },
  };
}

/** A handler that judges the call and runs `action.handler` only on allow. */
export function guardHandler(action: Action, options: ElizaGuardOptions): Handler {
  const handler = action.handler;
  return async (runtime: IAgentRuntime, message: Memory, state?: State, handlerOptions?: unknown, callback?: unknown, responses?: unknown) => {
    const { refusal, decision } = await judgeAction(options, action, message, state);
    if (refusal) {
      logRefusal(runtime, action, refusal);
      return refusalResult(action, refusal);
    }
    const run = () => handler(runtime, message, state, handlerOptions, callback, responses);
    return settled(options, decision, run, (result) => (result as ActionResult | undefined)?.success === false);
  };
}

/**
 * A copy of `action` with both guards: its own `validate` and then Interlock's (so a
 * refused action is not offered), and the guarded handler (so a refused action never
 * runs, whether or not the runtime asked `validate`).
 */
export function guardAction<A extends Action>(action: A, options: ElizaGuardOptions): A {
  const ownValidate = action.validate;
  const interlockValidate = interlockValidator(action, options);
  const validate: Validator = async (runtime: IAgentRuntime, message: Memory, state?: State) =>
    (await ownValidate(runtime, message, state)) && (await interlockValidate(runtime, message, state));
  return { ...action, validate, handler: guardHandler(action, options) };
}
