/** The client's public types; the wire shapes come from the server's OpenAPI document. */
import type { components } from "./generated/openapi.js";

type Schemas = components["schemas"];

/** The body of `POST /v1/check` (the trusted fields, tenant and agent, come from the key). */
export type ActionInput = Schemas["ActionIn"];
/** What the server answers a check with. */
export type DecisionOut = Schemas["DecisionOut"];
/** One approval request, as `GET /v1/approvals/{id}` has it. */
export type ApprovalRecord = Schemas["ApprovalOut"];
/** A reservation, as `/v1/budgets/commit` and `/release` return it. */
export type ReservationRecord = Schemas["ReservationOut"];

export type Verdict = "allow" | "deny" | "require_approval" | "undetermined";

/** A verdict, with who decided it and why: `check` / `checkBatch` return one. */
export interface Decision {
  readonly verdict: Verdict;
  readonly reason: string;
  /** The ids of the rules that decided (empty for the policy's default and for failures). */
  readonly ruleIds: readonly string[];
  /** The audit record's id; empty when no answer came from the server. */
  readonly decisionId: string;
  readonly approval: { readonly id: string | null; readonly url: string | null; readonly status: string | null } | null;
  /** Budget held for an allowed call: settle it with `commit` or `release`. */
  readonly reservation: {
    readonly id: string;
    readonly amounts: readonly { budgetId: string; amount: number; unit: string }[];
  } | null;
  /** Why no verdict was reached (set for undetermined only). */
  readonly cause: string | null;
  readonly failOpen: boolean;
}

/** Token usage of one model call (what a provider reports). */
export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
}

/** Per call: a timeout and a cancellation signal (either one firing is undetermined). */
export interface CallOptions {
  /** Milliseconds this request may take; the client's `timeoutMs` otherwise. */
  timeoutMs?: number;
  /** Aborting it makes the check undetermined (a host's invocation signal). */
  signal?: AbortSignal;
}
