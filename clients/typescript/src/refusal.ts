/** The error and the text a refused decision gives: the same words as Python's `raise_for`. */
import { ActionDenied, ActionUndetermined, ApprovalRequired, type InterlockBlocked } from "./errors.js";
import type { ActionInput, Decision } from "./types.js";

/** A name quoted as Python's `repr` quotes a string (so refusals read the same). */
function quoted(name: string): string {
  if (name.includes("'") && !name.includes('"')) return `"${name}"`;
  return `'${name.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

/** How a refusal names the action: `tool 'shell'`, `MCP tool 'read_file'`, `the call`. */
export function describeAction(action: Pick<ActionInput, "kind" | "name"> | null | undefined): string {
  if (!action) return "the call";
  const kind = action.kind ?? "tool";
  return `${kind === "mcp" ? "MCP tool" : kind} ${quoted(action.name)}`;
}

/** The error for a non-allow decision; null for allow. */
export function refusalFor(
  decision: Decision,
  action?: Pick<ActionInput, "kind" | "name"> | null,
): InterlockBlocked | null {
  const what = describeAction(action);
  switch (decision.verdict) {
    case "allow":
      return null;
    case "deny": {
      let reason = decision.reason;
      if (action?.kind === "llm" && decision.ruleIds.length === 0) {
        reason += "; no rule allows this model: add one with kind: llm";
      }
      return new ActionDenied(`Interlock denied ${what}: ${reason}`, decision);
    }
    case "require_approval": {
      const url = decision.approval?.url;
      const where = url ? ` (approve at ${url})` : "";
      return new ApprovalRequired(`Interlock requires approval for ${what}${where}: ${decision.reason}`, decision);
    }
    default:
      return new ActionUndetermined(
        `Interlock could not decide on ${what}, so it did not run: ${decision.reason}`,
        decision,
        { cause: decision.cause ?? undefined },
      );
  }
}

/** Throw the refusal for a non-allow decision; return quietly on allow. */
export function raiseFor(decision: Decision, action?: Pick<ActionInput, "kind" | "name"> | null): void {
  const error = refusalFor(decision, action);
  if (error) throw error;
}

/** An undetermined decision made on this side (no answer from the server). */
export function undetermined(cause: string, reason?: string): Decision {
  return {
    verdict: "undetermined",
    reason: reason ?? `no verdict: ${cause}`,
    ruleIds: [],
    decisionId: "",
    approval: null,
    reservation: null,
    cause,
    failOpen: false,
  };
}
