/**
 * The shared core of every adapter: map a framework's call to actions, judge them, tell
 * the observers, and run the body only on allow.
 *
 * Mapper semantics (the same as Python's adapters):
 * - one action → `check`; an ordered list → `checkBatch` (the first refusal halts it);
 * - `null` / `undefined` → the call is not ours: it passes through, unjudged;
 * - a throw, or anything that is not an action → `undetermined` ("could not map the call").
 *
 * Observers (`onDecision`, `onBlocked`) see every verdict and can never change one: an
 * observer that throws is logged and the verdict stands.
 */
import type { InterlockClient } from "./client.js";
import { describe } from "./client.js";
import type { InterlockBlocked } from "./errors.js";
import { refusalFor, undetermined } from "./refusal.js";
import type { ActionInput, CallOptions, Decision } from "./types.js";

/** What a mapper returns: one action, an ordered list, or null (= not ours). */
export type Mapped = ActionInput | readonly ActionInput[] | null | undefined;

export interface Logger {
  warn(message: string, ...rest: unknown[]): void;
}

/** Options every adapter takes. */
export interface GuardOptions {
  client: InterlockClient;
  /** Milliseconds a check may take (the client's `timeoutMs` otherwise). */
  timeoutMs?: number;
  /** Sees every decision; cannot change it. */
  onDecision?: (decision: Decision, actions: readonly ActionInput[]) => void;
  /** Sees every refusal; cannot change it. */
  onBlocked?: (refusal: InterlockBlocked, actions: readonly ActionInput[]) => void;
  /** Where a throwing observer is reported (console otherwise). */
  logger?: Logger;
}

/** The outcome of judging one call: `decision` null means passed through, unjudged. */
export interface Judgement {
  readonly decision: Decision | null;
  readonly actions: readonly ActionInput[];
  /** The error to raise (or whose message to return), set unless allowed or passed. */
  readonly refusal: InterlockBlocked | null;
}

const KINDS: ReadonlySet<string> = new Set(["tool", "llm", "mcp", "browser", "effect"]);

function notAnAction(value: unknown): string | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return `the mapper returned ${value === null ? "null" : Array.isArray(value) ? "a nested list" : typeof value}, not an action`;
  }
  const action = value as Record<string, unknown>;
  if (typeof action.name !== "string" || action.name === "") return "the mapper returned an action without a name";
  if (action.kind !== undefined && (typeof action.kind !== "string" || !KINDS.has(action.kind))) {
    return `the mapper returned an action of kind ${JSON.stringify(action.kind)}`;
  }
  const args = action.arguments;
  if (args !== undefined && (typeof args !== "object" || args === null || Array.isArray(args))) {
    return "the mapper returned an action whose arguments are not an object";
  }
  return null;
}

function unmappable(problem: string): Decision {
  const reason = `could not map the call: ${problem}`;
  return undetermined(problem, reason);
}

/** Map and judge one call (see the module comment). Never throws. */
export async function judge(
  options: GuardOptions,
  map: () => Mapped,
  call: CallOptions = {},
): Promise<Judgement> {
  let mapped: Mapped;
  try {
    mapped = map();
  } catch (error) {
    return finish(options, unmappable(describe(error)), []);
  }
  if (mapped === null || mapped === undefined) return { decision: null, actions: [], refusal: null };
  const actions: readonly unknown[] = Array.isArray(mapped) ? mapped : [mapped];
  if (actions.length === 0) return finish(options, unmappable("the mapper returned an empty list"), []);
  for (const action of actions) {
    const problem = notAnAction(action);
    if (problem) return finish(options, unmappable(problem), []);
  }
  const valid = actions as readonly ActionInput[];
  const timeoutMs = call.timeoutMs ?? options.timeoutMs;
  const request: CallOptions = {};
  if (timeoutMs !== undefined) request.timeoutMs = timeoutMs;
  if (call.signal !== undefined) request.signal = call.signal;
  const decision =
    valid.length === 1
      ? await options.client.check(valid[0] as ActionInput, request)
      : await options.client.checkBatch(valid, request);
  return finish(options, decision, valid);
}

function finish(options: GuardOptions, decision: Decision, actions: readonly ActionInput[]): Judgement {
  const refusal = refusalFor(decision, actions[0] ?? null);
  observe(options, "onDecision", () => options.onDecision?.(decision, actions));
  if (refusal) observe(options, "onBlocked", () => options.onBlocked?.(refusal, actions));
  return { decision, actions, refusal };
}

function observe(options: GuardOptions, name: string, run: () => void): void {
  try {
    run();
  } catch (error) {
    (options.logger ?? console).warn(`interlock: the ${name} observer failed (the verdict stands): ${describe(error)}`);
  }
}

/**
 * Judge a call, then run `body` only on allow (or when the mapper passed it through);
 * otherwise throw the refusal. The body never starts before the verdict is in.
 */
export async function guarded<T>(
  options: GuardOptions,
  map: () => Mapped,
  body: () => T | Promise<T>,
  call: CallOptions = {},
): Promise<T> {
  const judgement = await judge(options, map, call);
  if (judgement.refusal) throw judgement.refusal;
  if (call.signal?.aborted) {
    // Cancelled while it was judged: the verdict came too late to run the body.
    const refusal = refusalFor(undetermined("the call was cancelled while it was judged"), judgement.actions[0]);
    throw refusal;
  }
  return body();
}

/**
 * Run an allowed call's body and settle the budget its decision reserved (a tool with
 * a cost): committed when the body completes, released when it fails (`failed` says
 * so of a result, or it throws). A settlement that cannot be made is logged; the
 * server's reaper releases a reservation left unsettled.
 */
export async function settled<T>(
  options: Pick<GuardOptions, "client" | "logger">,
  decision: Decision | null,
  run: () => Promise<T>,
  failed: (result: T) => boolean,
): Promise<T> {
  const id = decision?.reservation?.id;
  if (!id) return run();
  const settle = async (how: "commit" | "release"): Promise<void> => {
    try {
      await (how === "commit" ? options.client.commit(id) : options.client.release(id));
    } catch (error) {
      (options.logger ?? console).warn(`interlock: could not ${how} reservation ${id}: ${describe(error)}`);
    }
  };
  let result: T;
  try {
    result = await run();
  } catch (error) {
    await settle("release");
    throw error;
  }
  await settle(failed(result) ? "release" : "commit");
  return result;
}
