"""Run one scripted conversation under a real producer instrumentation; export over OTLP/HTTP.

Runs inside a producer's own virtual environment (see tests/producers/README.md), so it imports
nothing from spanscore: only the standard library and what that environment has installed (the
producer package, `openai`, the OpenTelemetry SDK and its OTLP/HTTP exporter, and for the
Agents producer the `openai-agents` SDK).

It reads one JSON document on stdin::

    {"producer": "openai-v2" | "openinference" | "openinference-agents" | "openllmetry"
                 | "smolagents" | "llamaindex" | "crewai" | "traceloop-sdk" | ...,
     "llm_base_url": "http://127.0.0.1:PORT/v1",     # the ScriptedLLM
     "otlp_endpoint": "http://127.0.0.1:PORT",       # the collector's OTLP/HTTP address
     "service_name": "...", "model": "gpt-4.1-mini", "agent_name": "...",
     "conversation_id": "...",
     "turns": [{"user": "..."}, ...],                # the user messages, in order
     "plan": [{"user", "steps": [[{"name", "arguments"}]], "reply"}],  # for scripted models
     "outcomes": [{"name": "get_order", "arguments": {...}, "result": {...}},
                  {"name": "get_order", "arguments": {...}, "error": "..."}, ...]}

and prints one JSON document on stdout: the tool calls it executed, in order,
``[{"turn", "id", "name", "arguments", "sent", "error"}]`` (`sent`: the text sent back to the
model; `error`: the tool's error message, or null).

The tools (`get_order`, `search_products`) answer from `outcomes`: the result for the exact
arguments, or a raised `ToolError` with the given message (sent back to the model as
``{"error": message}``). A call that matches no outcome is a bug of the test: it exits 3.

How each producer is switched on, with its content capture and its conversation id:

- openai-v2 (`opentelemetry-instrumentation-openai-v2` over `opentelemetry-util-genai`):
  `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_and_event` (messages on the span and
  in a `gen_ai.client.inference.operation.details` log record; the plain `true` of the
  package's docs selects no mode with these versions: util-genai's `is_experimental_mode()` is
  always true, so "true" is read as an unknown mode, i.e. no content). Each turn runs inside
  util-genai's `invoke_local_agent()` with its `conversation_id` set (util-genai 1.1b0 writes
  it on that span only), each tool call inside util-genai's `tool(...)` (an `execute_tool`
  span).
- openinference (`openinference-instrumentation-openai`): content is captured by default
  (`OPENINFERENCE_HIDE_*` unset); each turn runs inside `using_session(conversation_id)` and an
  OITracer AGENT span; tool calls inside OITracer TOOL spans (`openinference_span_kind="tool"`,
  `set_tool`, `set_input`, `set_output`, `tool.id`).
- openinference-agents (`openinference-instrumentation-openai-agents`): the Agents SDK's
  `Runner` with function tools over the Responses API; each turn inside `using_session`.
- openllmetry (`opentelemetry-instrumentation-openai`, Traceloop):
  `TRACELOOP_TRACE_CONTENT=true`; the conversation id is the association property
  `session_id`, put on the context exactly as traceloop-sdk's `set_association_properties` does
  and copied onto every span by a span processor doing what traceloop-sdk's does
  (`traceloop.association.properties.<key>`), so that the heavy traceloop-sdk need not be
  installed. The instrumentation makes no tool spans and no span per turn.
"""

import asyncio
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

# Content capture switches, set before any instrumentation is imported (some read them early).
CONTENT_SWITCHES: dict[str, dict[str, str]] = {
    "openai-v2": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_and_event",
    },
    "openai-v2-events": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only",
    },
    "openinference": {},
    "openinference-agents": {},
    "openinference-agents-handoff": {},
    "spanscore-agents": {},
    "openllmetry": {"TRACELOOP_TRACE_CONTENT": "true"},
    "traceloop-sdk": {"TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_TELEMETRY": "false"},
    "traceloop-sdk-events": {"TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_TELEMETRY": "false"},
    "smolagents": {},
    "smolagents-model": {},
    "llamaindex": {},
    # CrewAI: no usage telemetry of its own, no tracing prompt (offline, non-interactive)
    "crewai": {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false"},
    # Google ADK: its current schema, content on the spans (ADK's default captures none);
    # and its legacy schema, content in its `gcp.vertex.agent.*` attributes (on by default).
    "adk": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"},
    "adk-legacy": {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"},
    # the legacy schema with message content in log events (the old boolean switch: EVENT_ONLY)
    "adk-legacy-events": {
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    },
    "pydantic-ai": {},
    "pydantic-ai-v2": {},
    # Strands Agents' three convention settings: per-message span events holding Bedrock
    # Converse blocks (default); the current GenAI form as span events; and as attributes.
    "strands": {},
    "strands-latest": {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"},
    "strands-attributes": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_span_attributes_only"
    },
}
# Two producers again, with spanscore's conversation() carrying the id in the same process.
CONTENT_SWITCHES |= {
    "openai-v2+spanscore": CONTENT_SWITCHES["openai-v2"],
    "openinference+spanscore": CONTENT_SWITCHES["openinference"],
}

SYSTEM_PROMPT = "You are a customer-service agent. Use the tools to answer."

# The tools as the Chat Completions API describes them (the Agents SDK derives the same schemas
# from the Python functions below).
CHAT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Get order details by order ID",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_products",
            "description": "Search the product catalog by keyword and price limit",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "max_price": {"type": "number"}},
                "required": ["query", "max_price"],
            },
        },
    },
]
DESCRIPTIONS = {t["function"]["name"]: t["function"]["description"] for t in CHAT_TOOLS}
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in CHAT_TOOLS}


