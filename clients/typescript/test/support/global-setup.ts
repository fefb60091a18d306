/** Starts the live servers once for the whole run: the conformance table's policy and
 * the stateful one (budgets, an approval), from conformance/adapters/*.json. */
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { type LiveServer, fixture, startServer } from "./server.js";

declare module "vitest" {
  export interface ProvidedContext {
    toolCalls: { url: string; agentKey: string; approverKey: string };
    stateful: { url: string; agentKey: string; approverKey: string };
  }
}

let servers: LiveServer[] = [];

export async function setup(project: TestProject): Promise<void> {
  const [toolCalls, stateful] = await Promise.all([
    startServer(fixture<{ policy: string }>("tool-calls").policy),
    startServer(fixture<{ policy: string }>("stateful").policy),
  ]);
  servers = [toolCalls, stateful];
  const info = (server: LiveServer) => ({ url: server.url, agentKey: server.agentKey, approverKey: server.approverKey });
  project.provide("toolCalls", info(toolCalls));
  project.provide("stateful", info(stateful));
}

export async function teardown(): Promise<void> {
  await Promise.all(servers.map((server) => server.stop()));
}
