"""Reading producer conventions into the lake's extracted columns: the one extraction point.

Each convention is data (which attributes mean what) plus small functions where data is not
enough (message lists). The collector calls `Extractor.extract` once per span at ingest; the
result fills the `spans` columns named in `FIELDS`.

Conventions read, first match wins:
- OpenInference (Phoenix): `openinference.span.kind`, `tool.name`, `input.value` /
  `output.value`, flattened `llm.input_messages.N.message...` / `llm.output_messages...`.
- OpenLLMetry (Traceloop): `traceloop.span.kind`, `traceloop.entity.*`, and the indexed
  `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` messages of its older releases (its current
  releases write the GenAI form below).
- OpenTelemetry GenAI: `gen_ai.*` attributes; messages in `gen_ai.input.messages` /
  `gen_ai.output.messages` (`tool_call` and `tool_call_response` parts; `response` or `result`),
  or, in the deprecated form, span events `gen_ai.user.message`, `gen_ai.assistant.message`,
  `gen_ai.tool.message`, `gen_ai.choice`.

Messages of every convention are first turned into one canonical list
(`{"role", "text", "tool_calls": [{"id", "name", "arguments"}], "tool_results": [{"id",
"result"}]}`), from
which the model call's new user message, requested tool calls, received tool results and
response text are read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from spanscore.lake.schema.rules import AGENT_OPERATIONS

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
_POSITION = {name: i for i, name in enumerate(FIELDS)}

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

Message = dict[str, Any]
MessageReader = Callable[
    [Mapping[str, Any], list[dict[str, Any]]], tuple[list[Message], list[Message]]
]


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


def _loads(value: Any) -> Any:
    if isinstance(value, str | bytes):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


# How some agents frame the user's message to the model: (what precedes the user's words, what
# may follow them). smolagents: "New task:\n" + the task; CrewAI: "\nCurrent Task: " + the
# task's description, then the expected output, or its instructions to begin.
USER_MESSAGE_FRAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("New task:\n", ()),
    (
        "\nCurrent Task: ",
        (
            "\n\nThis is the expected criteria for your final answer: ",
            "\n\nBegin! This is VERY important to you",
            "\n\nProvide your complete response:",
        ),
    ),
)

# Tools whose call is the agent's answer to the user, not an action: name -> the argument
# holding the answer (smolagents ends every run with `final_answer`). A requested call of one
# is the model call's response text; the tool's own span is no tool call.
ANSWER_TOOLS = {"final_answer": "answer"}
# Tool spans that are no tool call: Google ADK wraps the calls of one model response in an
# `execute_tool (merged)` span named so, beside each call's own span.
NOT_TOOL_CALLS = frozenset({"(merged tools)"})
# A hand-off span named for the agent it hands to (OpenInference's Agents SDK instrumentation
# writes `handoff to <agent>` as a TOOL span; spanscore's shim `handoff <agent>`).
HANDOFF_PREFIX = "handoff to "
# Model-call spans that call no model: LlamaIndex's instrumentation records every method of an
# LLM class as an LLM span, including the one that only prepares the request (`OpenAI.
# _prepare_chat_with_tools`, beside the `OpenAI.astream_chat` that sends it). By method name.
NOT_MODEL_CALLS = frozenset({"_prepare_chat_with_tools"})


def unwrap_arguments(value: Any) -> Any:
    """A tool's arguments without a `{"args": [...], "kwargs": {...}}` wrapper: the bound
    parameters of a Python call, as OpenInference's smolagents instrumentation and
    Traceloop's decorators record a tool's input (other keys beside them are the wrapper's
    own flags). Keyword arguments when there are no positional ones, and the reverse; with
    both, the wrapper is kept (there is no single arguments value)."""
    parsed = _loads(value)
    unwrapped = _unwrapped(parsed)
    return value if unwrapped is parsed else unwrapped


def _unwrapped(parsed: Any) -> Any:
    """`unwrap_arguments` of parsed JSON: `parsed` itself when it is no wrapper."""
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(parsed.get("kwargs"), dict):
        return parsed["kwargs"]  # LlamaIndex's tool spans: keyword arguments only
    if not (isinstance(parsed, dict) and "args" in parsed and "kwargs" in parsed):
        return parsed
    args, kwargs = parsed["args"], parsed["kwargs"]
    if not args and isinstance(kwargs, dict):
        return kwargs
    if not kwargs and isinstance(args, list):
        return args
    return parsed


def _arguments_json(text: str) -> bytes:
    """A tool span's arguments as JSON text for the JSON column, unwrapped
    (`unwrap_arguments`): JSON passes through, a text that is not JSON (a Python repr, say) is
    kept as a JSON string. Reads the text once: it runs for every tool span."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return orjson.dumps(text)  # not JSON (a Python repr, say): kept as a JSON string
    unwrapped = _unwrapped(parsed)
    return text.encode() if unwrapped is parsed else orjson.dumps(unwrapped)


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id if isinstance(call_id, str) and call_id else None,
        "name": name if isinstance(name, str) else None,
        "arguments": _loads(arguments),
    }


