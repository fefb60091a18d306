/**
 * What the AI SDK and Mastra loop tests share: the budgeted client of the stateful
 * server, its model-token budget, and the tool output the model read back.
 */
import { expect, inject } from "vitest";
import { InterlockClient } from "../../src/client.js";
import { budgets } from "./server.js";

/** A client of the stateful server (budgets, approvals) with the agent's key. */
export function budgetedClient(): InterlockClient {
  const stateful = inject("stateful");
  return new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey });
}

/** The stateful server's `model-tokens` budget: spent and reserved. */
export async function modelTokens(): Promise<{ spent: number; reserved: number }> {
  const row = (await budgets(inject("stateful"))).find((line) => line.budget_id === "model-tokens");
  return { spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 };
}

export interface ToolOutput {
  type: string;
  value?: unknown;
  reason?: string;
}

/** The tool result (or tool error) the model read back: the prompt's last message,
 * which must be the tool's. */
export function lastToolOutput(prompt: unknown[] | undefined): ToolOutput {
  const messages = prompt ?? [];
  const last = messages[messages.length - 1] as { role: string; content: { output: ToolOutput }[] };
  expect(last.role).toBe("tool");
  return (last.content[0] as { output: ToolOutput }).output;
}
