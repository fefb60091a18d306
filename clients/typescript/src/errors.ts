/**
 * The errors a refused call raises, one tree (as Python's `interlock.errors`):
 *
 *   InterlockError                 anything this package raises
 *   ├── InterlockBlocked           a call that did not run: its verdict was not allow
 *   │   ├── ActionDenied           verdict `deny`
 *   │   ├── ApprovalRequired       verdict `require_approval` (approvalId, url)
 *   │   └── ActionUndetermined     verdict `undetermined` (cause): fail closed
 *   └── InterlockRequestError      the server refused a request outside a check (4xx)
 */
import type { Decision } from "./types.js";

export class InterlockError extends Error {
  override name = "InterlockError";
}

/** A call that did not run; `decision` says why. */
export class InterlockBlocked extends InterlockError {
  override name = "InterlockBlocked";
  readonly decision: Decision;

  constructor(message: string, decision: Decision, options?: { cause?: unknown }) {
    super(message, options);
    this.decision = decision;
  }

  get verdict(): Decision["verdict"] {
    return this.decision.verdict;
  }
}

export class ActionDenied extends InterlockBlocked {
  override name = "ActionDenied";
}

export class ApprovalRequired extends InterlockBlocked {
  override name = "ApprovalRequired";

  /** The approval to wait for (`InterlockClient.waitForApproval`). */
  get approvalId(): string | null {
    return this.decision.approval?.id ?? null;
  }

  /** Where a human approves it, when the policy names an approvals URL. */
  get url(): string | null {
    return this.decision.approval?.url ?? null;
  }
}

export class ActionUndetermined extends InterlockBlocked {
  override name = "ActionUndetermined";

  /** What kept a verdict from being reached (a timeout, the server down, ...). */
  get causeText(): string | null {
    return this.decision.cause;
  }
}

/** The server refused a request outside a check (commit, release, wait): a 4xx. */
export class InterlockRequestError extends InterlockError {
  override name = "InterlockRequestError";
  readonly status: number;
  readonly code: string | null;
  readonly field: string | null;

  constructor(message: string, status: number, code: string | null, field: string | null) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}
