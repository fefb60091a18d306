// What the client adds over a bare fetch to the same endpoint, in the same run.
//
//   npm run bench                        # builds, starts `interlock serve`, measures
//   BENCH_ROUNDS=20 BENCH_CALLS=200 npm run bench
//
// Both sides send the same POST /v1/check over Node's fetch (keep-alive) to one live
// server, interleaved round by round so that drift on a shared machine hits both alike.
// Prints per-call medians, and the median of the per-round ratios client / bare (each
// round's pair measured back to back) with their quartiles.
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { InterlockClient } from "../dist/index.js";
import { interlockPython } from "../scripts/python.mjs";

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 40);
const CALLS = Number(process.env.BENCH_CALLS ?? 100);
const POLICY = "version: 1\ndefault: deny\nrules:\n  - id: allow-shell\n    decision: allow\n    reason: shell is allowed\n    name: shell\n";

async function freePort() {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

async function startServer() {
  const python = interlockPython();
  const folder = mkdtempSync(join(tmpdir(), "interlock-bench-"));
  writeFileSync(join(folder, "interlock.yaml"), POLICY);
  const database = `sqlite:///${join(folder, "interlock.db")}`;
  const { stdout } = await run(python, ["-m", "interlock", "keys", "create", "--tenant", "bench", "--role", "agent", "--name", "bench", "--database", database]);
  const port = await freePort();
  const child = spawn(python, ["-m", "interlock", "serve", "--policy", join(folder, "interlock.yaml"), "--database", database, "--port", String(port), "--log-level", "warning"], { stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      if ((await fetch(`${url}/v1/health`)).ok) break;
    } catch {}
    await new Promise((done) => setTimeout(done, 100));
  }
  return { url, key: stdout.trim(), stop: () => { child.kill("SIGTERM"); rmSync(folder, { recursive: true, force: true }); } };
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const server = await startServer();
try {
  const action = { kind: "tool", name: "shell", arguments: { command: "ls" } };
  const headers = { authorization: `Bearer ${server.key}`, "content-type": "application/json" };
  const client = new InterlockClient({ url: server.url, apiKey: server.key });
  const bare = async () => {
    const response = await fetch(`${server.url}/v1/check`, { method: "POST", headers, body: JSON.stringify(action) });
    const body = await response.json();
    if (body.verdict !== "allow") throw new Error(`bare: ${JSON.stringify(body)}`);
  };
  const viaClient = async () => {
    const decision = await client.check(action);
    if (decision.verdict !== "allow") throw new Error(`client: ${decision.reason}`);
  };
  for (let i = 0; i < 100; i++) {
    await bare();
    await viaClient();
  }
  const times = { bare: [], client: [] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ["bare", "client"] : ["client", "bare"];
    for (const side of order) {
      const call = side === "bare" ? bare : viaClient;
      const started = process.hrtime.bigint();
      for (let i = 0; i < CALLS; i++) await call();
      times[side].push(Number(process.hrtime.bigint() - started) / 1000 / CALLS);
    }
  }
  const bareUs = median(times.bare);
  const clientUs = median(times.client);
  const ratios = times.client.map((us, round) => us / times.bare[round]).sort((a, b) => a - b);
  const quartile = (q) => ratios[Math.floor((ratios.length - 1) * q)];
  console.log(`rounds ${ROUNDS} x ${CALLS} checks each side, sequential, keep-alive, one server`);
  console.log(`bare fetch   median ${bareUs.toFixed(0)} µs/check`);
  console.log(`client.check median ${clientUs.toFixed(0)} µs/check`);
  console.log(`overhead     ${(clientUs - bareUs).toFixed(0)} µs/check`);
  console.log(`ratio client/bare per round: median ${quartile(0.5).toFixed(3)} (quartiles ${quartile(0.25).toFixed(3)}–${quartile(0.75).toFixed(3)})`);
} finally {
  server.stop();
}
