"""spanscore instrumentation: send an agent's spans to the spanscore collector, in one call.

Usage::

    import spanscore.instrumentation
    spanscore.instrumentation.instrument(service_name="support-agent")

`instrument()` installs a TracerProvider (or adds to the application's own SDK provider) with a
batching OTLP exporter. It is idempotent; `uninstrument()` flushes and removes what it added.
Exporting never blocks the agent: spans go through the SDK's bounded BatchSpanProcessor queue,
which drops (and counts) spans when the collector is unreachable for long.

Shims, each switched on by `instrument()` when its framework is installed (and usable alone):
`openai_agents.OpenAIAgentsInstrumentor` (OpenAI Agents SDK), `openai_client.OpenAIInstrumentor`
(the `openai` client: chat completions and Responses, sync, async, streaming),
`langchain.LangChainInstrumentor` (LangChain / LangGraph tool runs) and `mcp.MCPInstrumentor`
(MCP `ClientSession.call_tool`). For hand-written tool loops, `tool` makes each tool execution
an `execute_tool` span linked to the model's call id::

    @spanscore.instrumentation.tool
    def get_order(order_id: str) -> dict: ...

No code change: each shim is an OpenTelemetry instrumentor (`BaseInstrumentor`) registered under
the `opentelemetry_instrumentor` entry points `spanscore_openai_agents`, `spanscore_openai`,
`spanscore_langchain` and `spanscore_mcp`, so `opentelemetry-instrument python app.py` loads
them (the SDK configured by OTEL_* variables through opentelemetry-distro); the entry point
`spanscore_conversation` (`ConversationInstrumentor`) puts the conversation processor on that
SDK's provider when SPANSCORE_CONVERSATION_CONTEXT is true. `instrument()` uses the same classes.

Conversation identity: every span started inside the block (by any instrumentation on the
provider) carries ``gen_ai.conversation.id`` and the given attributes; it follows asyncio tasks
and, through W3C baggage, calls to other services::

    with spanscore.instrumentation.conversation("conv-123", user_id="u-7", scenario_id="refund"):
        agent.run(...)

Configuration (arguments win over the standard OpenTelemetry variables):
    OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
        collector address (default: http://127.0.0.1:4318 for HTTP, 127.0.0.1:4317 for gRPC)
    OTEL_EXPORTER_OTLP_PROTOCOL / OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
        http/protobuf (default) or grpc (needs `pip install spanscore-instrumentation[grpc]`)
    OTEL_EXPORTER_OTLP_HEADERS   e.g. ``authorization=Bearer <token>``
    OTEL_SERVICE_NAME            service name on every span
    SPANSCORE_CAPTURE_TOOL_ARGUMENTS / _TOOL_RESULTS / _MESSAGES
                                 true (default) or false: what content our shims record
    SPANSCORE_REDACT_KEYS        key patterns whose values are recorded as [REDACTED]
    SPANSCORE_EXIT_TIMEOUT_S     most seconds the process spends at its end (or in
                                 `uninstrument()`) sending the spans it holds (default 5)
"""

from ._content import ContentPolicy, content_policy
from ._conversation import (
    ConversationInstrumentor,
    ConversationSpanProcessor,
    conversation,
    current_values,
)
from ._setup import instrument, is_instrumented, redirect, uninstrument
from ._tool import ToolExecution, tool

__all__ = [
    "ContentPolicy",
    "ConversationInstrumentor",
    "ConversationSpanProcessor",
    "ToolExecution",
    "content_policy",
    "conversation",
    "current_values",
    "instrument",
    "is_instrumented",
    "redirect",
    "tool",
    "uninstrument",
]
