// examples/ai-sdk.ts: a generateText loop whose tools and model calls Interlock guards.
import { type LanguageModel, generateText, isStepCount, jsonSchema, tool, wrapLanguageModel } from "ai";
import { InterlockClient } from "interlock-guard";
import { guardTools, interlockMiddleware } from "interlock-guard/ai-sdk";

export async function main(
  env: { INTERLOCK_URL: string; INTERLOCK_KEY: string },
  provider: LanguageModel,
): Promise<{ text: string; content: unknown[] }> {
  const client = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY });
  const tools = guardTools(
    {
      shell: tool({
        description: "Run a shell command",
        inputSchema: jsonSchema<{ command: string }>({ type: "object", properties: { command: { type: "string" } } }),
        execute: async ({ command }) => `ran ${command}`, // never runs unless Interlock allows it
      }),
    },
    { client },
  );
  // Each model call: judged, reserved before the provider is called, committed after.
  const model = wrapLanguageModel({ model: provider as never, middleware: interlockMiddleware({ client }) });
  const result = await generateText({ model, tools, prompt: "list the files", stopWhen: isStepCount(3) });
  // The refused call reached the model as an error tool-result; the loop went on.
  return { text: result.text, content: result.steps.flatMap((step) => step.content) };
}