class ToolError(Exception):
    """A tool failed; its message goes back to the model."""


def _key(name: str, arguments: Any) -> str:
    return json.dumps([name, arguments], sort_keys=True)


class Tools:
    """Deterministic tools answering from the plan's outcomes; records what was executed."""

    def __init__(self, outcomes: list[dict[str, Any]]) -> None:
        self.outcomes = {_key(o["name"], o["arguments"]): o for o in outcomes}
        self.executed: list[dict[str, Any]] = []
        self.turn = 0

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The result as JSON text, or ToolError."""
        outcome = self.outcomes.get(_key(name, arguments))
        if outcome is None:
            print(f"run_producer: no outcome planned for {name}({arguments})", file=sys.stderr)
            os._exit(3)
        if "error" in outcome:
            raise ToolError(outcome["error"])
        return json.dumps(outcome["result"])

    def run(
        self,
        name: str,
        arguments: dict[str, Any],
        call_id: str = "",
        sent_error: Callable[[str], str] = lambda message: json.dumps({"error": message}),
    ) -> str:
        """`call`, recorded: the result text, or ToolError, recorded with what the agent sends
        the model for it (`sent_error`; a call id left empty is taken from the model's later)."""
        try:
            result = self.call(name, arguments)
        except ToolError as exc:
            self.record(call_id, name, arguments, sent_error(str(exc)), str(exc))
            raise
        self.record(call_id, name, arguments, result, None)
        return result

    def record(self, call_id: str, name: str, arguments: Any, sent: str, error: str | None) -> None:
        self.executed.append(
            {
                "turn": self.turn,
                "id": call_id,
                "name": name,
                "arguments": arguments,
                "sent": sent,
                "error": error,
            }
        )


# --- OpenTelemetry: traces and logs over OTLP/HTTP --------------------------------------------


class Telemetry:
    def __init__(self, endpoint: str, service_name: str) -> None:
        from opentelemetry import _logs, trace
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": service_name})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=10))
        )
        self.logger_provider = LoggerProvider(resource=resource)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs", timeout=10))
        )
        trace.set_tracer_provider(self.tracer_provider)
        _logs.set_logger_provider(self.logger_provider)

    def close(self) -> None:
        if not self.tracer_provider.force_flush(30_000):
            raise SystemExit("run_producer: spans were not flushed")
        if not self.logger_provider.force_flush(30_000):
            raise SystemExit("run_producer: log records were not flushed")
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


# --- a plain Chat Completions tool loop (openai-v2, openinference, openllmetry) ---------------

TurnScope = Callable[[], AbstractContextManager[Any]]
ToolScope = Callable[[str, str, dict[str, Any]], AbstractContextManager[Any]]
ToolDone = Callable[[Any, str | None, ToolError | None], None]