# --- provider-shaped content ------------------------------------------------------------------
# Producers that pass their provider's content through put it in messages as is: Bedrock
# Converse blocks (Strands: `{"text"}`, `{"toolUse"}`, `{"toolResult"}`), Anthropic blocks
# (`{"type": "text" | "tool_use" | "tool_result"}`, OpenAI's text parts too), google.genai
# `Content` (`{"parts": [{"text"}, {"function_call"}, {"function_response"}]}`). Read here,
# once, into the canonical message's text, tool calls and tool results.


def unwrap_result(value: Any) -> Any:
    """A tool's output without its provider's wrapping: one text block (`[{"text": ...}]`,
    `[{"type": "text", "text": ...}]`) is its text, parsed when it is JSON; one `{"json": v}`
    block is `v`. Anything else is kept as it is."""
    parsed = _loads(value)
    if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], dict):
        block = parsed[0]
        if "json" in block and len(block) == 1:
            return block["json"]
        text = block.get("text")
        if isinstance(text, str) and set(block) <= {"text", "type"}:
            return _loads(text)
    return parsed


# LlamaIndex's `ToolOutput`, as its instrumentation records a tool's output: the value the
# function returned is `raw_output` (`blocks` holds it as text, `raw_input` the call).
_TOOL_OUTPUT_KEYS = frozenset({"blocks", "tool_name", "raw_input", "raw_output"})


def unwrap_tool_output(value: str) -> str:
    """A tool result recorded as a LlamaIndex `ToolOutput`: what the function returned (as
    JSON text, or the text it returned). Anything else is returned unchanged."""
    parsed = _loads(value)
    if isinstance(parsed, dict) and _TOOL_OUTPUT_KEYS.issubset(parsed):
        raw = parsed["raw_output"]
        return raw if isinstance(raw, str) else orjson.dumps(raw, default=str).decode()
    return value


def _block_result(content: Any) -> Any:
    return unwrap_result(content) if isinstance(content, list) else _loads(content)


