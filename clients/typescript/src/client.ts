/**
 * The Interlock client: decisions made by an `interlock serve` server, with the same
 * semantics as Python's remote guard (`interlock.remote`).
 *
 * Failing closed: `check` never throws for a failure on the way to a verdict. The server
 * unreachable, a timeout, an aborted signal, a 4xx or 5xx, an answer that is not JSON or
 * not a decision: each is an `undetermined` decision whose `cause` says which. Node's
 * `fetch` keeps connections alive between requests (undici's pool), so checks after the
 * first reuse the connection.
 *
 * @example
 * const interlock = new InterlockClient({ url: "http://127.0.0.1:8750", apiKey: process.env.INTERLOCK_KEY! });
 * const decision = await interlock.check({ name: "shell", arguments: { command: "ls" } });
 * if (decision.verdict === "allow") runIt();
 */
import { InterlockError, InterlockRequestError } from "./errors.js";
import { raiseFor, undetermined } from "./refusal.js";
import type {
  ActionInput,
  ApprovalRecord,
  CallOptions,
  Decision,
  ReservationRecord,
  TokenUsage,
} from "./types.js";
import { WireError, approvalOf, decisionOf, errorField, errorText, reservationOf } from "./wire.js";

export interface InterlockClientOptions {
  /** The server: `http://host:8750` (the `/v1` API lives under it). */
  url: string;
  /** An agent key (`interlock keys create --role agent`). */
  apiKey: string;
  /** Milliseconds a request may take when the call names none (default 5000). */
  timeoutMs?: number;
  /** A `fetch` to use instead of the global one (a test double, a proxy agent). */
  fetch?: typeof fetch;
}

/** Longest single approval long-poll (ms); waiting longer repeats it. */
const LONG_POLL_MS = 30_000;

/** Why a request ended without an answer: a timeout or an abort, told apart. */
class Interrupted extends Error {
  override name = "Interrupted";
}

export class InterlockClient {
  readonly url: string;
  readonly timeoutMs: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;

  constructor(options: InterlockClientOptions) {
    if (!options.apiKey) throw new InterlockError("the Interlock client needs an API key (interlock keys create)");
    if (!/^https?:\/\//.test(options.url)) {
      throw new InterlockError(`the server URL must be http:// or https://, not ${JSON.stringify(options.url)}`);
    }
    const timeoutMs = options.timeoutMs ?? 5000;
    if (!(timeoutMs > 0)) throw new InterlockError(`timeoutMs must be positive, not ${timeoutMs}`);
    this.url = options.url.replace(/\/+$/, "");
    this.timeoutMs = timeoutMs;
    this.#headers = {
      authorization: `Bearer ${options.apiKey}`,
      "content-type": "application/json",
      "user-agent": "interlock-guard-ts",
    };
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // -- checks ---------------------------------------------------------------------------

  /** The verdict on one action. Never throws for a failure: that is `undetermined`. */
  async check(action: ActionInput, options: CallOptions = {}): Promise<Decision> {
    return this.#decide("/v1/check", action, options);
  }

  /** The verdict on an ordered list of actions that make one call: the first that is
   * not allowed halts it (and is returned); else the last allow is. */
  async checkBatch(actions: readonly ActionInput[], options: CallOptions = {}): Promise<Decision> {
    if (actions.length === 0) return undetermined("checkBatch needs at least one action");
    return this.#decide("/v1/check/batch", { actions }, options);
  }

  /** `check`, then throw the refusal (`ActionDenied`, `ApprovalRequired`,
   * `ActionUndetermined`) unless the verdict is allow. */
  async enforce(action: ActionInput, options: CallOptions = {}): Promise<Decision> {
    const decision = await this.check(action, options);
    raiseFor(decision, action);
    return decision;
  }

