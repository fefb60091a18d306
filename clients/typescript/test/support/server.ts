/**
 * A live `interlock serve` for the tests: a fresh SQLite store in a temporary folder, an
 * agent key and an approver key made with `interlock keys create`, the server on a free
 * port. The Python is $INTERLOCK_PYTHON, else the repository's .venv.
 *
 * Also the stand-ins for a server that fails: one that answers 500, garbage or slowly,
 * and a port nobody listens on.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import { type AddressInfo, createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const HERE = dirname(fileURLToPath(import.meta.url));
export const PACKAGE_ROOT = resolve(HERE, "../..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");

export function interlockPython(): string {
  if (process.env.INTERLOCK_PYTHON) return process.env.INTERLOCK_PYTHON;
  const venv = join(REPO_ROOT, ".venv/bin/python");
  if (existsSync(venv)) return venv;
  throw new Error("no Python with interlock: set INTERLOCK_PYTHON or make the repository's .venv");
}

/** A conformance fixture file (conformance/adapters/NAME.json). */
export function fixture<T>(name: string): T {
  return JSON.parse(readFileSync(join(REPO_ROOT, "conformance/adapters", `${name}.json`), "utf8")) as T;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createNetServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolvePort(port));
    });
  });
}

/** What a test needs to reach a live server (serialisable: globalSetup provides it). */
export interface ServerInfo {
  url: string;
  agentKey: string;
  approverKey: string;
}

export interface LiveServer extends ServerInfo {
  stop(): Promise<void>;
}

async function createKey(python: string, database: string, role: string, name: string): Promise<string> {
  const { stdout } = await run(python, [
    "-m", "interlock", "keys", "create",
    "--tenant", "ts", "--role", role, "--name", name, "--database", database,
  ]);
  return stdout.trim();
}

/** Start `interlock serve` on `policy` (YAML text); stop it with `stop()`. */
export async function startServer(policy: string): Promise<LiveServer> {
  const python = interlockPython();
  const folder = mkdtempSync(join(tmpdir(), "interlock-ts-"));
  const policyFile = join(folder, "interlock.yaml");
  writeFileSync(policyFile, policy);
  const database = `sqlite:///${join(folder, "interlock.db")}`;
  const agentKey = await createKey(python, database, "agent", "ts-agent");
  const approverKey = await createKey(python, database, "approver", "ts-approver");
  const port = await freePort();
  const child: ChildProcess = spawn(
    python,
    ["-m", "interlock", "serve", "--policy", policyFile, "--database", database,
      "--port", String(port), "--log-level", "warning", "--reload-interval", "0"],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, PYTHONUNBUFFERED: "1" } },
  );
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`interlock serve exited ${child.exitCode}: ${stderr}`);
    try {
      const response = await fetch(`${url}/v1/health`);
      if (response.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`interlock serve did not start in 60 s: ${stderr}`);
    }
    await new Promise((done) => setTimeout(done, 100));
  }
  return {
    url,
    agentKey,
    approverKey,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((done) => child.once("exit", done));
        child.kill("SIGTERM");
        await Promise.race([exited, new Promise((done) => setTimeout(done, 10_000))]);
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

async function asApprover(server: ServerInfo, method: string, path: string, body?: unknown): Promise<unknown> {
  const response = await fetch(server.url + path, {
    method,
    headers: { authorization: `Bearer ${server.approverKey}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: HTTP ${response.status}: ${text}`);
  return JSON.parse(text);
}

/** Approve or deny an approval, as the approver key (a human, elsewhere). */
export async function decideApproval(server: ServerInfo, approvalId: string, approve: boolean): Promise<void> {
  await asApprover(server, "POST", `/v1/approvals/${approvalId}/${approve ? "approve" : "deny"}`, {
    reason: "checked by the test",
  });
}

export interface BudgetRow {
  budget_id: string;
  spent: number;
  reserved: number;
}

/** The tenant's budget counters (`GET /v1/budgets`). */
export async function budgets(server: ServerInfo): Promise<BudgetRow[]> {
  const body = (await asApprover(server, "GET", "/v1/budgets")) as { budgets: BudgetRow[] };
  return body.budgets;
}

/** The pending approvals of the tenant. */
export interface PendingApproval {
  id: string;
  status: string;
  action: { name: string; arguments: Record<string, unknown> };
}

export async function pendingApprovals(server: ServerInfo): Promise<PendingApproval[]> {
  const body = (await asApprover(server, "GET", "/v1/approvals")) as { approvals: PendingApproval[] };
  return body.approvals.filter((item) => item.status === "pending");
}

/** A human in another process: approves (or denies) the first pending approval that
 * `which` picks. */
export async function approveWhenPending(
  server: ServerInfo,
  approve = true,
  which: (item: PendingApproval) => boolean = () => true,
): Promise<string> {
  for (let i = 0; i < 1000; i++) {
    const found = (await pendingApprovals(server)).find(which);
    if (found) {
      await decideApproval(server, found.id, approve);
      return found.id;
    }
    await new Promise((done) => setTimeout(done, 20));
  }
  throw new Error("no approval was requested");
}

export type Misbehaviour = "500" | "malformed" | "wrong_shape" | "slow" | "not_json_content";

export interface FakeServer {
  url: string;
  requests: number;
  stop(): Promise<void>;
}

/** A server that answers every request badly, as `how` says (`slow`: after `delayMs`). */
export async function startMisbehavingServer(how: Misbehaviour, delayMs = 2000): Promise<FakeServer> {
  const state = { requests: 0 };
  const server: Server = createServer((request: IncomingMessage, response: ServerResponse) => {
    state.requests += 1;
    request.resume();
    const reply = (status: number, body: string): void => {
      response.writeHead(status, { "content-type": "application/json" });
      response.end(body);
    };
    switch (how) {
      case "500":
        reply(500, '{"error": {"code": "internal", "message": "the store is on fire"}}');
        return;
      case "malformed":
        reply(200, '{"verdict": "allow", "reason": ');
        return;
      case "wrong_shape":
        reply(200, '{"verdict": "yes please", "reason": "sure", "rule_ids": [], "decision_id": "d"}');
        return;
      case "not_json_content":
        reply(200, "<html>allow</html>");
        return;
      case "slow": {
        const timer = setTimeout(
          () => reply(200, '{"verdict": "allow", "reason": "slow allow", "rule_ids": [], "decision_id": "d"}'),
          delayMs,
        );
        response.on("close", () => clearTimeout(timer));
        return;
      }
    }
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return state.requests;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}

/** A URL nobody listens on (the server is down). */
export async function downServerUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}
