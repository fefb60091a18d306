/**
 * The conformance table (conformance/adapters/tool-calls.json, exported from Python's
 * tests/adapters/conformance.py) set up for one adapter: the guard options a row
 * describes (its mapper, its throwing observers, its slow server), what the observers
 * saw, and the fail-closed servers every adapter is driven against.
 */
import { expect } from "vitest";

import { InterlockClient } from "../../src/client.js";
import type { GuardOptions, Mapped } from "../../src/judge.js";
import type { ActionInput, Decision } from "../../src/types.js";
import { type Row, ROWS, expectObserversLogged, setUp } from "./rows.js";
import { type ServerInfo, budgets, downServerUrl, startMisbehavingServer } from "./server.js";

export type ConformanceRow = Row;
export const TABLE = { rows: ROWS };

/** What one row runs with, and what its observers saw. */
export interface RowRun {
  /** Spread into an adapter's options (`map` set only for a mapper row: it is given the
   * adapter's default action for the call, as Python's mappers are given the call). */
  options: GuardOptions & { map?: (action: ActionInput) => Mapped };
  decisions: Decision[];
  warnings: string[];
  stop(): Promise<void>;
}

/** {@link setUp} (rows.ts), with every decision the observers saw recorded. */
export async function setUpRow(row: Row): Promise<RowRun> {
  const setup = await setUp(row);
  const decisions: Decision[] = [];
  const observe = setup.options.onDecision;
  const options: RowRun["options"] = {
    ...setup.options,
    onDecision: (decision, actions) => {
      decisions.push(decision);
      observe?.(decision, actions);
    },
  };
  if (setup.mapper) options.map = setup.mapper;
  return { options, decisions, warnings: setup.warnings, stop: () => setup.done() };
}

/** The row's options for an adapter whose mapper takes the framework's call: the row's
 * mapper is given the adapter's default action for it. */
export function adapterOptions<P extends unknown[]>(
  run: RowRun,
  toAction: (...call: P) => ActionInput,
): GuardOptions & { map?: (...call: P) => Mapped } {
  const { map, ...rest } = run.options;
  return map ? { ...rest, map: (...call: P) => map(toAction(...call)) } : rest;
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
  // Python's words exactly; an MCP refusal adds the decision id, as Python's does.
  if (message !== null && kind === "tool") expect(outcome.refusal).toBe(message);
  if (message !== null && kind === "mcp") expect(outcome.refusal?.startsWith(message)).toBe(true);
  expectObserversLogged(row, run.warnings);
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

/** The tool budget of the stateful policy (`tool-spend`, on `paid_lookup`): spent and
 * reserved, to see a tool's reservation committed or released. */
export async function toolSpend(server: ServerInfo): Promise<{ spent: number; reserved: number }> {
  const row = (await budgets(server)).find((item) => item.budget_id === "tool-spend");
  return { spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 };
}

/** What a paid lookup declares it costs (small: the stateful server's budget is shared). */
export const LOOKUP_COST = 0.01;
/** The same, as the server counts it (micro-units). */
export const LOOKUP_CHARGE = LOOKUP_COST * 1_000_000;
