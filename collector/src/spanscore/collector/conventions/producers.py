"""The producer conventions, as data, in the order they are tried: first match wins.

This is the extension point. A producer that names things differently is one `Convention`
here (its markers, which attributes hold which field, how its span kinds map onto GenAI
operations, and its message reader), placed in `CONVENTIONS` before any convention that would
also match its spans; its conversation-id attribute, if it has its own, goes in
`CONVERSATION_KEYS`. Only a producer whose messages have a shape no reader knows yet also needs
a reader, in the module of its family (`genai`, `indexed`, `adk`, `vercel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .adk import adk_messages
from .genai import genai_messages
from .indexed import openinference_messages, traceloop_messages
from .messages import MessageReader
from .vercel import vercel_messages

# Extracted fields, in the order `extract` returns them (the collector's row layout).
FIELDS = (
    "conversation_id",
    "agent_name",
    "operation",
    "tool_name",
    "tool_call_id",
    "tool_arguments",
    "tool_result",
    "user_message",
    "tool_calls_requested",
    "tool_results",
    "response_text",
    "error_type",
    "convention",
)


# Conversation identity, in order (DESIGN.md): then the configured attribute, then the trace id.
CONVERSATION_KEYS = (
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
    "gcp.vertex.agent.session_id",  # Google ADK's legacy schema
    # The Vercel AI SDK: the caller's `experimental_telemetry.metadata` (ai <= 6), or its
    # `context` (ai 7's legacy integration)
    "ai.telemetry.metadata.sessionId",
    "ai.telemetry.metadata.conversationId",
    "ai.settings.context.sessionId",
    "ai.settings.context.conversationId",
)


@dataclass(frozen=True)
class Convention:
    """How one producer convention names things.

    `markers`: attribute keys whose presence says a span follows this convention.
    `keys`: extracted field -> attribute keys to try, first present wins.
    `operations`: a kind attribute and how its values map onto GenAI operation names.
    `messages`: reads (input messages, output messages) in the canonical form.
    """

    name: str
    markers: tuple[str, ...]
    keys: Mapping[str, tuple[str, ...]]
    operations: tuple[str, Mapping[str, str]] | None = None
    messages: MessageReader | None = None
    operation_from_name: Mapping[str, str] = field(default_factory=dict)


OPENINFERENCE = Convention(
    name="openinference",
    markers=("openinference.span.kind",),
    keys={
        "agent_name": ("agent.name", "graph.node.name"),
        "tool_name": ("tool.name", "tool_call.function.name"),
        "tool_call_id": ("tool.id", "tool_call.id"),
        "tool_arguments": ("tool_call.function.arguments", "input.value", "tool.parameters"),
        "tool_result": ("output.value",),
        "error_type": ("error.type", "exception.type"),
    },
    operations=(
        "openinference.span.kind",
        {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent", "EMBEDDING": "embeddings"},
    ),
    messages=openinference_messages,
)

TRACELOOP = Convention(
    name="openllmetry",
    markers=("traceloop.span.kind", "traceloop.entity.name", "gen_ai.prompt.0.role"),
    keys={
        "agent_name": ("gen_ai.agent.name", "traceloop.entity.name"),
        "operation": ("gen_ai.operation.name", "llm.request.type"),
        # traceloop-sdk's @tool spans: the function's name, bound call (unwrapped) and return
        "tool_name": ("gen_ai.tool.name", "traceloop.entity.name"),
        "tool_call_id": ("gen_ai.tool.call.id",),
        "tool_arguments": ("gen_ai.tool.call.arguments", "traceloop.entity.input"),
        "tool_result": ("gen_ai.tool.call.result", "traceloop.entity.output"),
        "error_type": ("error.type",),
    },
    operations=(
        "traceloop.span.kind",
        {"tool": "execute_tool", "agent": "invoke_agent", "workflow": "workflow", "task": "task"},
    ),
    messages=traceloop_messages,
)

GENAI = Convention(
    name="genai",
    markers=(
        "gen_ai.operation.name",
        "gen_ai.system",
        "gen_ai.provider.name",
        "gen_ai.tool.name",
        "gen_ai.agent.name",
        "gen_ai.conversation.id",
        "gen_ai.request.model",
    ),
    keys={
        "agent_name": ("gen_ai.agent.name",),
        "operation": ("gen_ai.operation.name", "llm.request.type"),
        "tool_name": ("gen_ai.tool.name",),
        "tool_call_id": ("gen_ai.tool.call.id",),
        # pydantic-ai's deprecated instrumentation versions write `tool_arguments` / `tool_response`
        "tool_arguments": ("gen_ai.tool.call.arguments", "tool_arguments"),
        "tool_result": ("gen_ai.tool.call.result", "tool_response"),
        "error_type": ("error.type",),
    },
    messages=genai_messages,
    operation_from_name={"execute_tool": "execute_tool", "invoke_agent": "invoke_agent"},
)

# Google ADK with ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 (its legacy schema): content in
# `gcp.vertex.agent.*` attributes, the model call a `call_llm` span without an operation. Its
# current schema is the GenAI form above.
ADK_LEGACY = Convention(
    name="adk",
    markers=("gcp.vertex.agent.llm_request", "gcp.vertex.agent.tool_call_args"),
    keys={
        "agent_name": ("gen_ai.agent.name",),
        "operation": ("gen_ai.operation.name",),
        "tool_name": ("gen_ai.tool.name",),
        "tool_call_id": ("gen_ai.tool.call.id",),
        "tool_arguments": ("gcp.vertex.agent.tool_call_args", "gen_ai.tool.call.arguments"),
        "tool_result": ("gcp.vertex.agent.tool_response", "gen_ai.tool.call.result"),
        "error_type": ("error.type",),
    },
    messages=adk_messages,
    operation_from_name={"call_llm": "chat", "execute_tool": "execute_tool"},
)

# The Vercel AI SDK's own spans (scope `ai`): `ai.operationId` names what each is.
_VERCEL_CALLS = ("generateText", "streamText", "generateObject", "streamObject")
VERCEL = Convention(
    name="vercel-ai",
    markers=("ai.operationId",),
    keys={
        "agent_name": ("ai.telemetry.functionId",),
        "tool_name": ("ai.toolCall.name",),
        "tool_call_id": ("ai.toolCall.id",),
        "tool_arguments": ("ai.toolCall.args", "ai.toolCall.input"),
        "tool_result": ("ai.toolCall.result", "ai.toolCall.output"),
        "error_type": ("error.type",),
    },
    operations=(
        "ai.operationId",
        {
            "ai.toolCall": "execute_tool",
            # the whole call, every step of it: an agent's span
            **{f"ai.{name}": "invoke_agent" for name in _VERCEL_CALLS},
            # one model call each
            **{f"ai.{name}.doGenerate": "chat" for name in _VERCEL_CALLS},
            **{f"ai.{name}.doStream": "chat" for name in _VERCEL_CALLS},
        },
    ),
    messages=vercel_messages,
)

CONVENTIONS: tuple[Convention, ...] = (OPENINFERENCE, TRACELOOP, VERCEL, ADK_LEGACY, GENAI)
