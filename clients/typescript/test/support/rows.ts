/**
 * The conformance table (conformance/adapters/tool-calls.json, exported from Python's
 * tests/adapters/conformance.py) and how a TypeScript test expresses each row: the
 * guard options (client, timeout, observers) and the mapper it runs with.
 */
import { expect, inject } from "vitest";
import { InterlockClient } from "../../src/client.js";
import type { InterlockBlocked } from "../../src/errors.js";
import type { GuardOptions, Mapped } from "../../src/judge.js";
import type { ActionInput, Verdict } from "../../src/types.js";
import { type FakeServer, fixture, startMisbehavingServer } from "./server.js";

export interface Row {
  behaviour: string;
  tool: string;
  args: Record<string, unknown>;
  verdict: Verdict | null;
  runs: boolean;
  says: string;
  message: string | null;
  drive:
    | { kind: "server" }
    | { kind: "mapper"; mapper: "throws" | "garbage" | "not_ours" }
    | { kind: "slow_server"; delay_ms: number; timeout_ms: number }
    | { kind: "throwing_observers"; observers: string[] };
}

export const ROWS: Row[] = fixture<{ rows: Row[] }>("tool-calls").rows;

/** What the mappers of the Python table do, in TypeScript. */
export const MAPPERS: Record<string, (action: ActionInput) => Mapped> = {
  throws: () => {
    throw new RangeError("division by zero");
  },
  // Not an action (Python's mapper returns a dict where an Action belongs).
  garbage: () => "shell" as unknown as Mapped,
  not_ours: () => null,
};

/** A row made ready to drive: guard options, an optional mapper, what was logged. */
export interface Setup {
  options: GuardOptions;
  mapper: ((action: ActionInput) => Mapped) | undefined;
  warnings: string[];
  done(): Promise<void>;
}

export async function setUp(row: Row): Promise<Setup> {
  const live = inject("toolCalls");
  const warnings: string[] = [];
  const logger = { warn: (message: string) => warnings.push(message) };
  let fake: FakeServer | null = null;
  let options: GuardOptions;
  switch (row.drive.kind) {
    case "slow_server":
      fake = await startMisbehavingServer("slow", row.drive.delay_ms);
      options = {
        client: new InterlockClient({ url: fake.url, apiKey: "ilk_test_key" }),
        timeoutMs: row.drive.timeout_ms,
        logger,
      };
      break;
    case "throwing_observers":
      options = {
        client: new InterlockClient({ url: live.url, apiKey: live.agentKey }),
        logger,
        onDecision: () => {
          throw new Error("observer exploded");
        },
        onBlocked: () => {
          throw new Error("observer exploded");
        },
      };
      break;
    default:
      options = { client: new InterlockClient({ url: live.url, apiKey: live.agentKey }), logger };
  }
  return {
    options,
    mapper: row.drive.kind === "mapper" ? MAPPERS[row.drive.mapper] : undefined,
    warnings,
    async done() {
      await fake?.stop();
    },
  };
}

/** Assert a refusal reads as Python's: exactly its text, or (mapper rows) its fragment. */
export function expectRefusalText(row: Row, text: string): void {
  if (row.message !== null) expect(text).toBe(row.message);
  expect(text).toContain(row.says);
}

/** Assert the error a raise-style adapter threw is the row's. */
export function expectRefusal(row: Row, error: unknown): asserts error is InterlockBlocked {
  expect(error).toBeInstanceOf(Error);
  const blocked = error as InterlockBlocked;
  expect(blocked.decision?.verdict).toBe(row.verdict);
  expectRefusalText(row, blocked.message);
}

/** After a row ran: a throwing observer was logged, and the verdict stood. */
export function expectObserversLogged(row: Row, warnings: string[]): void {
  if (row.drive.kind === "throwing_observers") {
    expect(warnings.some((line) => line.includes("observer exploded") && line.includes("the verdict stands"))).toBe(true);
  }
}
