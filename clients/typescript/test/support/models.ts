/** Scripted fake models for the AI SDK (and Mastra, which takes AI SDK models). */
import { MockLanguageModelV4, convertArrayToReadableStream } from "ai/test";

export function usage(input: number, output: number) {
  return {
    inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: output, text: output, reasoning: 0 },
  };
}

export interface Step {
  /** A tool call this step makes, or the text it answers. */
  toolCall?: { toolName: string; input: Record<string, unknown>; toolCallId?: string };
  text?: string;
  usage?: [number, number];
}

function content(step: Step, index: number) {
  if (step.toolCall) {
    return [
      {
        type: "tool-call" as const,
        toolCallId: step.toolCall.toolCallId ?? `call-${index}`,
        toolName: step.toolCall.toolName,
        input: JSON.stringify(step.toolCall.input),
      },
    ];
  }
  return [{ type: "text" as const, text: step.text ?? "done" }];
}

function finishReason(step: Step) {
  return step.toolCall ? { unified: "tool-calls" as const, raw: "tool_calls" } : { unified: "stop" as const, raw: "stop" };
}

/** A model answering `doGenerate` with one scripted step per call. */
export function generatingModel(steps: Step[], modelId = "fake-model"): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    modelId,
    doGenerate: steps.map((step, index) => ({
      content: content(step, index),
      finishReason: finishReason(step),
      usage: usage(...(step.usage ?? [10, 5])),
      warnings: [],
    })),
  });
}

export function streamParts(step: Step, index: number) {
  const [input, output] = step.usage ?? [10, 5];
  const parts: unknown[] = [{ type: "stream-start", warnings: [] }];
  if (step.toolCall) {
    parts.push({
      type: "tool-call",
      toolCallId: step.toolCall.toolCallId ?? `call-${index}`,
      toolName: step.toolCall.toolName,
      input: JSON.stringify(step.toolCall.input),
    });
  } else {
    parts.push({ type: "text-start", id: `t${index}` });
    parts.push({ type: "text-delta", id: `t${index}`, delta: step.text ?? "done" });
    parts.push({ type: "text-end", id: `t${index}` });
  }
  parts.push({ type: "finish", finishReason: finishReason(step), usage: usage(input, output) });
  return parts;
}

/** A model answering `doStream` with one scripted step per call. */
export function streamingModel(steps: Step[], modelId = "fake-model"): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    modelId,
    doStream: steps.map((step, index) => ({
      // biome-ignore lint: the parts are the provider's stream parts
      stream: convertArrayToReadableStream(streamParts(step, index) as never[]),
    })),
  });
}
