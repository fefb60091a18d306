/** Reading the server's answers: anything that is not the shape we expect is an error. */
import type { ApprovalRecord, Decision, DecisionOut, ReservationRecord, Verdict } from "./types.js";

const VERDICTS: ReadonlySet<string> = new Set(["allow", "deny", "require_approval", "undetermined"]);

export class WireError extends Error {
  override name = "WireError";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function stringOrNull(value: unknown, what: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new WireError(`${what} is not a string`);
  return value;
}

function strings(value: unknown, what: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) {
    throw new WireError(`${what} is not a list of strings`);
  }
  return value as string[];
}

/** The {@link Decision} in a `DecisionOut` body; throws WireError when it is not one. */
export function decisionOf(body: unknown): Decision {
  if (!isObject(body)) throw new WireError("the server's answer is not a decision: not an object");
  const out = body as Partial<DecisionOut> & Record<string, unknown>;
  try {
    if (typeof out.verdict !== "string" || !VERDICTS.has(out.verdict)) {
      throw new WireError(`verdict ${JSON.stringify(out.verdict)} is not one of ${[...VERDICTS].join(", ")}`);
    }
    if (typeof out.reason !== "string") throw new WireError("reason is not a string");
    if (typeof out.decision_id !== "string") throw new WireError("decision_id is not a string");
    const approval = out.approval;
    if (approval !== undefined && approval !== null && !isObject(approval)) {
      throw new WireError("approval is not an object");
    }
    const reservation = out.reservation;
    if (reservation !== undefined && reservation !== null && !isObject(reservation)) {
      throw new WireError("reservation is not an object");
    }
    return {
      verdict: out.verdict as Verdict,
      reason: out.reason,
      ruleIds: strings(out.rule_ids, "rule_ids"),
      decisionId: out.decision_id,
      approval: isObject(approval)
        ? {
            id: stringOrNull(approval.id, "approval.id"),
            url: stringOrNull(approval.url, "approval.url"),
            status: stringOrNull(approval.status, "approval.status"),
          }
        : null,
      reservation: isObject(reservation) ? reservationRefOf(reservation) : null,
      cause: stringOrNull(out.cause, "cause"),
      failOpen: out.fail_open === true,
    };
  } catch (error) {
    if (error instanceof WireError && !error.message.startsWith("the server's answer")) {
      throw new WireError(`the server's answer is not a decision: ${error.message}`);
    }
    throw error;
  }
}

function reservationRefOf(body: Record<string, unknown>): NonNullable<Decision["reservation"]> {
  if (typeof body.id !== "string") throw new WireError("reservation.id is not a string");
  const amounts = Array.isArray(body.amounts) ? body.amounts : [];
  return {
    id: body.id,
    amounts: amounts.map((item: unknown) => {
      if (!isObject(item) || typeof item.budget_id !== "string" || typeof item.amount !== "number") {
        throw new WireError("reservation.amounts holds something that is not an amount");
      }
      return { budgetId: item.budget_id, amount: item.amount, unit: String(item.unit) };
    }),
  };
}

const APPROVAL_STATUSES: ReadonlySet<string> = new Set(["pending", "approved", "denied", "expired", "claimed"]);

export function approvalOf(body: unknown): ApprovalRecord {
  if (!isObject(body) || typeof body.id !== "string" || typeof body.status !== "string" || !APPROVAL_STATUSES.has(body.status)) {
    throw new WireError("the server's answer is not an approval");
  }
  return body as unknown as ApprovalRecord;
}

const RESERVATION_STATUSES: ReadonlySet<string> = new Set(["reserved", "committed", "released", "expired"]);

export function reservationOf(body: unknown): ReservationRecord {
  if (!isObject(body) || typeof body.id !== "string" || typeof body.status !== "string" || !RESERVATION_STATUSES.has(body.status)) {
    throw new WireError("the server's answer is not a reservation");
  }
  return body as unknown as ReservationRecord;
}

/** The `error.message` of an error body, if it has one. */
export function errorText(body: unknown): string | null {
  if (isObject(body) && isObject(body.error) && typeof body.error.message === "string") {
    return body.error.message;
  }
  return null;
}

export function errorField(body: unknown, field: "code" | "field"): string | null {
  if (isObject(body) && isObject(body.error) && typeof body.error[field] === "string") {
    return body.error[field];
  }
  return null;
}
