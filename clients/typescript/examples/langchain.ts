// examples/langchain.ts: an agent whose tool calls Interlock judges: the middleware for a
// createAgent loop, and a guarded tool for code that calls a tool itself.
import { AIMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { createAgent, tool } from "langchain";
import { z } from "zod";
import { InterlockClient } from "interlock-guard";
import { guardTool, interlockMiddleware } from "interlock-guard/langchain";

export async function main(env: { INTERLOCK_URL: string; INTERLOCK_KEY: string }) {
  const interlock = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY });

  const shell = tool(async ({ command }) => `ran ${command}`, {
    name: "shell",
    description: "Run a shell command",
    schema: z.object({ command: z.string() }),
  });

  // A fake model that asks for `rm -rf /` and then answers: use your chat model here.
  const model = fakeModel()
    .respondWithTools([{ name: "shell", args: { command: "rm -rf /" }, id: "call-1" }])
    .respond(new AIMessage("I am not allowed to delete that."));

  const agent = createAgent({
    model,
    tools: [shell],
    middleware: [interlockMiddleware({ client: interlock })],
  });
  const { messages } = await agent.invoke({ messages: [{ role: "user", content: "clean up" }] });
  const refusal = messages.find((message) => ToolMessage.isInstance(message)) as ToolMessage;
  // refusal.status === "error"; the model read refusal.content and answered:
  const answer = messages.at(-1)?.content;

  // Outside the middleware: the tool judges its own calls, and throws a refusal.
  const guarded = guardTool(shell, { client: interlock });
  const listing = await guarded.invoke({ command: "ls" }); // "ran ls"
  const blocked = await guarded.invoke({ command: "rm -rf /" }).catch((error: Error) => error);

  return { refusal: refusal.content, status: refusal.status, answer, listing, blocked };
}
