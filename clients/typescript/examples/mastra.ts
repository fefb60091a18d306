// examples/mastra.ts: a Mastra agent whose tool calls and model calls Interlock guards.
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { InterlockClient } from "interlock-guard";
import { interlockModel, interlockToolHooks } from "interlock-guard/mastra";
import { z } from "zod";

export async function main(env: { INTERLOCK_URL: string; INTERLOCK_KEY: string }, provider: unknown) {
  const client = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY });
  const shell = createTool({
    id: "shell",
    description: "Run a shell command",
    inputSchema: z.object({ command: z.string() }),
    execute: async ({ command }) => `ran ${command}`, // never runs unless Interlock allows it
  });
  const agent = new Agent({
    id: "support",
    name: "support",
    instructions: "Help the user.",
    model: interlockModel(provider as never, { client }), // budgets: reserve, then commit the usage
    tools: { shell },
    hooks: interlockToolHooks({ client }), // refused: {proceed: false, output: <the refusal>}
  });
  const generated = await agent.generate("list the files", { maxSteps: 3 });
  const streamed = await agent.stream("list the files again", { maxSteps: 3 });
  return { generated: generated.text, streamed: await streamed.text };
}