def chat_loop(
    spec: dict[str, Any],
    tools: Tools,
    turn_scope: TurnScope,
    tool_scope: ToolScope | None = None,
    tool_done: ToolDone | None = None,
    decorate_turn: Callable[[Callable[[], None]], Callable[[], None]] = lambda turn: turn,
) -> None:
    """Each user turn: ask, run the requested tools (in the order asked), send the results
    back, until the model answers with text. `turn_scope` wraps each turn; `tool_scope(call_id,
    name, arguments)` wraps each tool call and `tool_done(scope value, result, error)` reports
    its outcome to it; `decorate_turn` decorates the function that runs a turn (a framework's
    decorator, such as traceloop-sdk's `@workflow`)."""
    import openai

    # Any: typed against whichever openai the producer's venv has, not the main venv's
    client: Any = openai.OpenAI(base_url=spec["llm_base_url"], api_key="test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        messages.append({"role": "user", "content": turn["user"]})

        def run_turn() -> None:
            for _ in range(10):
                response = client.chat.completions.create(
                    model=spec["model"], messages=messages, tools=CHAT_TOOLS
                )
                message = response.choices[0].message
                if not message.tool_calls:
                    messages.append({"role": "assistant", "content": message.content})
                    break
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    name, arguments = call.function.name, json.loads(call.function.arguments)
                    scope = tool_scope(call.id, name, arguments) if tool_scope else nullcontext()
                    with scope as handle:
                        try:
                            result: str | None = tools.call(name, arguments)
                            error = None
                        except ToolError as exc:
                            result, error = None, exc
                        if tool_done is not None:
                            tool_done(handle, result, error)
                    sent = result if error is None else json.dumps({"error": str(error)})
                    assert sent is not None
                    tools.record(call.id, name, arguments, sent, str(error) if error else None)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": sent})
            else:
                raise SystemExit("run_producer: the model never answered with text")

        with turn_scope():
            decorate_turn(run_turn)()


# --- the producers ----------------------------------------------------------------------------


def spanscore_conversation(spec: dict[str, Any], telemetry: Telemetry) -> TurnScope:
    """spanscore.instrumentation's `conversation()` in this process, next to the producer:
    its span processor on the producer's provider, the id carried by context (baggage) only."""
    sys.path.insert(0, spec["spanscore_path"])
    from spanscore.instrumentation import ConversationSpanProcessor, conversation

    telemetry.tracer_provider.add_span_processor(ConversationSpanProcessor())
    return lambda: conversation(spec["conversation_id"], scenario_id="producers")


def run_openai_v2(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    OpenAIInstrumentor().instrument(
        tracer_provider=telemetry.tracer_provider, logger_provider=telemetry.logger_provider
    )
    handler = TelemetryHandler(
        tracer_provider=telemetry.tracer_provider,
        logger_provider=telemetry.logger_provider,
    )

    carried = spec.get("spanscore_path")
    outer = spanscore_conversation(spec, telemetry) if carried else nullcontext

    @contextmanager
    def turn_scope() -> Iterator[Any]:
        with (
            outer(),
            handler.invoke_local_agent(
                agent_name=spec["agent_name"], request_model=spec["model"]
            ) as invocation,
        ):
            if not carried:  # with spanscore, only its conversation() says which it is
                invocation.conversation_id = spec["conversation_id"]
            yield invocation

    @contextmanager
    def tool_scope(call_id: str, name: str, arguments: dict[str, Any]) -> Iterator[Any]:
        invocation = handler.tool(
            name, tool_call_id=call_id, tool_type="function", tool_description=DESCRIPTIONS[name]
        )
        invocation.arguments = arguments
        yield invocation

    def tool_done(invocation: Any, result: str | None, error: ToolError | None) -> None:
        if error is not None:
            invocation.fail(error)
        else:
            invocation.tool_result = result
            invocation.stop()

    chat_loop(spec, tools, turn_scope, tool_scope, tool_done)


def run_openinference(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    from openinference.instrumentation import OITracer, TraceConfig, using_session
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.trace import Status, StatusCode

    OpenAIInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    tracer = OITracer(
        telemetry.tracer_provider.get_tracer("spanscore.tests.producers"), config=TraceConfig()
    )

    session: TurnScope = lambda: using_session(spec["conversation_id"])  # noqa: E731
    if spec.get("spanscore_path"):  # spanscore's conversation() instead of using_session
        session = spanscore_conversation(spec, telemetry)

    @contextmanager
    def turn_scope() -> Iterator[None]:
        with (
            session(),
            tracer.start_as_current_span(
                spec["agent_name"],
                openinference_span_kind="agent",
                attributes={"agent.name": spec["agent_name"]},
            ) as span,
        ):
            yield
            span.set_status(Status(StatusCode.OK))

    @contextmanager
    def tool_scope(call_id: str, name: str, arguments: dict[str, Any]) -> Iterator[Any]:
        with tracer.start_as_current_span(name, openinference_span_kind="tool") as span:
            span.set_tool(name=name, description=DESCRIPTIONS[name], parameters=PARAMETERS[name])
            span.set_attribute("tool.id", call_id)
            span.set_input(json.dumps(arguments), mime_type="application/json")
            yield span

    def tool_done(span: Any, result: str | None, error: ToolError | None) -> None:
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
        else:
            span.set_output(result, mime_type="application/json")
            span.set_status(Status(StatusCode.OK))

    chat_loop(spec, tools, turn_scope, tool_scope, tool_done)


def run_openllmetry(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    from opentelemetry import context
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import SpanProcessor

    class AssociationProperties(SpanProcessor):
        """What traceloop-sdk's span processor does with association properties."""

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            properties = context.get_value("association_properties")
            if isinstance(properties, dict):
                for key, value in properties.items():
                    span.set_attribute(f"traceloop.association.properties.{key}", value)

    telemetry.tracer_provider.add_span_processor(AssociationProperties())
    OpenAIInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)

    @contextmanager
    def turn_scope() -> Iterator[None]:
        # traceloop-sdk's set_association_properties({"session_id": ...}) does exactly this.
        properties = {"session_id": spec["conversation_id"]}
        token = context.attach(context.set_value("association_properties", properties))
        try:
            yield
        finally:
            context.detach(token)

    chat_loop(spec, tools, turn_scope)


def run_traceloop_sdk(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """traceloop-sdk itself: `Traceloop.init` (its OpenAI instrumentation, content on), each
    turn a `@workflow`, each tool a `@tool` function called with the model's arguments, the
    conversation id set with `Traceloop.set_association_properties`. Its processor is a no-op
    chained to ours (Traceloop adds its association properties on start; this runner's
    exporter sends the spans), and its own usage telemetry is off."""
    from opentelemetry.sdk.trace import SpanProcessor
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import tool, workflow

    class Chained(SpanProcessor):  # type: ignore[misc]
        """Nothing of its own: Traceloop chains its on_start to it."""

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    events = spec["producer"] == "traceloop-sdk-events"
    if events:
        from traceloop.sdk.instruments import Instruments
    Traceloop.init(
        app_name=spec["service_name"],
        processor=Chained(),
        telemetry_enabled=False,
        disable_batch=True,
        # with events: its OpenAI instrumentation instrumented here instead, messages as events
        block_instruments={Instruments.OPENAI} if events else None,
    )
    if events:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        from opentelemetry.sdk._events import EventLoggerProvider

        OpenAIInstrumentor(use_legacy_attributes=False).instrument(
            tracer_provider=telemetry.tracer_provider,
            event_logger_provider=EventLoggerProvider(telemetry.logger_provider),
        )
    Traceloop.set_association_properties({"session_id": spec["conversation_id"]})
    call = tools.call

    @tool(name="get_order")
    def get_order(order_id: str) -> str:
        return call("get_order", {"order_id": order_id})

    @tool(name="search_products")
    def search_products(query: str, max_price: float) -> str:
        return call("search_products", {"query": query, "max_price": max_price})

    decorated = {"get_order": get_order, "search_products": search_products}
    tools.call = lambda name, arguments: decorated[name](**arguments)  # type: ignore[method-assign]
    chat_loop(spec, tools, nullcontext, decorate_turn=workflow(name=spec["agent_name"]))


def _agents_conversation(
    spec: dict[str, Any],
    tools: Tools,
    session: Callable[[], AbstractContextManager[Any]],
    run_config: Any = None,
) -> None:
    """The conversation through the OpenAI Agents SDK (Responses API), whoever instruments it."""
    from agents import Agent, Runner, set_default_openai_api, set_default_openai_client
    from agents.tool import function_tool
    from agents.tool_context import ToolContext
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=spec["llm_base_url"], api_key="test", max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("responses")

    def run_tool(ctx: ToolContext[Any], name: str, arguments: dict[str, Any]) -> str:
        return tools.run(name, arguments, ctx.tool_call_id)

    def failure(ctx: Any, error: Exception) -> str:
        return json.dumps({"error": str(error)})

    def get_order(ctx: ToolContext[Any], order_id: str) -> str:
        """Get order details by order ID"""
        return run_tool(ctx, "get_order", {"order_id": order_id})

    def search_products(ctx: ToolContext[Any], query: str, max_price: float) -> str:
        """Search the product catalog by keyword and price limit"""
        return run_tool(ctx, "search_products", {"query": query, "max_price": max_price})

    # the tool's error goes back to the model as {"error": message}, as in the other producers
    as_tool = function_tool(failure_error_function=failure)
    agent = Agent(
        name=spec["agent_name"],
        instructions=SYSTEM_PROMPT,
        model=spec["model"],
        tools=[as_tool(get_order), as_tool(search_products)],
    )

    async def conversation() -> None:  # one event loop: the client's connections belong to it
        items: list[Any] = []
        for index, turn in enumerate(spec["turns"]):
            tools.turn = index
            items = [*items, {"role": "user", "content": turn["user"]}]
            with session():
                result = await Runner.run(agent, items, run_config=run_config)
            items = result.to_input_list()

    asyncio.run(conversation())


def run_openinference_agents(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    _agents_conversation(spec, tools, lambda: using_session(spec["conversation_id"]))


def run_openinference_agents_handoff(
    spec: dict[str, Any], telemetry: Telemetry, tools: Tools
) -> None:
    """A hand-off under OpenInference's Agents SDK instrumentation: `triage` hands each turn to
    `billing` (the SDK's `transfer_to_billing` tool), which calls `refund_order` and answers."""
    from agents import Agent, Runner, set_default_openai_api, set_default_openai_client
    from agents.tool import function_tool
    from agents.tool_context import ToolContext
    from openai import AsyncOpenAI
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    client = AsyncOpenAI(base_url=spec["llm_base_url"], api_key="test", max_retries=0)
    set_default_openai_client(client, use_for_tracing=False)
    set_default_openai_api("responses")

    @function_tool
    def refund_order(ctx: ToolContext[Any], order_id: str) -> str:
        """Refund an order"""
        return tools.run("refund_order", {"order_id": order_id}, ctx.tool_call_id)

    billing = Agent(
        name="billing", instructions="Refunds.", model=spec["model"], tools=[refund_order]
    )
    triage = Agent(name="triage", instructions="Route.", model=spec["model"], handoffs=[billing])

    async def conversation() -> None:
        for index, turn in enumerate(spec["turns"]):
            tools.turn = index
            with using_session(spec["conversation_id"]):
                await Runner.run(triage, turn["user"])

    asyncio.run(conversation())


def run_spanscore_agents(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """spanscore's own shim: the run's group_id is the conversation."""
    from agents import RunConfig

    from spanscore.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    _agents_conversation(spec, tools, nullcontext, RunConfig(group_id=spec["conversation_id"]))


def planned_tools(decorate: Callable[[Any], Any], run_tool: Callable[..., Any]) -> list[Any]:
    """The two tools, made by a framework's `@tool` (`decorate`: smolagents', Strands'), which
    reads their signatures and docstrings; each answers through `run_tool(name, arguments)`."""

    def get_order(order_id: str) -> str:
        """Get order details by order ID

        Args:
            order_id: the order's id, like ORD-1001
        """
        return str(run_tool("get_order", {"order_id": order_id}))

    def search_products(query: str, max_price: float) -> str:
        """Search the product catalog by keyword and price limit

        Args:
            query: a keyword
            max_price: the highest price
        """
        return str(run_tool("search_products", {"query": query, "max_price": max_price}))

    return [decorate(get_order), decorate(search_products)]


def run_smolagents(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """smolagents' ToolCallingAgent under OpenInference's smolagents instrumentation.

    The model is smolagents' own `OpenAIModel` with a scripted client in place of the openai
    one: it answers from `spec["plan"]` (each turn's steps of parallel calls, then the reply
    given through smolagents' `final_answer` tool), so the requests go through smolagents'
    real message building and response parsing. A failing tool raises (the agent reports the
    error to the model); each turn is one `agent.run(task, reset=False)` in `using_session`.
    """
    import itertools
    from types import SimpleNamespace

    from openai.types.chat import ChatCompletion
    from openinference.instrumentation import using_session
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIModel, ToolCallingAgent, tool

    SmolagentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    plan = {turn["user"]: turn for turn in spec["plan"]}
    task_prefix = "New task:\n"  # how smolagents hands a task to the model
    ids = itertools.count()

    def texts(message: dict[str, Any]) -> list[str]:
        content = message.get("content")
        if isinstance(content, str):
            return [content]
        return [p.get("text", "") for p in content or [] if isinstance(p, dict)]

    answered: dict[str, int] = {}  # model responses given so far, per task
    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments

    def create(messages: list[dict[str, Any]], **_: Any) -> Any:
        # The latest task (smolagents may merge the next message's text into the same one);
        # then the plan's next step for it.
        latest = [
            text.rsplit(task_prefix, 1)[1]
            for m in messages
            for text in texts(m)
            if m["role"] == "user" and task_prefix in text
        ][-1]
        task = next(user for user in plan if latest.startswith(user))
        turn = plan[task]
        step = answered[task] = answered.get(task, -1) + 1
        calls = (
            [(c["name"], c["arguments"]) for c in turn["steps"][step]]
            if step < len(turn["steps"])
            else [("final_answer", {"answer": turn["reply"]})]
        )
        for name, arguments in calls:
            given[_key(name, arguments)] = f"call_smol_{next(ids)}"
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": given[_key(name, arguments)],
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for name, arguments in calls
            ],
        }
        return ChatCompletion.model_validate(
            {
                "id": f"chatcmpl-{step}",
                "object": "chat.completion",
                "created": 0,
                "model": spec["model"],
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    class ScriptedModel(OpenAIModel):  # type: ignore[misc]
        def create_client(self) -> Any:
            return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))

    # smolagents gives a tool no call id: the transcript takes the model's, by arguments
    get_order, search_products = planned_tools(tool, tools.run)

    agent = ToolCallingAgent(
        tools=[get_order, search_products],
        model=ScriptedModel(model_id=spec["model"], api_key="test"),
        name=spec["agent_name"].replace("-", "_"),
        instructions=SYSTEM_PROMPT,
        max_steps=6,
        verbosity_level=0,
    )
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        with using_session(spec["conversation_id"]):
            agent.run(turn["user"], reset=index == 0)
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_smolagents_model(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """smolagents' ToolCallingAgent with its base `Model` class scripted, as a user writes it.

    `Model.generate` is replaced by a function answering from `spec["plan"]` before
    `SmolagentsInstrumentor().instrument()` (which then wraps it): it returns smolagents'
    `ChatMessage` with its tool calls' arguments as dicts (a Python function has no JSON to
    give), the parallel calls of a step in one message, then a `final_answer` call; with
    `token_usage` (without it the instrumentation fails on the bare `Model`). The tools are
    `get_order`, `search_products` and `cancel_order`, made with `@tool`; a failing one raises
    `RuntimeError` (the agent shows the error to the model and goes on). `max_steps=4`; each
    turn is one `agent.run(task, reset=False)` in `using_session`.
    """
    import itertools

    from smolagents import Model, ToolCallingAgent, tool
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
    )
    from smolagents.monitoring import TokenUsage

    plan = {turn["user"]: turn for turn in spec["plan"]}
    task_prefix = "New task:\n"  # how smolagents hands a task to the model
    ids = itertools.count()
    answered: dict[str, int] = {}  # model responses given so far, per task
    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments

    def generate(self: Any, messages: list[Any], **_: Any) -> Any:
        texts = [
            part.get("text", "")
            for m in messages
            if m.role == MessageRole.USER
            for part in (m.content if isinstance(m.content, list) else [{"text": m.content}])
            if isinstance(part, dict)
        ]
        latest = [t.rsplit(task_prefix, 1)[1] for t in texts if task_prefix in t][-1]
        task = next(user for user in plan if latest.startswith(user))
        turn = plan[task]
        step = answered[task] = answered.get(task, -1) + 1
        calls = (
            [(c["name"], c["arguments"]) for c in turn["steps"][step]]
            if step < len(turn["steps"])
            else [("final_answer", {"answer": turn["reply"]})]
        )
        requested = []
        for name, arguments in calls:
            call_id = given[_key(name, arguments)] = f"call_smol_{next(ids)}"
            function = ChatMessageToolCallFunction(name=name, arguments=dict(arguments))
            requested.append(ChatMessageToolCall(id=call_id, type="function", function=function))
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=None,
            tool_calls=requested,
            token_usage=TokenUsage(input_tokens=10, output_tokens=5),
        )

    Model.generate = generate  # before instrument(), which wraps what it finds

    from openinference.instrumentation import using_session
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)

    def answer(name: str, arguments: dict[str, Any]) -> str:
        try:
            return tools.run(name, arguments)
        except ToolError as exc:  # raised as an everyday error, not the runner's own type
            raise RuntimeError(str(exc)) from None

    @tool
    def cancel_order(order_id: str) -> str:
        """Cancel an order that has not shipped

        Args:
            order_id: the order's id, like ORD-1
        """
        return answer("cancel_order", {"order_id": order_id})

    agent = ToolCallingAgent(
        tools=[*planned_tools(tool, answer), cancel_order],
        model=Model(model_id=spec["model"]),
        max_steps=4,
        verbosity_level=0,
    )
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        with using_session(spec["conversation_id"]):
            agent.run(turn["user"], reset=False)
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_strands(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """Strands Agents with its own tracer, under the convention setting of `CONTENT_SWITCHES`.

    The model is a Strands `Model` subclass answering from `spec["plan"]` as a Bedrock
    Converse stream would (each turn's steps of parallel `toolUse` blocks, then the reply), so
    the messages go through Strands' real event loop, tool execution and tracing. A failing
    tool raises (Strands sends the model "Error: ToolError - <message>"); the conversation id
    is the agent's `trace_attributes` `session.id`, as Strands documents.
    """
    import itertools

    from strands import Agent, tool
    from strands.models.model import Model

    plan = {turn["user"]: turn for turn in spec["plan"]}
    ids = itertools.count()
    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments
    answered: dict[str, int] = {}  # model responses given so far, per user message

    class ScriptedModel(Model):  # type: ignore[misc]
        def __init__(self) -> None:
            self.config: dict[str, Any] = {"model_id": spec["model"]}

        def update_config(self, **config: Any) -> None:
            self.config.update(config)

        def get_config(self) -> dict[str, Any]:
            return self.config

        async def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("not used by this conversation")
            yield  # an async generator, as the interface wants

        async def stream(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            user = [
                block["text"]
                for m in messages
                if m["role"] == "user"
                for block in m["content"]
                if "text" in block
            ][-1]
            turn = plan[user]
            step = answered[user] = answered.get(user, -1) + 1
            yield {"messageStart": {"role": "assistant"}}
            if step < len(turn["steps"]):
                for call in turn["steps"][step]:
                    call_id = given[_key(call["name"], call["arguments"])] = f"tooluse_{next(ids)}"
                    start = {"toolUse": {"toolUseId": call_id, "name": call["name"]}}
                    yield {"contentBlockStart": {"start": start}}
                    delta = {"toolUse": {"input": json.dumps(call["arguments"])}}
                    yield {"contentBlockDelta": {"delta": delta}}
                    yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "tool_use"}}
            else:
                yield {"contentBlockDelta": {"delta": {"text": turn["reply"]}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "end_turn"}}
            usage = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
            yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}

    def run_tool(name: str, arguments: dict[str, Any]) -> str:
        return tools.run(
            name, arguments, sent_error=lambda message: f"Error: ToolError - {message}"
        )

    get_order, search_products = planned_tools(tool, run_tool)

    agent = Agent(
        model=ScriptedModel(),
        tools=[get_order, search_products],
        name=spec["agent_name"],
        system_prompt=SYSTEM_PROMPT,
        trace_attributes={"session.id": spec["conversation_id"]},
        callback_handler=None,
    )
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        agent(turn["user"])
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_adk(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """Google ADK's `LlmAgent` under ADK's own tracing, in the schema `CONTENT_SWITCHES` pins.

    The model is an ADK `BaseLlm` subclass answering from `spec["plan"]` with google.genai
    `Content` (each turn's steps of parallel `function_call` parts, then the reply), so the
    requests go through ADK's real flow, tool execution and tracing. A failing tool raises;
    ADK's `on_tool_error_callback` sends the model `{"error": message}` (without one, ADK ends
    the run). The conversation id is the ADK session's id.
    """
    import asyncio
    import itertools

    from google.adk.agents import LlmAgent
    from google.adk.models import BaseLlm, LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    plan = {turn["user"]: turn for turn in spec["plan"]}
    ids = itertools.count()
    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments
    answered: dict[str, int] = {}  # model responses given so far, per user message

    class ScriptedModel(BaseLlm):  # type: ignore[misc]
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            user = [
                part.text
                for content in llm_request.contents
                if content.role == "user"
                for part in content.parts or []
                if part.text
            ][-1]
            turn = plan[user]
            step = answered[user] = answered.get(user, -1) + 1
            if step < len(turn["steps"]):
                parts = []
                for call in turn["steps"][step]:
                    # not "adk-...": ADK takes those for its own ids and strips them
                    call_id = given[_key(call["name"], call["arguments"])] = f"call_{next(ids)}"
                    function_call = types.FunctionCall(
                        id=call_id, name=call["name"], args=call["arguments"]
                    )
                    parts.append(types.Part(function_call=function_call))
            else:
                parts = [types.Part(text=turn["reply"])]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    def run_tool(name: str, arguments: dict[str, Any]) -> Any:
        # The value itself: ADK sends one that is not a dict as {"result": value}.
        return json.loads(tools.run(name, arguments))

    def get_order(order_id: str) -> Any:
        """Get order details by order ID"""
        return run_tool("get_order", {"order_id": order_id})

    def search_products(query: str, max_price: float) -> Any:
        """Search the product catalog by keyword and price limit"""
        return run_tool("search_products", {"query": query, "max_price": max_price})

    def on_tool_error(tool: Any, args: Any, tool_context: Any, error: Exception) -> Any:
        return {"error": str(error)}

    agent = LlmAgent(
        name=spec["agent_name"].replace("-", "_"),
        model=ScriptedModel(model=spec["model"]),
        tools=[get_order, search_products],
        instruction=SYSTEM_PROMPT,
        on_tool_error_callback=on_tool_error,
    )
    runner = InMemoryRunner(agent=agent, app_name="producer")

    async def converse() -> None:
        session = spec["conversation_id"]
        await runner.session_service.create_session(
            app_name="producer", user_id="user-1", session_id=session
        )
        for index, turn in enumerate(spec["turns"]):
            tools.turn = index
            message = types.Content(role="user", parts=[types.Part(text=turn["user"])])
            async for _ in runner.run_async(
                user_id="user-1", session_id=session, new_message=message
            ):
                pass

    asyncio.run(converse())
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_pydantic_ai(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """Pydantic AI's `Agent` under its own instrumentation, in the data format `version`
    (`pydantic-ai`: 5, the current one; `pydantic-ai-v2`: 2, deprecated).

    The model is Pydantic AI's `FunctionModel` answering from `spec["plan"]`; a failing tool
    raises `ModelRetry` (Pydantic AI's way of sending the model an error: its message, as the
    call's response). Each turn is `run_sync` with the history so far and the conversation id
    (`conversation_id=`, recorded as `gen_ai.conversation.id`).
    """
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, UserPromptPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    plan = {turn["user"]: turn for turn in spec["plan"]}
    answered: dict[str, int] = {}
    given: dict[str, str] = {}

    def model(messages: list[Any], info: Any) -> Any:
        users = [
            part.content
            for message in messages
            for part in getattr(message, "parts", [])
            if isinstance(part, UserPromptPart)
        ]
        turn = plan[users[-1]]
        step = answered[turn["user"]] = answered.get(turn["user"], -1) + 1
        if step >= len(turn["steps"]):
            return ModelResponse(parts=[TextPart(turn["reply"])])
        parts = []
        for call in turn["steps"][step]:
            call_id = given[_key(call["name"], call["arguments"])] = f"call_{len(given)}"
            parts.append(ToolCallPart(call["name"], call["arguments"], tool_call_id=call_id))
        return ModelResponse(parts=parts)

    version = 2 if spec["producer"] == "pydantic-ai-v2" else 5
    agent = Agent(FunctionModel(model), name=spec["agent_name"], system_prompt=SYSTEM_PROMPT)
    agent.instrument = InstrumentationSettings(
        version=version, tracer_provider=telemetry.tracer_provider, include_content=True
    )

    def run_tool(name: str, arguments: dict[str, Any]) -> Any:
        try:
            return json.loads(tools.run(name, arguments, sent_error=str))
        except ToolError as exc:
            raise ModelRetry(str(exc)) from exc

    @agent.tool_plain
    def get_order(order_id: str) -> Any:
        """Get order details by order ID"""
        return run_tool("get_order", {"order_id": order_id})

    @agent.tool_plain
    def search_products(query: str, max_price: float) -> Any:
        """Search the product catalog by keyword and price limit"""
        return run_tool("search_products", {"query": query, "max_price": max_price})

    history: list[Any] = []
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        result = agent.run_sync(
            turn["user"], message_history=history, conversation_id=spec["conversation_id"]
        )
        history = result.all_messages()
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_llamaindex(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """LlamaIndex's `FunctionAgent` under OpenInference's LlamaIndex instrumentation.

    The model is LlamaIndex's own `OpenAI` LLM talking to the ScriptedLLM, so requests and tool
    calls go through LlamaIndex's real function-calling loop. A failing tool raises; the agent
    sends the model the error's message. Both turns share one `ChatMemoryBuffer` (the chat
    history: a workflow `Context` passed to both runs starts the second with a fresh memory in
    llama-index-workflows 2.26), each inside `using_session`.
    """
    import asyncio

    from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI
    from openinference.instrumentation import using_session
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)

    def run_tool(name: str, arguments: dict[str, Any]) -> str:
        return tools.run(name, arguments, sent_error=lambda message: message)

    decorate: Callable[[Any], Any] = lambda fn: FunctionTool.from_defaults(fn=fn)  # noqa: E731
    agent = FunctionAgent(
        name=spec["agent_name"],
        tools=planned_tools(decorate, run_tool),
        llm=OpenAI(
            model=spec["model"], api_base=spec["llm_base_url"], api_key="test", max_retries=0
        ),
        system_prompt=SYSTEM_PROMPT,
    )
    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments

    async def conversation() -> None:
        memory = ChatMemoryBuffer.from_defaults(llm=agent.llm)
        for index, turn in enumerate(spec["turns"]):
            tools.turn = index
            with using_session(spec["conversation_id"]):
                handler = agent.run(user_msg=turn["user"], memory=memory)
                async for event in handler.stream_events():
                    if isinstance(event, ToolCallResult):
                        given[_key(event.tool_name, event.tool_kwargs)] = event.tool_id
                await handler

    asyncio.run(conversation())
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


def run_crewai(spec: dict[str, Any], telemetry: Telemetry, tools: Tools) -> None:
    """CrewAI under OpenInference's CrewAI and OpenAI instrumentations (CrewAI's own spans and
    the model calls its native OpenAI provider makes with the `openai` client).

    One agent with the two tools, its `LLM` talking to the ScriptedLLM with native tool
    calling; each turn is a `Crew` kickoff of one task whose description is the user's message,
    inside `using_session`. A crew keeps no history between kickoffs, and CrewAI frames the
    task for the model ("Current Task: ..."). A failing tool raises; CrewAI sends the model
    "Error executing tool: <message>".
    """
    import functools

    import openai.resources.chat.completions as chat_completions
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
    from openinference.instrumentation import using_session
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    OpenAIInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)

    given: dict[str, str] = {}  # the call ids the model gave, by name and arguments
    create = chat_completions.Completions.create

    @functools.wraps(create)
    def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = create(self, *args, **kwargs)
        # CrewAI asks `with_raw_response`: parse() gives the completion (and caches it)
        completion = response.parse() if hasattr(response, "parse") else response
        for call in completion.choices[0].message.tool_calls or []:
            arguments = json.loads(call.function.arguments)
            given[_key(call.function.name, arguments)] = call.id
        return response

    chat_completions.Completions.create = observed  # type: ignore[method-assign]

    def run_tool(name: str, arguments: dict[str, Any]) -> str:
        return tools.run(
            name, arguments, sent_error=lambda message: f"Error executing tool: {message}"
        )

    agent = Agent(
        role=spec["agent_name"],
        goal="Answer the customer",
        backstory=SYSTEM_PROMPT,
        tools=planned_tools(tool, run_tool),
        llm=LLM(
            model=f"openai/{spec['model']}",
            base_url=spec["llm_base_url"],
            api_key="test",
            max_retries=0,
        ),
        verbose=False,
    )
    for index, turn in enumerate(spec["turns"]):
        tools.turn = index
        task = Task(description=turn["user"], expected_output="The answer", agent=agent)
        with using_session(spec["conversation_id"]):
            Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    for executed in tools.executed:
        executed["id"] = given[_key(executed["name"], executed["arguments"])]


PRODUCERS: dict[str, Callable[[dict[str, Any], Telemetry, Tools], None]] = {
    "pydantic-ai": run_pydantic_ai,
    "pydantic-ai-v2": run_pydantic_ai,
    "adk": run_adk,
    "adk-legacy": run_adk,
    "adk-legacy-events": run_adk,
    "strands": run_strands,
    "strands-latest": run_strands,
    "strands-attributes": run_strands,
    "openai-v2": run_openai_v2,
    "openai-v2-events": run_openai_v2,
    "openai-v2+spanscore": run_openai_v2,
    "openinference": run_openinference,
    "openinference+spanscore": run_openinference,
    "openinference-agents": run_openinference_agents,
    "openinference-agents-handoff": run_openinference_agents_handoff,
    "spanscore-agents": run_spanscore_agents,
    "openllmetry": run_openllmetry,
    "traceloop-sdk": run_traceloop_sdk,
    "traceloop-sdk-events": run_traceloop_sdk,
    "smolagents": run_smolagents,
    "smolagents-model": run_smolagents_model,
    "llamaindex": run_llamaindex,
    "crewai": run_crewai,
}


def main() -> None:
    spec = json.load(sys.stdin)
    producer = spec["producer"]
    if producer not in PRODUCERS:
        raise SystemExit(f"run_producer: unknown producer {producer!r}")
    os.environ.update(CONTENT_SWITCHES[producer])
    telemetry = Telemetry(spec["otlp_endpoint"], spec["service_name"])
    tools = Tools(spec["outcomes"])
    try:
        PRODUCERS[producer](spec, telemetry, tools)
    finally:
        telemetry.close()
    json.dump(tools.executed, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
