// examples/eliza.ts: an ElizaOS plugin whose action Interlock judges: its validator keeps a
// refused action out of the prompt, and its guarded handler keeps it from running (the
// runtime runs a handler without asking validate).
import { InterlockClient } from "interlock-guard";
import { type Action, guardAction } from "interlock-guard/eliza";

export const transfer: Action = {
  name: "TRANSFER",
  description: "Send tokens to an address",
  similes: ["SEND_TOKENS"],
  examples: [],
  validate: async () => true,
  handler: async (_runtime, message) => {
    const { to, amount } = message.content;
    return { success: true, text: `sent ${amount} to ${to}` };
  },
};

export function guardedPlugin(env: { INTERLOCK_URL: string; INTERLOCK_KEY: string }) {
  const interlock = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY });
  return {
    name: "guarded-wallet",
    description: "A wallet whose transfers Interlock judges",
    actions: [
      guardAction(transfer, {
        client: interlock,
        // What the policy sees: the action's own arguments, not the whole message.
        map: (action, message) => ({
          kind: "tool",
          name: action.name.toLowerCase(),
          arguments: { to: message.content.to, amount: message.content.amount },
        }),
        onBlocked: (refusal) => console.warn(refusal.message),
      }),
    ],
  };
}
