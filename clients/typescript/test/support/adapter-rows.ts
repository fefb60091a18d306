/**
 * The conformance table (conformance/adapters/tool-calls.json, exported from Python's
 * tests/adapters/conformance.py) set up for one adapter: the guard options a row
 * describes (its mapper, its throwing observers, its slow server), what the observers
 * saw, and the fail-closed servers every adapter is driven against.
 */
import { expect } from "vitest";

import { InterlockClient } from "../../src/client.js";
import type { GuardOptions, Mapped } from "../../src/judge.js";
import type { Decision, Verdict } from "../../src/types.js";
import { type FakeServer, type ServerInfo, downServerUrl, fixture, startMisbehavingServer } from "./server.js";

export interface ConformanceRow {
  behaviour: string;
  tool: string;
  args: Record<string, unknown>;
  verdict: Verdict | null;
  runs: boolean;
  says: string;
  /** The whole refusal text Python gives (null where it depends on the language). */
  message: string | null;
  drive: {
    kind: "server" | "mapper" | "slow_server" | "throwing_observers";
    mapper?: "throws" | "garbage" | "not_ours";
    delay_ms?: number;
    timeout_ms?: number;
    observers?: string[];
  };
}

export const TABLE = fixture<{ policy: string; rows: ConformanceRow[] }>("tool-calls");

/** The stand-ins for Python's mappers, in TypeScript. */
const MAPPERS: Record<string, () => Mapped> = {
  throws: () => {
    throw new Error("the mapper exploded");
  },
  // Not an action: no name (Python's stand-in is a dict where an Action belongs).
  garbage: () => ({ tool: "shell" }) as unknown as Mapped,
  not_ours: () => null,
};

/** What one row runs with, and what its observers saw. */
export interface RowRun {
  /** Spread into an adapter's options (`map` is set only for a mapper row). */
  options: GuardOptions & { map?: () => Mapped };
  decisions: Decision[];
  warnings: string[];
  stop(): Promise<void>;
}

export async function setUpRow(row: ConformanceRow, server: ServerInfo): Promise<RowRun> {
  const decisions: Decision[] = [];
  const warnings: string[] = [];
  let fake: FakeServer | null = null;
  let url = server.url;
  if (row.drive.kind === "slow_server") {
    fake = await startMisbehavingServer("slow", row.drive.delay_ms);
    url = fake.url;
  }
  const throwing = row.drive.kind === "throwing_observers";
  const options: RowRun["options"] = {
    client: new InterlockClient({ url, apiKey: server.agentKey }),
    onDecision: (decision) => {
      decisions.push(decision);
      if (throwing) throw new Error("observer exploded");
    },
    onBlocked: () => {
      if (throwing) throw new Error("observer exploded");
    },
    logger: { warn: (message: string) => warnings.push(message) },
  };
  if (row.drive.timeout_ms !== undefined) options.timeoutMs = row.drive.timeout_ms;
  const mapper = row.drive.mapper;
  if (mapper !== undefined) options.map = MAPPERS[mapper] as () => Mapped;
  return {
    options,
    decisions,
    warnings,
    async stop() {
      await fake?.stop();
    },
  };
}

/** The refusal text a row expects, for actions of `kind` (an MCP tool is named so). */
export function expectedMessage(row: ConformanceRow, kind: "tool" | "mcp" = "tool"): string | null {
  if (row.message === null || kind === "tool") return row.message;
  return row.message.replace(` tool '${row.tool}'`, ` MCP tool '${row.tool}'`);
}

/** What an adapter showed for one row. */
export interface Outcome {
  /** How many times the tool body ran. */
  ran: number;
  /** The refusal text the model (or caller) got; null when the call ran. */
  refusal: string | null;
}

/** Assert an adapter kept the row: the verdict, whether the body ran, the words. */
export function expectRow(row: ConformanceRow, run: RowRun, outcome: Outcome, kind: "tool" | "mcp" = "tool"): void {
  expect(outcome.ran, "the body ran").toBe(row.runs ? 1 : 0);
  if (row.verdict === null) {
    expect(run.decisions, "a call passed through is not judged").toEqual([]);
  } else {
    expect(run.decisions.map((decision) => decision.verdict)).toEqual([row.verdict]);
  }
  if (row.runs) {
    expect(outcome.refusal).toBeNull();
    return;
  }
  expect(outcome.refusal).not.toBeNull();
  expect(outcome.refusal).toContain(row.says);
  const message = expectedMessage(row, kind);
  if (message !== null) expect(outcome.refusal).toContain(message);
  if (row.drive.kind === "throwing_observers") {
    expect(run.warnings.some((warning) => warning.includes("observer exploded"))).toBe(true);
  }
}

/** The ways a server fails: each must be undetermined, the body not run. */
export const FAILURES = ["down", "slow", "500", "malformed"] as const;
export type Failure = (typeof FAILURES)[number];

/** A client whose server fails as `how` says; `stop` ends the stand-in. */
export async function failingClient(how: Failure): Promise<{ client: InterlockClient; stop(): Promise<void> }> {
  if (how === "down") {
    return { client: new InterlockClient({ url: await downServerUrl(), apiKey: "k" }), stop: async () => {} };
  }
  const fake = await startMisbehavingServer(how, 2000);
  return {
    client: new InterlockClient({ url: fake.url, apiKey: "k", timeoutMs: how === "slow" ? 100 : 5000 }),
    stop: () => fake.stop(),
  };
}

/** The model-visible text of a fail-closed refusal: undetermined, saying so. */
export function expectUndetermined(text: string | null): void {
  expect(text).not.toBeNull();
  expect(text).toMatch(/^Interlock could not decide on /);
}
