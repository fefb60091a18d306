/** The client against a live `interlock serve`, and against servers that fail. */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { InterlockClient } from "../src/client.js";
import { ActionDenied, ActionUndetermined, ApprovalRequired, InterlockBlocked, InterlockError } from "../src/errors.js";
import {
  type FakeServer,
  type Misbehaviour,
  approveWhenPending,
  budgets,
  downServerUrl,
  startMisbehavingServer,
} from "./support/server.js";

const live = inject("toolCalls");
const stateful = inject("stateful");
const client = new InterlockClient({ url: live.url, apiKey: live.agentKey });
const budgeted = new InterlockClient({ url: stateful.url, apiKey: stateful.agentKey });

describe("check", () => {
  it("gives the server's verdict, reason and rule ids", async () => {
    const allow = await client.check({ name: "shell", arguments: { command: "ls" } });
    expect(allow).toMatchObject({ verdict: "allow", reason: "shell is allowed", ruleIds: ["allow-shell"], cause: null });
    expect(allow.decisionId).not.toBe("");
    const deny = await client.check({ name: "shell", arguments: { command: "rm -rf /" } });
    expect(deny.verdict).toBe("deny");
    expect(deny.ruleIds).toEqual(["no-rm"]);
    expect(deny.reason).toContain("no recursive deletes");
  });

  it("gives the policy's default to a tool no rule names", async () => {
    const decision = await client.check({ name: "launch_missiles" });
    expect(decision.verdict).toBe("deny");
    expect(decision.ruleIds).toEqual([]);
  });

  it("names the approval and its URL on require_approval", async () => {
    const decision = await budgeted.check({ name: "wire", arguments: { amount: 5 } });
    expect(decision.verdict).toBe("require_approval");
    expect(decision.approval?.id).toMatch(/^apr_/);
    expect(decision.approval?.url).toBe(`https://approvals.example.com/a/${decision.approval?.id}`);
    const error = await budgeted.enforce({ name: "wire", arguments: { amount: 6 } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApprovalRequired);
    const required = error as ApprovalRequired;
    expect(required.approvalId).toMatch(/^apr_/);
    expect(required.url).toContain(required.approvalId as string);
    expect(required.message).toBe(
      `Interlock requires approval for tool 'wire' (approve at ${required.url}): wires need a human`,
    );
  });

  it("enforce throws the refusal of each verdict, all InterlockBlocked", async () => {
    await expect(client.enforce({ name: "shell", arguments: { command: "ls" } })).resolves.toMatchObject({ verdict: "allow" });
    const denied = await client.enforce({ name: "shell", arguments: { command: "rm x" } }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(ActionDenied);
    expect(denied).toBeInstanceOf(InterlockBlocked);
    const unsure = await client.enforce({ name: "pay", arguments: { amount: "lots" } }).catch((e: unknown) => e);
    expect(unsure).toBeInstanceOf(ActionUndetermined);
    expect((unsure as ActionUndetermined).causeText).toBeTruthy();
  });

  it("checkBatch halts at the first refusal, in order", async () => {
    const halted = await client.checkBatch([
      { name: "shell", arguments: { command: "ls" } },
      { name: "shell", arguments: { command: "rm -rf /" } },
      { name: "pay", arguments: { amount: 500 } },
    ]);
    expect(halted.verdict).toBe("deny");
    expect(halted.ruleIds).toEqual(["no-rm"]);
    const allowed = await client.checkBatch([
      { name: "shell", arguments: { command: "ls" } },
      { name: "pay", arguments: { amount: 5 } },
    ]);
    expect(allowed).toMatchObject({ verdict: "allow", ruleIds: ["pay-small"] });
    expect((await client.checkBatch([])).verdict).toBe("undetermined");
  });

  it("a key the server does not know is undetermined, never allow", async () => {
    const stranger = new InterlockClient({ url: live.url, apiKey: "ilk_0123456789abcdef_nope" });
    const decision = await stranger.check({ name: "shell", arguments: { command: "ls" } });
    expect(decision.verdict).toBe("undetermined");
    expect(decision.cause).toContain("HTTP 401");
  });

  it("refuses to be made without a key or with a bad URL", () => {
    expect(() => new InterlockClient({ url: live.url, apiKey: "" })).toThrow(InterlockError);
    expect(() => new InterlockClient({ url: "ftp://x", apiKey: "k" })).toThrow(/http/);
    expect(() => new InterlockClient({ url: live.url, apiKey: "k", timeoutMs: 0 })).toThrow(/positive/);
  });
});

describe("fail closed", () => {
  const cases: [Misbehaviour, RegExp][] = [
    ["500", /HTTP 500: the store is on fire/],
    ["malformed", /not JSON/],
    ["wrong_shape", /not a decision: verdict "yes please"/],
    ["not_json_content", /not JSON/],
  ];
  for (const [how, cause] of cases) {
    it(`a server answering ${how} is undetermined, the cause said`, async () => {
      const fake = await startMisbehavingServer(how);
      try {
        const decision = await new InterlockClient({ url: fake.url, apiKey: "k" }).check({ name: "shell" });
        expect(decision.verdict).toBe("undetermined");
        expect(decision.cause).toMatch(cause);
        expect(decision.reason).toMatch(/^no verdict: /);
      } finally {
        await fake.stop();
      }
    });
  }

  it("a server that is down is undetermined", async () => {
    const decision = await new InterlockClient({ url: await downServerUrl(), apiKey: "k" }).check({ name: "shell" });
    expect(decision.verdict).toBe("undetermined");
    expect(decision.cause).toMatch(/POST \/v1\/check: TypeError: fetch failed \(.*ECONNREFUSED/);
  });

  describe("slow", () => {
    let slow: FakeServer;
    beforeAll(async () => {
      slow = await startMisbehavingServer("slow", 2000);
    });
    afterAll(async () => slow.stop());

    it("past the per-call timeout is undetermined, as Python words it", async () => {
      const slowClient = new InterlockClient({ url: slow.url, apiKey: "k", timeoutMs: 10_000 });
      const decision = await slowClient.check({ name: "shell" }, { timeoutMs: 50 });
      expect(decision).toMatchObject({ verdict: "undetermined", reason: "no verdict within the 50 ms timeout" });
    });

    it("past the client's timeout is undetermined", async () => {
      const decision = await new InterlockClient({ url: slow.url, apiKey: "k", timeoutMs: 30 }).check({ name: "shell" });
      expect(decision.reason).toBe("no verdict within the 30 ms timeout");
    });

    it("a host's signal aborting takes precedence over a longer timeout", async () => {
      const host = new AbortController();
      setTimeout(() => host.abort(new Error("the run was stopped")), 30);
      const started = Date.now();
      const decision = await new InterlockClient({ url: slow.url, apiKey: "k" }).check(
        { name: "shell" },
        { timeoutMs: 5000, signal: host.signal },
      );
      expect(decision).toMatchObject({ verdict: "undetermined", reason: "the check was cancelled: the run was stopped" });
      expect(Date.now() - started).toBeLessThan(1900); // not the server's 2 s answer
    });

    it("a signal already aborted sends nothing", async () => {
      const before = slow.requests;
      const decision = await new InterlockClient({ url: slow.url, apiKey: "k" }).check(
        { name: "shell" },
        { signal: AbortSignal.abort("gone") },
      );
      expect(decision.reason).toBe("the check was cancelled: gone");
      expect(slow.requests).toBe(before);
    });
  });
});

describe("keep-alive", () => {
  it("checks after the first reuse one connection", async () => {
    let connections = 0;
    const server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        response.writeHead(200, { "content-type": "application/json" });
        response.end('{"verdict":"allow","reason":"ok","rule_ids":[],"decision_id":"d"}');
      });
    });
    server.on("connection", () => {
      connections += 1;
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    try {
      const port = (server.address() as AddressInfo).port;
      const local = new InterlockClient({ url: `http://127.0.0.1:${port}`, apiKey: "k" });
      for (let i = 0; i < 3; i++) await local.check({ name: "shell" }); // warm: the pool is open
      const opened = connections;
      expect(opened).toBeGreaterThan(0);
      for (let i = 0; i < 10; i++) expect((await local.check({ name: "shell" })).verdict).toBe("allow");
      expect(connections).toBe(opened); // ten checks, no new connection
    } finally {
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    }
  });
});

describe("approvals", () => {
  it("waitForApproval returns the decided record; the approved call is then allowed once", async () => {
    const action = { name: "wire", arguments: { amount: 77, to: "approved" } };
    const human = approveWhenPending(stateful, true, (item) => item.action.arguments.to === "approved");
    const decision = await budgeted.checkWithApproval(action, { approvalTimeoutMs: 20_000 });
    await human;
    expect(decision).toMatchObject({ verdict: "allow" });
    expect(decision.approval?.status).toBe("claimed");
    const again = await budgeted.check(action);
    expect(again.verdict).toBe("require_approval"); // the grant was for one call
  });

  it("a denied approval stays a refusal", async () => {
    const action = { name: "wire", arguments: { amount: 78, to: "denied" } };
    const human = approveWhenPending(stateful, false, (item) => item.action.arguments.to === "denied");
    const decision = await budgeted.checkWithApproval(action, { approvalTimeoutMs: 20_000 });
    await human;
    expect(decision.verdict).toBe("require_approval");
    const record = await budgeted.waitForApproval(decision.approval?.id as string, { timeoutMs: 1000 });
    expect(record.status).toBe("denied");
  });

  it("an approval not decided in time comes back pending", async () => {
    const decision = await budgeted.check({ name: "wire", arguments: { amount: 79 } });
    const record = await budgeted.waitForApproval(decision.approval?.id as string, { timeoutMs: 200 });
    expect(record.status).toBe("pending");
  });
});

describe("llmCall", () => {
  async function tokensSpent(): Promise<{ spent: number; reserved: number }> {
    const row = (await budgets(stateful)).find((line) => line.budget_id === "model-tokens");
    return { spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 };
  }

  it("reserves, runs, and commits the usage it recorded", async () => {
    const before = await tokensSpent();
    const text = await budgeted.llmCall(
      "fake-model",
      async (call) => {
        expect(call.decision.reservation?.id).toMatch(/^res_/);
        expect((await tokensSpent()).reserved).toBeGreaterThan(before.reserved);
        call.record({ inputTokens: 12, outputTokens: 30 });
        return "hello";
      },
      { estimate: { inputTokens: 50, outputTokens: 50 } },
    );
    expect(text).toBe("hello");
    const after = await tokensSpent();
    expect(after.spent - before.spent).toBe(42);
    expect(after.reserved).toBe(before.reserved);
  });

  it("releases when the call throws", async () => {
    const before = await tokensSpent();
    await expect(
      budgeted.llmCall("fake-model", async () => {
        throw new Error("provider down");
      }),
    ).rejects.toThrow("provider down");
    const after = await tokensSpent();
    expect(after).toEqual(before);
  });

  it("settles exactly once", async () => {
    const call = await budgeted.reserveLlm("fake-model", { estimate: { inputTokens: 5, outputTokens: 5 } });
    const first = await call.commit({ inputTokens: 1, outputTokens: 2 });
    expect(first?.status).toBe("committed");
    expect(await call.release()).toBe(first);
    expect(call.settled).toBe(true);
  });

  it("a call over the budget is refused before it runs", async () => {
    let ran = false;
    const error = await budgeted
      .llmCall(
        "fake-model",
        async () => {
          ran = true;
        },
        { estimate: { inputTokens: 5000, outputTokens: 5000 } },
      )
      .catch((e: unknown) => e);
    expect(ran).toBe(false);
    expect(error).toBeInstanceOf(ActionDenied);
    expect((error as Error).message).toMatch(/^Interlock denied llm 'fake-model': /);
  });
});