def content_blocks(value: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """(texts, tool calls, tool results) of a provider's content: a list of blocks, or a
    google.genai `Content` (a dict with `parts`)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    if isinstance(value, dict) and isinstance(value.get("parts"), list):
        value = value["parts"]
    for block in value if isinstance(value, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        call = block.get("toolUse") or block.get("function_call") or block.get("functionCall")
        answer = (
            block.get("toolResult")
            or block.get("function_response")
            or block.get("functionResponse")
        )
        if isinstance(block.get("text"), str) and kind in (None, "text"):
            texts.append(block["text"])
        elif isinstance(call, dict):
            calls.append(
                _call(
                    call.get("toolUseId") or call.get("id"),
                    call.get("name"),
                    call.get("input", call.get("args")),
                )
            )
        elif kind == "tool_use":
            calls.append(_call(block.get("id"), block.get("name"), block.get("input")))
        elif kind == "tool-call":  # the Vercel AI SDK
            arguments = block.get("input", block.get("args"))
            calls.append(_call(block.get("toolCallId"), block.get("toolName"), arguments))
        elif kind == "tool-result":
            output = block.get("output", block.get("result"))
            if isinstance(output, dict) and "type" in output and "value" in output:
                output = output["value"]  # {"type": "json" | "text" | "error-text" | ..., ...}
            results.append({"id": block.get("toolCallId"), "result": _loads(output)})
        elif isinstance(answer, dict):
            result = answer.get("content", answer.get("response"))
            results.append(
                {"id": answer.get("toolUseId") or answer.get("id"), "result": _block_result(result)}
            )
        elif kind == "tool_result":
            results.append(
                {"id": block.get("tool_use_id"), "result": _block_result(block.get("content"))}
            )
    return texts, calls, results


# --- OpenTelemetry GenAI ---------------------------------------------------------------------


# The event carrying whole message lists (`gen_ai.input.messages` / `gen_ai.output.messages`),
# as a log record or a span event.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def _genai_message(message: Any) -> Message | None:
    if not isinstance(message, dict):
        return None
    out: Message = {"role": message.get("role"), "text": None, "tool_calls": []}
    parts = message.get("parts")
    if parts is None and "content" in message:  # tolerate the older {"role", "content"} shape
        parts = [{"type": "text", "content": message["content"]}]
    texts = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "tool_call":
            out["tool_calls"].append(_call(part.get("id"), part.get("name"), part.get("arguments")))
        elif kind == "tool_call_response":
            # Producers send the tool's output as the text the model saw: parse it when it is
            # JSON, as the OpenInference and indexed readers do.
            result = unwrap_result(part.get("response", part.get("result")))
            out.setdefault("tool_results", []).append({"id": part.get("id"), "result": result})
    if texts:
        out["text"] = "\n".join(texts)
    return out


def _genai_list(raw: Any) -> list[Message]:
    data = _loads(raw)
    if not isinstance(data, list):
        return []
    return [m for m in (_genai_message(x) for x in data) if m is not None]


# What some producers write in place of content they were told not to capture (Google ADK's
# legacy per-message log records): no content, not the text "<elided>".
ELIDED = "<elided>"


def _event_payload(event: dict[str, Any]) -> dict[str, Any]:
    attrs = event.get("attributes") or {}
    content = attrs.get("gen_ai.event.content")
    if content is not None:
        parsed = _loads(content)
        if isinstance(parsed, dict):
            return parsed
    return dict(attrs)


def deprecated_event_message(name: str, payload: Mapping[str, Any]) -> tuple[str, Message] | None:
    """One deprecated GenAI event (span event or log record) as ("input"|"output", message)."""
    role = {
        "gen_ai.system.message": "system",
        "gen_ai.user.message": "user",
        "gen_ai.assistant.message": "assistant",
        "gen_ai.tool.message": "tool",
    }.get(name)
    source: Mapping[str, Any] = payload
    side = "input"
    message: Any = None
    if name == "gen_ai.choice":
        side, role = "output", "assistant"
        message = _loads(payload.get("message"))
        source = message if isinstance(message, dict) else payload
    elif role is None:
        return None
    content = _loads(source.get("content"))
    if content == ELIDED or message == ELIDED:
        return None
    if isinstance(message, list | str):
        content = message  # Strands: the choice's message is its content blocks, or the text
    out: Message = {
        "role": role,
        "text": content if isinstance(content, str) else None,
        "tool_calls": [],
    }
    if isinstance(content, list | dict):
        texts, calls_in_blocks, results_in_blocks = content_blocks(content)
        out["text"] = "\n".join(texts) if texts else None
        out["tool_calls"].extend(calls_in_blocks)
        if results_in_blocks:
            out["tool_results"] = results_in_blocks
            return side, out
    # OpenLLMetry's gen_ai.choice events carry `tool_calls` beside `message`, not inside it
    calls = _loads(source.get("tool_calls", payload.get("tool_calls")))
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            out["tool_calls"].append(
                _call(call.get("id"), function.get("name"), function.get("arguments"))
            )
    if role == "tool":
        out["tool_results"] = [
            {"id": source.get("id") or source.get("tool_call_id"), "result": content}
        ]
        out["text"] = None
    return side, out


def genai_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    inputs = _genai_list(attrs.get("gen_ai.input.messages"))
    outputs = _genai_list(attrs.get("gen_ai.output.messages"))
    if not inputs and not outputs:
        for event in events:
            name = str(event.get("name"))
            if name == DETAILS_EVENT:  # the current form, as span events (Strands, say)
                details = event.get("attributes") or {}
                inputs.extend(_genai_list(details.get("gen_ai.input.messages")))
                outputs.extend(_genai_list(details.get("gen_ai.output.messages")))
                continue
            found = deprecated_event_message(name, _event_payload(event))
            if found is not None:
                (inputs if found[0] == "input" else outputs).append(found[1])
    return inputs, outputs


def log_record_messages(
    event_name: str | None, attrs: Mapping[str, Any], body: Any
) -> tuple[str | None, bytes | None, bytes | None, str | None]:
    """What one GenAI log record says about its model call, as the `logs` columns
    (user_message, tool_calls_requested, tool_results, response_text).

    Two shapes: a record carrying whole message lists in `gen_ai.input.messages` /
    `gen_ai.output.messages` (the `gen_ai.client.inference.operation.details` event), or one
    deprecated per-message event (`gen_ai.user.message`, `gen_ai.choice`, ...) whose payload
    is the body (or the attributes).
    """
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        inputs = _genai_list(attrs.get("gen_ai.input.messages"))
        outputs = _genai_list(attrs.get("gen_ai.output.messages"))
    else:
        payload = body if isinstance(body, dict) else _event_payload({"attributes": attrs})
        found = deprecated_event_message(str(event_name), payload)
        if found is None:
            return None, None, None, None
        inputs, outputs = ([found[1]], []) if found[0] == "input" else ([], [found[1]])
    user, requested, results, text = summarize_messages(inputs, outputs)
    return (
        user,
        orjson.dumps(requested) if requested else None,
        orjson.dumps(results, default=str) if results else None,
        text,
    )


# --- flattened (indexed) message attributes: OpenInference and older OpenLLMetry ------------


def _indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest = v` keys as {N: {rest: v}}."""
    out: dict[int, dict[str, Any]] = {}
    size = len(prefix)
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[size:].partition(".")
        if index.isascii() and index.isdigit() and rest:  # "²".isdigit(), but int("²") fails
            out.setdefault(int(index), {})[rest] = value
    return out


def _indexed_message(
    role: Any,
    text: str | None,
    calls: dict[int, dict[str, Any]],
    tool_call_id: Any,
    keys: tuple[str, str],
) -> Message:
    """A canonical message from flattened fields; `keys` name a call's name and arguments."""
    message: Message = {
        "role": role,
        "text": text,
        "tool_calls": [
            _call(c.get("id"), c.get(keys[0]), c.get(keys[1])) for _, c in sorted(calls.items())
        ],
    }
    if role == "tool":  # a tool message's text is the result the model saw
        message["tool_results"] = [{"id": tool_call_id, "result": _loads(text)}]
        message["text"] = None
    return message


_OI_CALL = re.compile(
    r"^message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)$"
)
_OI_TEXT = re.compile(r"^message\.contents\.(\d+)\.message_content\.text$")


def _openinference_list(attrs: Mapping[str, Any], prefix: str) -> list[Message]:
    messages = []
    for _, fields in sorted(_indexed(attrs, prefix).items()):
        calls: dict[int, dict[str, Any]] = {}
        texts: dict[int, str] = {}
        for rest, value in fields.items():
            if m := _OI_CALL.match(rest):
                calls.setdefault(int(m.group(1)), {})[m.group(2)] = value
            elif (t := _OI_TEXT.match(rest)) and isinstance(value, str):
                texts[int(t.group(1))] = value
        text = fields.get("message.content")
        if not isinstance(text, str):
            text = "\n".join(v for _, v in sorted(texts.items())) or None
        messages.append(
            _indexed_message(
                fields.get("message.role"),
                text,
                calls,
                fields.get("message.tool_call_id"),
                ("function.name", "function.arguments"),
            )
        )
    return messages


def openinference_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    return (
        _openinference_list(attrs, "llm.input_messages."),
        _openinference_list(attrs, "llm.output_messages."),
    )


_TL_CALL = re.compile(r"^tool_calls\.(\d+)\.(id|name|arguments)$")


def _traceloop_list(attrs: Mapping[str, Any], prefix: str) -> list[Message]:
    messages = []
    for _, fields in sorted(_indexed(attrs, prefix).items()):
        calls: dict[int, dict[str, Any]] = {}
        for rest, value in fields.items():
            if m := _TL_CALL.match(rest):
                calls.setdefault(int(m.group(1)), {})[m.group(2)] = value
        content = fields.get("content")
        messages.append(
            _indexed_message(
                fields.get("role"),
                content if isinstance(content, str) else None,
                calls,
                fields.get("tool_call_id"),
                ("name", "arguments"),
            )
        )
    return messages


def traceloop_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    inputs = _traceloop_list(attrs, "gen_ai.prompt.")
    outputs = _traceloop_list(attrs, "gen_ai.completion.")
    if inputs or outputs:
        return inputs, outputs
    return genai_messages(attrs, events)  # current OpenLLMetry releases write the GenAI form


# --- Google ADK's legacy schema ----------------------------------------------------------------


def _genai_contents(contents: Any) -> list[Message]:
    """google.genai `Content` objects (role `user` / `model`) as canonical messages."""
    messages = []
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict):
            continue
        texts, calls, results = content_blocks(content)
        role = "assistant" if content.get("role") == "model" else content.get("role")
        message: Message = {"role": role, "text": "\n".join(texts) or None, "tool_calls": calls}
        if results:
            message["tool_results"] = results
        messages.append(message)
    return messages


