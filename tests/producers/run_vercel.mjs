// Run one scripted conversation under the Vercel AI SDK's telemetry; export over OTLP.
//
// Producers: `vercel-ai6*` (ai 6: `experimental_telemetry` with the tracer and `metadata`),
// `vercel-ai7*` (ai 7: @ai-sdk/otel's `OpenTelemetry` integration, registered once, the GenAI
// form) and `vercel-ai7-legacy*` (its `LegacyOpenTelemetry`: the `ai.*` spans of ai 6). In ai 7
// the conversation id is the call's `runtimeContext.sessionId`, which the integrations record
// as `ai.settings.context.sessionId` when told to (`runtimeContext: true`).
//
// The Node counterpart of run_producer.py (see tests/producers/README.md): it runs inside a
// producer's own Node project (its node_modules), reads the same JSON document on stdin
// (`producer`, `protocol`: "http" (OTLP HTTP/protobuf) or "grpc", `otlp_endpoint`,
// `otlp_grpc_endpoint`, `service_name`, `model`, `agent_name`, `conversation_id`, `turns`,
// `plan`, `outcomes`) and prints the tool calls it executed, as JSON, on its last line.
//
// The model is the SDK's own MockLanguageModelV3 answering from `plan` (each turn's steps of
// parallel tool calls, then the reply); `generateText` runs the tool loop with the real
// tools below, which answer from `outcomes` (a planned failure throws a ToolError, which the
// SDK sends to the model as an `error-text` tool result). Each turn passes the whole history
// as `messages`; the conversation id is `experimental_telemetry.metadata.sessionId`.
import * as ai from 'ai';
import * as aiTest from 'ai/test';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { z } from 'zod';

class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ToolError';
  }
}

const key = (name, args) => JSON.stringify([name, sortKeys(args)]);
function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys(value[k])]));
  }
  return value;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function exporterFor(spec) {
  if (spec.protocol === 'grpc') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-grpc');
    return new OTLPTraceExporter({ url: spec.otlp_grpc_endpoint, timeoutMillis: 10000 });
  }
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
  return new OTLPTraceExporter({ url: `${spec.otlp_endpoint}/v1/traces`, timeoutMillis: 10000 });
}

const spec = await readStdin();
const provider = new TracerProvider({
  resource: resourceFromAttributes({ 'service.name': spec.service_name }),
  spanProcessors: [new BatchSpanProcessor({ exporter: await exporterFor(spec) })],
});
const tracer = provider.getTracer('spanscore-producer');

const outcomes = new Map(spec.outcomes.map((o) => [key(o.name, o.arguments), o]));
const executed = [];
let turnIndex = 0;
function run(name, args, toolCallId) {
  const outcome = outcomes.get(key(name, args));
  if (outcome === undefined) {
    console.error(`run_vercel: no outcome planned for ${name}(${JSON.stringify(args)})`);
    process.exit(3);
  }
  const record = { turn: turnIndex, id: toolCallId, name, arguments: args };
  if ('error' in outcome) {
    executed.push({ ...record, sent: outcome.error, error: outcome.error });
    throw new ToolError(outcome.error);
  }
  executed.push({ ...record, sent: JSON.stringify(outcome.result), error: null });
  return outcome.result;
}

// A real model or tool never answers within the millisecond it was called. The SDK records
// span starts in whole milliseconds, so without a pause a step's model call, its tool calls
// and the next model call could start in the same one, and their order was a coin toss (the
// rules order by start time; a fast run once read the reply before the call it followed).
const pause = () => new Promise((resolve) => setTimeout(resolve, 3));

const { generateText, stepCountIs, tool } = ai;
const tools = {
  get_order: tool({
    description: 'Get order details by order ID',
    inputSchema: z.object({ order_id: z.string() }),
    execute: async (args, { toolCallId }) => {
      await pause();
      return run('get_order', args, toolCallId);
    },
  }),
  search_products: tool({
    description: 'Search the product catalog by keyword and price limit',
    inputSchema: z.object({ query: z.string(), max_price: z.number() }),
    execute: async (args, { toolCallId }) => {
      await pause();
      return run('search_products', args, toolCallId);
    },
  }),
};

const plan = new Map(spec.plan.map((turn) => [turn.user, turn]));
const answered = new Map();
let ids = 0;
const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const ai7 = spec.producer.startsWith('vercel-ai7');
const MockModel = ai7 ? aiTest.MockLanguageModelV4 : aiTest.MockLanguageModelV3;
const model = new MockModel({
  modelId: spec.model,
  doGenerate: async ({ prompt }) => {
    await pause();
    const users = prompt
      .filter((m) => m.role === 'user')
      .flatMap((m) => m.content.filter((p) => p.type === 'text').map((p) => p.text));
    const turn = plan.get(users[users.length - 1]);
    const step = (answered.get(turn.user) ?? -1) + 1;
    answered.set(turn.user, step);
    if (step < turn.steps.length) {
      const content = turn.steps[step].map((call) => ({
        type: 'tool-call',
        toolCallId: `call_${ids++}`,
        toolName: call.name,
        input: JSON.stringify(call.arguments),
      }));
      return { content, finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] };
    }
    const content = [{ type: 'text', text: turn.reply }];
    return { content, finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
  },
});

let telemetry;
if (ai7) {
  const otel = await import('@ai-sdk/otel');
  const Integration = spec.producer.startsWith('vercel-ai7-legacy')
    ? otel.LegacyOpenTelemetry
    : otel.OpenTelemetry;
  ai.registerTelemetry(new Integration({ tracer, runtimeContext: true }));
  telemetry = {
    runtimeContext: { sessionId: spec.conversation_id },
    telemetry: { functionId: spec.agent_name, includeRuntimeContext: { sessionId: true } },
  };
} else {
  telemetry = {
    experimental_telemetry: {
      isEnabled: true,
      tracer,
      functionId: spec.agent_name,
      metadata: { sessionId: spec.conversation_id },
    },
  };
}

const messages = [];
for (const [index, turn] of spec.turns.entries()) {
  turnIndex = index;
  messages.push({ role: 'user', content: turn.user });
  const result = await generateText({
    model,
    tools,
    messages,
    stopWhen: stepCountIs(6),
    ...telemetry,
  });
  // every step's messages: ai 7's `response.messages` holds the last step's only
  messages.push(...(ai7 ? result.responseMessages : result.response.messages));
}
await provider.forceFlush();
await provider.shutdown();
process.stdout.write(`${JSON.stringify(executed)}\n`);
