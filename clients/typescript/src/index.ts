/** interlock-guard: the TypeScript client of an Interlock server, and the shared core of its adapters. */
export { InterlockClient, LlmReservation, describe, llmAction } from "./client.js";
export type { InterlockClientOptions, LlmCallOptions } from "./client.js";
export {
  ActionDenied,
  ActionUndetermined,
  ApprovalRequired,
  InterlockBlocked,
  InterlockError,
  InterlockRequestError,
} from "./errors.js";
export { guarded, judge } from "./judge.js";
export type { GuardOptions, Judgement, Logger, Mapped } from "./judge.js";
export { describeAction, raiseFor, refusalFor, undetermined } from "./refusal.js";
export type {
  ActionInput,
  ApprovalRecord,
  CallOptions,
  Decision,
  DecisionOut,
  ReservationRecord,
  TokenUsage,
  Verdict,
} from "./types.js";
