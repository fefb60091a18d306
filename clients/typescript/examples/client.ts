// examples/client.ts: the client on its own: a check, a refusal, an approval, a model call's budget.
import { ActionDenied, ApprovalRequired, InterlockClient } from "interlock-guard";

export async function main(env: { INTERLOCK_URL: string; INTERLOCK_KEY: string }) {
  const interlock = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY, timeoutMs: 2000 });

  // A verdict: allow, deny, require_approval or undetermined (never an exception).
  const decision = await interlock.check({ name: "paid_lookup", arguments: { q: "order 42", est_cost: 0.01 } });
  console.log(decision.verdict, decision.ruleIds); // allow [ 'lookups-ok' ]

  // enforce() throws the refusal instead: ActionDenied, ApprovalRequired, ActionUndetermined.
  try {
    await interlock.enforce({ name: "shell", arguments: { command: "ls" } });
  } catch (error) {
    if (!(error instanceof ActionDenied)) throw error;
    console.log(error.message); // Interlock denied tool 'shell': no rule matched; the policy default is deny
  }
  try {
    await interlock.enforce({ name: "wire", arguments: { amount: 250 } });
  } catch (error) {
    if (!(error instanceof ApprovalRequired)) throw error;
    console.log(error.approvalId, error.url); // apr_... https://approvals.example.com/a/apr_...
    const record = await interlock.waitForApproval(error.approvalId!, { timeoutMs: 100 });
    console.log(record.status); // pending: nobody has decided yet
  }

  // A model call: checked and reserved before, committed with its real usage after.
  const answer = await interlock.llmCall(
    "gpt-5",
    async (call) => {
      const usage = { inputTokens: 12, outputTokens: 8 }; // what your provider reports
      call.record(usage);
      return "the answer";
    },
    { estimate: { inputTokens: 50, outputTokens: 50 } },
  );
  return { decision, answer };
}