  async #decide(path: string, body: unknown, options: CallOptions): Promise<Decision> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    try {
      return decisionOf(await this.#send("POST", path, body, { ...options, timeoutMs }, true));
    } catch (error) {
      if (error instanceof Interrupted) return undetermined(error.message, error.message);
      return undetermined(describe(error));
    }
  }

  // -- approvals --------------------------------------------------------------------------

  /** Long-poll the server until approval `approvalId` is decided or `timeoutMs` (default
   * five minutes) passes; returns the record either way (`status` says which). Throws
   * `InterlockError` when the server cannot be asked. */
  async waitForApproval(approvalId: string, options: CallOptions = {}): Promise<ApprovalRecord> {
    const end = Date.now() + (options.timeoutMs ?? 300_000);
    const path = `/v1/approvals/${encodeURIComponent(approvalId)}/wait`;
    for (;;) {
      const waitMs = Math.max(0, Math.min(LONG_POLL_MS, end - Date.now()));
      const body = await this.#send("GET", `${path}?timeout=${waitMs / 1000}`, undefined, {
        timeoutMs: waitMs + this.timeoutMs,
        signal: options.signal,
      });
      const record = approvalOf(body);
      if (record.status !== "pending" || Date.now() >= end) return record;
    }
  }

  /** Check `action`; when it needs an approval, wait for a human and check it again
   * (an approved call is allowed once). Returns the final decision. */
  async checkWithApproval(
    action: ActionInput,
    options: CallOptions & { approvalTimeoutMs?: number } = {},
  ): Promise<Decision> {
    const decision = await this.check(action, options);
    const approvalId = decision.approval?.id;
    if (decision.verdict !== "require_approval" || !approvalId) return decision;
    try {
      const record = await this.waitForApproval(approvalId, {
        timeoutMs: options.approvalTimeoutMs,
        signal: options.signal,
      });
      if (record.status !== "approved") return decision;
    } catch (error) {
      return undetermined(`waiting for approval ${approvalId}: ${describe(error)}`);
    }
    return this.check(action, options);
  }

  // -- budgets ----------------------------------------------------------------------------

  /** Spend a reservation: with `usage`, what a model call really used (charged in
   * full); without, what was reserved. Committing twice changes nothing. */
  async commit(reservationId: string, usage?: TokenUsage | null, model?: string): Promise<ReservationRecord> {
    const body: Record<string, unknown> = { reservation_id: reservationId };
    if (usage) body.usage = { input_tokens: tokens(usage.inputTokens), output_tokens: tokens(usage.outputTokens) };
    if (model !== undefined) body.model = model;
    return reservationOf(await this.#send("POST", "/v1/budgets/commit", body, { timeoutMs: this.timeoutMs }));
  }

  /** Give a reservation back: the call did not run. Releasing twice changes nothing. */
  async release(reservationId: string): Promise<ReservationRecord> {
    const body = { reservation_id: reservationId };
    return reservationOf(await this.#send("POST", "/v1/budgets/release", body, { timeoutMs: this.timeoutMs }));
  }

  /** Check and reserve a model call (kind `llm`, the model as its name, the estimate as
   * `input_tokens` / `max_output_tokens`). Throws the refusal unless allowed; the
   * returned {@link LlmReservation} is committed or released exactly once. */
  async reserveLlm(model: string, options: LlmCallOptions = {}): Promise<LlmReservation> {
    const action = llmAction(model, options);
    const decision = await this.check(action, options);
    raiseFor(decision, action);
    return this.reservationFor(model, decision);
  }

  /** The settle-once handle of an allowed model call judged elsewhere (an adapter's
   * mapper): commit or release its reservation through this client. */
  reservationFor(model: string, decision: Decision): LlmReservation {
    return new LlmReservation(this, model, decision);
  }

  /**
   * One guarded model call: checked and reserved before `run`, committed with the usage
   * `run` records (or what was reserved, when it records none) after it returns,
   * released when it throws. Exactly one of the two.
   *
   * @example
   * const text = await interlock.llmCall("gpt-5", async (call) => {
   *   const response = await provider.generate(prompt);
   *   call.record({ inputTokens: response.usage.input, outputTokens: response.usage.output });
   *   return response.text;
   * }, { estimate: { inputTokens: 1200, outputTokens: 800 } });
   */
  async llmCall<T>(model: string, run: (call: LlmReservation) => Promise<T>, options: LlmCallOptions = {}): Promise<T> {
    const call = await this.reserveLlm(model, options);
    let result: T;
    try {
      result = await run(call);
    } catch (error) {
      await call.release();
      throw error;
    }
    await call.commit();
    return result;
  }

  // -- transport --------------------------------------------------------------------------

  async #send(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    options: { timeoutMs: number; signal?: AbortSignal | undefined },
    check = false,
  ): Promise<unknown> {
    const { timeoutMs, signal } = options;
    if (signal?.aborted) throw new Interrupted(`the check was cancelled: ${abortReason(signal)}`);
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onAbort = (): void => controller.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(this.url + path, {
        method,
        headers: this.#headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
      });
      text = await response.text();
    } catch (error) {
      if (timedOut) throw new Interrupted(`no verdict within the ${Math.round(timeoutMs)} ms timeout`);
      if (signal?.aborted) throw new Interrupted(`the check was cancelled: ${abortReason(signal)}`);
      throw new InterlockError(`${method} ${path}: ${describe(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
    return answer(response, text, method, path, check);
  }
}

/** What `reserveLlm` / `llmCall` take. */
export interface LlmCallOptions extends CallOptions {
  /** What the call may use: reserved on the policy's token budgets before it runs. */
  estimate?: TokenUsage;
  /** More arguments of the `llm` action (the messages, the provider). */
  arguments?: Record<string, unknown>;
  context?: ActionInput["context"];
}

/** The `llm` action of a model call. */
export function llmAction(model: string, options: LlmCallOptions = {}): ActionInput {
  const args: Record<string, unknown> = { ...options.arguments };
  if (options.estimate) {
    args.input_tokens = options.estimate.inputTokens;
    args.max_output_tokens = options.estimate.outputTokens;
  }
  const action: ActionInput = { kind: "llm", name: model, arguments: args };
  if (options.context) action.context = options.context;
  return action;
}

/** An allowed model call's reservation: committed or released exactly once. */
export class LlmReservation {
  readonly decision: Decision;
  readonly model: string;
  #usage: TokenUsage | null = null;
  #settled: Promise<ReservationRecord | null> | null = null;
  readonly #client: InterlockClient;

  constructor(client: InterlockClient, model: string, decision: Decision) {
    this.#client = client;
    this.model = model;
    this.decision = decision;
  }

  /** Say what the call used (the provider's usage); `commit` charges it. */
  record(usage: TokenUsage): void {
    this.#usage = usage;
  }

  get settled(): boolean {
    return this.#settled !== null;
  }

  /** Commit the recorded usage (or what was reserved); a second settle is a no-op. */
  commit(usage?: TokenUsage | null): Promise<ReservationRecord | null> {
    if (usage) this.#usage = usage;
    return this.#settle(() => {
      const id = this.decision.reservation?.id;
      return id ? this.#client.commit(id, this.#usage, this.model) : Promise.resolve(null);
    });
  }

  /** Give the reservation back: the call did not happen. A second settle is a no-op. */
  release(): Promise<ReservationRecord | null> {
    return this.#settle(() => {
      const id = this.decision.reservation?.id;
      return id ? this.#client.release(id) : Promise.resolve(null);
    });
  }

  #settle(run: () => Promise<ReservationRecord | null>): Promise<ReservationRecord | null> {
    this.#settled ??= run();
    return this.#settled;
  }
}

function tokens(value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InterlockError(`token counts are integers from 0, not ${value}`);
  }
  return value;
}

function abortReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason.message || reason.name;
  return reason === undefined ? "aborted" : String(reason);
}

/** `Type: message` for any thrown value (as Python's `describe`). */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
    return `${error.name}: ${error.message}${cause}`;
  }
  return String(error);
}

function answer(response: Response, text: string, method: string, path: string, check: boolean): unknown {
  const status = response.status;
  let body: unknown = undefined;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const detail = (): string => errorText(body) ?? text.slice(0, 200);
  if (status >= 500 || (check && status !== 200)) {
    throw new InterlockError(`${method} ${path}: HTTP ${status}: ${detail()}`);
  }
  if (status >= 400) {
    throw new InterlockRequestError(
      `${method} ${path}: HTTP ${status}: ${detail()}`,
      status,
      errorField(body, "code"),
      errorField(body, "field"),
    );
  }
  if (body === undefined) throw new WireError(`${method} ${path}: the answer is not JSON`);
  return body;
}