def adk_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """`gcp.vertex.agent.llm_request` (a google.genai request: `contents`) and `.llm_response`
    (`content`) of ADK's `call_llm` span (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1)."""
    request = _loads(attrs.get("gcp.vertex.agent.llm_request"))
    response = _loads(attrs.get("gcp.vertex.agent.llm_response"))
    inputs = _genai_contents(request.get("contents")) if isinstance(request, dict) else []
    outputs = _genai_contents([response.get("content")]) if isinstance(response, dict) else []
    return inputs, outputs


# --- the Vercel AI SDK (ai <= 6 `experimental_telemetry`, ai 7 `LegacyOpenTelemetry`) ----------


def _vercel_list(raw: Any) -> list[Message]:
    messages = []
    parsed = _loads(raw)
    for message in parsed if isinstance(parsed, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        out: Message = {"role": message.get("role"), "text": None, "tool_calls": []}
        if isinstance(content, str):
            out["text"] = content
        else:
            texts, calls, results = content_blocks(content)
            out["text"] = "\n".join(texts) or None
            out["tool_calls"] = calls
            if results:
                out["tool_results"] = results
        messages.append(out)
    return messages


def vercel_messages(
    attrs: Mapping[str, Any], events: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """A model call's `ai.prompt.messages`, and its answer: `ai.response.toolCalls` (input as
    a JSON string or an object) and `ai.response.text`. The whole call's span has its
    messages in `ai.prompt` (`{"messages": [...]}` or `{"prompt": "..."}`)."""
    inputs = _vercel_list(attrs.get("ai.prompt.messages"))
    if not inputs:
        prompt = _loads(attrs.get("ai.prompt"))
        if isinstance(prompt, dict):
            inputs = _vercel_list(prompt.get("messages"))
            if isinstance(prompt.get("prompt"), str):
                inputs.append({"role": "user", "text": prompt["prompt"], "tool_calls": []})
    calls = _loads(attrs.get("ai.response.toolCalls"))
    text = attrs.get("ai.response.text")
    requested = [
        _call(c.get("toolCallId"), c.get("toolName"), c.get("input", c.get("args")))
        for c in (calls if isinstance(calls, list) else [])
        if isinstance(c, dict)
    ]
    outputs: list[Message] = []
    if requested or isinstance(text, str):
        outputs.append(
            {
                "role": "assistant",
                "text": text if isinstance(text, str) and text else None,
                "tool_calls": requested,
            }
        )
    return inputs, outputs


# --- the conventions -------------------------------------------------------------------------

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


# --- reading one span ------------------------------------------------------------------------


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def summarize_messages(
    inputs: list[Message], outputs: list[Message]
) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(latest user message, tool calls requested, tool results received, response text)."""
    # The latest user message with words: a user message may carry only tool results
    # (Anthropic's and Bedrock's way of sending them back).
    user = next(
        (
            m.get("text")
            for m in reversed(inputs)
            if m.get("role") == "user" and m.get("text") is not None
        ),
        None,
    )
    if user is not None:
        for before, after in USER_MESSAGE_FRAMES:
            if user.startswith(before):
                user = user[len(before) :]
                for end in after:
                    user = user.split(end, 1)[0]
                break
    requested = []
    texts = [m["text"] for m in outputs if isinstance(m.get("text"), str)]
    for m in outputs:
        for call in m.get("tool_calls", []):
            answer_key = ANSWER_TOOLS.get(call.get("name"))
            arguments = call.get("arguments")
            if answer_key is not None and isinstance(arguments, dict) and answer_key in arguments:
                answer = arguments[answer_key]
                texts.append(answer if isinstance(answer, str) else _as_text(answer) or "")
            else:
                requested.append(call)
    results = [r for m in inputs for r in m.get("tool_results", [])]
    return user, requested, results, ("\n".join(texts) if texts else None)


def tool_span_events(events: Iterable[dict[str, Any]]) -> tuple[Any, Any]:
    """(arguments, result) a tool span's events carry, for producers that put them there
    rather than in attributes: Strands' `gen_ai.tool.message` (the input) and `gen_ai.choice`
    (the output), or the two `gen_ai.client.inference.operation.details` events."""
    arguments = result = None
    for event in events:
        name = event.get("name")
        attributes = event.get("attributes") or {}
        if name == "gen_ai.tool.message" and arguments is None:
            arguments = attributes.get("content")
        elif name == "gen_ai.choice" and result is None:
            result = attributes.get("message")
        elif name == DETAILS_EVENT:
            for message in _genai_list(attributes.get("gen_ai.input.messages")):
                for call in message["tool_calls"]:
                    arguments = call["arguments"] if arguments is None else arguments
            for message in _genai_list(attributes.get("gen_ai.output.messages")):
                for answer in message.get("tool_results", []):
                    result = answer["result"] if result is None else result
    return arguments, result


class Extractor:
    """Fills the extracted columns of one span (runs once per span: kept lean).

    The conversation id comes from `CONVERSATION_KEYS`, then `conversation_attribute`, then the
    trace id.
    """

    def __init__(self, conversation_attribute: str | None = None) -> None:
        self.conventions = CONVENTIONS
        self.extra_conversation_keys: tuple[str, ...] = (
            (conversation_attribute,) if conversation_attribute else ()
        )
        self.conversation_keys = CONVERSATION_KEYS + self.extra_conversation_keys
        self._compiled = [
            (
                c,
                frozenset(c.markers),
                tuple((_POSITION[name], keys) for name, keys in c.keys.items()),
            )
            for c in self.conventions
        ]

    def extract(
        self,
        attrs: Mapping[str, Any],
        span_name: str,
        is_error: bool,
        exception_type: str | None,
        trace_id: str,
        events: Iterable[dict[str, Any]] = (),
    ) -> list[Any]:
        """The values of `FIELDS`, in order."""
        out: list[Any] = [None] * len(FIELDS)
        get = attrs.get
        for key in self.conversation_keys:
            value = get(key)
            if value is not None:
                out[0] = value if type(value) is str else _as_text(value)
                break
        else:
            out[0] = trace_id
        names = attrs.keys()  # a keys view tests the few markers, not every attribute
        for convention, markers, lookups in self._compiled:
            if names.isdisjoint(markers):
                continue
            for position, keys in lookups:
                for key in keys:
                    value = get(key)
                    if value is not None:
                        out[position] = value if type(value) is str else _as_text(value)
                        break
            if convention.operations is not None:
                kind_key, mapping = convention.operations
                kind = get(kind_key)
                if isinstance(kind, str) and kind in mapping:
                    out[2] = mapping[kind]
            if out[2] is None:  # operation, from the span name's first word
                out[2] = convention.operation_from_name.get(span_name.split(" ", 1)[0])
            if out[2] is None and out[3] is not None:
                out[2] = "execute_tool"  # a span naming the tool it runs is a tool call
            if convention.messages is not None and out[2] != "execute_tool":
                inputs, outputs = convention.messages(attrs, list(events))
                if inputs or outputs:
                    user, requested, results, text = summarize_messages(inputs, outputs)
                    out[7] = user
                    out[8] = orjson.dumps(requested) if requested else None
                    out[9] = orjson.dumps(results, default=str) if results else None
                    out[10] = text
            out[12] = convention.name
            break
        operation = out[2]
        if operation == "execute_tool":
            tool = out[3]
            if tool is None and span_name.startswith(HANDOFF_PREFIX):
                # OpenInference's Agents SDK instrumentation: a hand-off recorded as a tool
                # span, `handoff to <agent>`, the agent handing off in `input.value`
                operation = out[2] = "handoff"
                handing = get("input.value")
                out[1] = handing if isinstance(handing, str) and handing else out[1]
            elif tool in ANSWER_TOOLS or tool in NOT_TOOL_CALLS:
                # the answer, read from the model call that asked for it; or no call at all
                operation = out[2] = None
        elif operation == "chat" and span_name.rsplit(".", 1)[-1] in NOT_MODEL_CALLS:
            operation = out[2] = out[7] = out[8] = out[9] = out[10] = None
        if operation != "execute_tool":
            out[3] = out[4] = out[5] = out[6] = None  # tool fields only describe tool spans
            if operation in AGENT_OPERATIONS:
                # An agent's span repeats its model calls' messages: it never adds requested
                # calls or results (its user message and answer stay, for the turn).
                out[8] = out[9] = None
        else:
            if (out[5] is None or out[6] is None) and events:
                arguments, result = tool_span_events(events)
                out[5] = out[5] if out[5] is not None else _as_text(arguments)
                out[6] = out[6] if out[6] is not None else _as_text(result)
            result_text = out[6]
            if result_text is not None and result_text[:1] == "[":  # a provider's wrapping
                out[6] = _as_text(unwrap_result(result_text))
            elif (
                result_text is not None and result_text[:1] == "{" and '"raw_output"' in result_text
            ):
                out[6] = unwrap_tool_output(result_text)
            elif result_text is not None and result_text[:1] == '"':
                # a returned string serialized again (traceloop-sdk's `@tool` output is
                # `json.dumps` of what the function returned): the string is the result
                text = _loads(result_text)
                out[6] = text if isinstance(text, str) else result_text
            if out[5] is not None:  # tool arguments: JSON text, or a non-JSON value as text
                out[5] = _arguments_json(out[5])
        if out[11] is None and is_error:
            out[11] = exception_type
        return out
