"""OpenAI Agents SDK shim: the SDK's own traces as OpenTelemetry GenAI spans.

Usage::

    from spanscore.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)  # default: the global one
    result = await Runner.run(agent, items, run_config=RunConfig(group_id="conv-123"))

`spanscore.instrumentation.instrument()` does this itself when `openai-agents` is installed.

The SDK calls a `TracingProcessor` for every trace and span it records; this one starts and ends
an OpenTelemetry span for each, shaped by the GenAI semantic conventions:

- the SDK trace (one `Runner.run`): `invoke_workflow {workflow_name}`, the root of the others;
- `AgentSpanData`: `invoke_agent {agent}` (`gen_ai.agent.name`);
- `ResponseSpanData` / `GenerationSpanData`: `chat {model}` (`gen_ai.provider.name=openai`,
  request/response model, token usage, `gen_ai.input.messages` / `gen_ai.output.messages` in
  the GenAI parts format with `tool_call` and `tool_call_response` parts);
- `FunctionSpanData`: `execute_tool {tool}` (`gen_ai.tool.name`, `gen_ai.tool.type=function`,
  `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`, `gen_ai.tool.call.id`);
- `HandoffSpanData`: `handoff {to_agent}` (`gen_ai.agent.name` = the agent handing off), named
  when it ends: the SDK knows the receiving agent only then;
- `GuardrailSpanData`: `guardrail {name}` (`openai_agents.guardrail.triggered`);
- anything else: `{type} {name}`, without a GenAI operation; in 0.24 that is `task {workflow}`
  (one `Runner.run`, under the workflow span) and `turn {n}` (one agent-loop turn: a model call
  and the tools it requested, under the agent span).

The SDK's function span carries no tool call id. The id is recovered from the model output that
requested the call: per trace, the `function_call` items (call id, name, arguments) of every
model response are remembered, and each function span takes the first unclaimed call with the
same name, and the same arguments when several are pending (parallel calls of one tool).

The SDK trace's `group_id` becomes `gen_ai.conversation.id` on every span of it (a surrounding
`spanscore.instrumentation.conversation()` block wins, through its span processor). A span's
error (`{"message", "data"}`) becomes status ERROR and `error.type`: the error the SDK recorded
(`data.error`, else the message). The SDK records the data (inputs, outputs, tool errors) only
when `RunConfig.trace_include_sensitive_data` is true (its default); tool errors handled by the
SDK's *default* failure function are always redacted by the SDK itself.

Spans are not made current in the OpenTelemetry context (the SDK's callbacks do not bracket the
work in one task), so client-level instrumentations do not nest under them.

Telemetry never breaks the agent: every callback is guarded, logs, and carries on.

Supported: openai-agents >= 0.24, < 1 (tested with 0.24.0). Other versions are skipped with a
warning, as is a missing `agents` package.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import _versions
from ._content import content_policy
from ._instrumentor import SpanscoreInstrumentor

if TYPE_CHECKING:
    from agents.tracing import Span, Trace

log = logging.getLogger("spanscore.instrumentation")

DISTRIBUTION = "openai-agents"
SUPPORTED = ((0, 24), (1, 0))  # [min, max): openai-agents >= 0.24, < 1
_instruments = ("openai-agents >= 0.24, < 1",)

_MAX_PENDING = 1024  # remembered model calls per trace (a run that never claims them is bounded)


# --- pure helpers ----------------------------------------------------------------------------


def get(obj: Any, key: str, default: Any = None) -> Any:
    """A field of a dict or an object alike."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _parse(text: Any) -> Any:
    """JSON text parsed; anything else as it is."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _result_text(output: Any) -> str | None:
    """A tool's output as an attribute: strings as they are, JSON-serialisable values as JSON,
    anything else as its `str`."""
    if output is None or isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False)
    except (TypeError, ValueError):
        dump = getattr(output, "model_dump", None)  # pydantic models
        if callable(dump):
            try:
                return json.dumps(dump(mode="json"), ensure_ascii=False)
            except Exception:
                pass
        return str(output)


def _text_of(content: Any) -> str | None:
    """The text of a message content: a string, or the texts of its parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [get(p, "text") for p in content]
        joined = "".join(t for t in texts if isinstance(t, str))
        return joined or None
    return None


def _tool_call_part(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": _parse(arguments)}


def _append(messages: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Add parts to the last message when it has the same role (one model response, or the
    results of one batch of calls), else as a new message."""
    if not parts:
        return
    if messages and messages[-1]["role"] == role and role in ("assistant", "tool"):
        messages[-1]["parts"].extend(parts)
    else:
        messages.append({"role": role, "parts": parts})


def responses_input_messages(items: Any) -> list[dict[str, Any]]:
    """A Responses API `input` (a string or input items) as GenAI input messages."""
    if isinstance(items, str):
        return [{"role": "user", "parts": [{"type": "text", "content": items}]}]
    messages: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        kind = get(item, "type", "message")
        if kind == "message":
            role = get(item, "role")
            role = "system" if role == "developer" else role
            text = _text_of(get(item, "content"))
            if isinstance(role, str) and text is not None:
                _append(messages, role, [{"type": "text", "content": text}])
        elif kind == "function_call":
            part = _tool_call_part(get(item, "call_id"), get(item, "name"), get(item, "arguments"))
            _append(messages, "assistant", [part])
        elif kind == "function_call_output":
            output = get(item, "output")
            response = output if isinstance(output, str) else _text_of(output)
            part = {"type": "tool_call_response", "id": get(item, "call_id"), "response": response}
            _append(messages, "tool", [part])
    return messages


def responses_output(items: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """A Responses API `output` as GenAI output messages, and its function calls as
    (call_id, name, arguments text)."""
    parts: list[dict[str, Any]] = []
    calls: list[tuple[str, str, str]] = []
    for item in items if isinstance(items, list) else []:
        kind = get(item, "type")
        if kind == "message":
            text = _text_of(get(item, "content"))
            if text is not None:
                parts.append({"type": "text", "content": text})
        elif kind == "function_call":
            call_id, name, arguments = (
                get(item, "call_id"),
                get(item, "name"),
                get(item, "arguments"),
            )
            parts.append(_tool_call_part(call_id, name, arguments))
            if isinstance(call_id, str) and isinstance(name, str):
                calls.append((call_id, name, arguments if isinstance(arguments, str) else ""))
    if not parts:
        return [], calls
    finish = "tool_call" if calls else "stop"
    return [{"role": "assistant", "parts": parts, "finish_reason": finish}], calls


def chat_messages(items: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """Chat Completions messages (`GenerationSpanData` input or output) as GenAI messages,
    and the tool calls they request as (call_id, name, arguments text)."""
    messages: list[dict[str, Any]] = []
    calls: list[tuple[str, str, str]] = []
    for message in items if isinstance(items, list) else []:
        role = get(message, "role")
        if role == "tool":
            part = {
                "type": "tool_call_response",
                "id": get(message, "tool_call_id"),
                "response": _text_of(get(message, "content")),
            }
            _append(messages, "tool", [part])
            continue
        if not isinstance(role, str):
            continue
        parts: list[dict[str, Any]] = []
        text = _text_of(get(message, "content"))
        if text is not None:
            parts.append({"type": "text", "content": text})
        for call in get(message, "tool_calls") or []:
            function = get(call, "function") or {}
            call_id, name = get(call, "id"), get(function, "name")
            arguments = get(function, "arguments")
            parts.append(_tool_call_part(call_id, name, arguments))
            if isinstance(call_id, str) and isinstance(name, str):
                calls.append((call_id, name, arguments if isinstance(arguments, str) else ""))
        role = "system" if role == "developer" else role
        messages.append({"role": role, "parts": parts})
    return messages, calls


def error_attributes(error: Any) -> tuple[str, str]:
    """(error.type, status description) of an SDK span error `{"message", "data"}`: the error
    the SDK recorded (`data.error`), else its message; the description joins both."""
    message = get(error, "message")
    data = get(error, "data")
    detail = get(data, "error") if isinstance(data, Mapping) else None
    message_text = message if isinstance(message, str) and message else None
    if isinstance(detail, str) and detail:
        kind = detail
    elif detail is not None:
        kind = _json(detail)
    else:
        kind = message_text or "error"
    description = f"{message_text}: {kind}" if message_text and kind != message_text else kind
    return kind, description


def usage_attributes(usage: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, attribute in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
        ("prompt_tokens", "gen_ai.usage.input_tokens"),
        ("completion_tokens", "gen_ai.usage.output_tokens"),
    ):
        value = get(usage, key)
        if isinstance(value, int) and not isinstance(value, bool) and attribute not in out:
            out[attribute] = value
    return out


def _drop_none(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


# --- the processor ---------------------------------------------------------------------------


@dataclass
class _PendingCall:
    call_id: str
    name: str
    arguments: str
    claimed: bool = False


@dataclass
class _TraceState:
    root: OtelSpan | None
    conversation_id: str | None
    pending: list[_PendingCall]


def _same_arguments(a: str, b: str) -> bool:
    return a == b or _parse(a) == _parse(b)


class OpenTelemetryTracingProcessor:
    """An `agents.tracing.TracingProcessor` that records the SDK's traces as OTel spans.

    Subclassed from the SDK's interface at runtime (`_processor_class`), so this module
    imports without the SDK.
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        self._traces: dict[str, _TraceState] = {}
        self._spans: dict[str, OtelSpan] = {}
        self.enabled = True

    # -- the interface; each callback is guarded ------------------------------------------

    def on_trace_start(self, trace_: Trace) -> None:
        if not self.enabled:
            return
        try:
            self._trace_start(trace_)
        except Exception:
            log.warning("openai-agents shim: on_trace_start failed", exc_info=True)

    def on_trace_end(self, trace_: Trace) -> None:
        try:
            self._trace_end(trace_)
        except Exception:
            log.warning("openai-agents shim: on_trace_end failed", exc_info=True)

    def on_span_start(self, span: Span[Any]) -> None:
        if not self.enabled:
            return
        try:
            self._span_start(span)
        except Exception:
            log.warning("openai-agents shim: on_span_start failed", exc_info=True)

    def on_span_end(self, span: Span[Any]) -> None:
        try:
            self._span_end(span)
        except Exception:
            log.warning("openai-agents shim: on_span_end failed", exc_info=True)

    def shutdown(self) -> None:
        try:
            self._end_all()
        except Exception:
            log.warning("openai-agents shim: shutdown failed", exc_info=True)

    def force_flush(self) -> None:
        pass  # spans go to the provider's own processors, which flush themselves

    # -- the work ---------------------------------------------------------------------------

    def _trace_start(self, trace_: Trace) -> None:
        group_id = getattr(trace_, "group_id", None)
        conversation_id = str(group_id) if group_id is not None else None
        name = trace_.name or "workflow"
        attributes = _drop_none(
            {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.conversation.id": conversation_id,
                "openai_agents.trace_id": trace_.trace_id,
                "openai_agents.workflow_name": trace_.name,
            }
        )
        root = self._tracer.start_span(
            f"invoke_workflow {name}",
            context=otel_context.get_current(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        with self._lock:
            self._traces[trace_.trace_id] = _TraceState(root, conversation_id, [])

    def _trace_end(self, trace_: Trace) -> None:
        with self._lock:
            state = self._traces.pop(trace_.trace_id, None)
        if state is not None and state.root is not None:
            state.root.end()

    def _state(self, trace_id: str) -> _TraceState:
        with self._lock:
            state = self._traces.get(trace_id)
            if state is None:  # a trace that started before we were registered
                state = self._traces[trace_id] = _TraceState(None, None, [])
            return state

    def _span_start(self, span: Span[Any]) -> None:
        state = self._state(span.trace_id)
        with self._lock:
            parent = self._spans.get(span.parent_id) if span.parent_id else None
        parent = parent or state.root
        ctx = (
            trace.set_span_in_context(parent, otel_context.get_current())
            if parent is not None
            else otel_context.get_current()
        )
        name, attributes = _start_shape(span.span_data)
        if state.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = state.conversation_id
        kind = SpanKind.CLIENT if attributes.get("gen_ai.operation.name") == "chat" else None
        otel_span = self._tracer.start_span(
            name,
            context=ctx,
            kind=kind or SpanKind.INTERNAL,
            attributes=_drop_none(attributes),
        )
        with self._lock:
            self._spans[span.span_id] = otel_span

    def _span_end(self, span: Span[Any]) -> None:
        with self._lock:
            otel_span = self._spans.pop(span.span_id, None)
        if otel_span is None:
            return
        try:
            data = span.span_data
            kind = getattr(data, "type", None)
            if kind in ("response", "generation"):
                attributes, calls = _chat_end_attributes(data)
                model = attributes.get("gen_ai.request.model")
                if model:  # a response span learns its model only when the response is in
                    otel_span.update_name(f"chat {model}")
                if calls:
                    state = self._state(span.trace_id)
                    with self._lock:
                        state.pending.extend(_PendingCall(*c) for c in calls)
                        del state.pending[:-_MAX_PENDING]
            elif kind == "function":
                attributes = _function_end_attributes(data)
                call = self._claim(span.trace_id, data.name, data.input)
                if call is not None:
                    attributes["gen_ai.tool.call.id"] = call.call_id
            elif kind == "handoff":
                attributes = {
                    "openai_agents.handoff.from_agent": data.from_agent,
                    "openai_agents.handoff.to_agent": data.to_agent,
                }
                if data.to_agent:
                    otel_span.update_name(f"handoff {data.to_agent}")
            elif kind == "guardrail":
                attributes = {"openai_agents.guardrail.triggered": bool(data.triggered)}
            else:
                attributes = {}
            otel_span.set_attributes(_drop_none(attributes))
            error = span.error
            if error:
                error_type, description = error_attributes(error)
                otel_span.set_attribute("error.type", error_type)
                otel_span.set_status(Status(StatusCode.ERROR, description))
        finally:
            otel_span.end()  # whatever failed above, the span is ended

    def _claim(self, trace_id: str, name: str, arguments: Any) -> _PendingCall | None:
        """The first unclaimed model call of this tool in the trace (with these arguments when
        several are pending), marked claimed."""
        with self._lock:
            state = self._traces.get(trace_id)
            if state is None:
                return None
            candidates = [c for c in state.pending if not c.claimed and c.name == name]
            if len(candidates) > 1 and isinstance(arguments, str):
                exact = [c for c in candidates if _same_arguments(c.arguments, arguments)]
                candidates = exact or candidates
            if not candidates:
                return None
            candidates[0].claimed = True
            return candidates[0]

    def _end_all(self) -> None:
        with self._lock:
            spans = list(self._spans.values())
            roots = [s.root for s in self._traces.values() if s.root is not None]
            self._spans.clear()
            self._traces.clear()
        now = time.time_ns()
        for otel_span in [*spans, *roots]:
            otel_span.end(end_time=now)


def _start_shape(data: Any) -> tuple[str, dict[str, Any]]:
    """(span name, attributes) known when the SDK span starts."""
    kind = getattr(data, "type", None)
    if kind == "agent":
        return f"invoke_agent {data.name}", {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": data.name,
            "gen_ai.provider.name": "openai",
        }
    if kind in ("response", "generation"):
        model = getattr(data, "model", None)
        response = getattr(data, "response", None)
        model = model or get(response, "model")
        return f"chat {model}" if model else "chat", {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
        }
    if kind == "function":
        return f"execute_tool {data.name}", {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": data.name,
            "gen_ai.tool.type": "function",
        }
    if kind == "handoff":  # the SDK knows the receiving agent only when the hand-off ends
        return f"handoff {data.to_agent}" if data.to_agent else "handoff", {
            "gen_ai.operation.name": "handoff",
            "gen_ai.agent.name": data.from_agent,
            "openai_agents.handoff.from_agent": data.from_agent,
            "openai_agents.handoff.to_agent": data.to_agent,
        }
    if kind == "guardrail":
        return f"guardrail {data.name}", {"openai_agents.guardrail.name": data.name}
    if kind == "turn":  # one agent-loop turn: a model call and the tools it requested
        return f"turn {data.turn}", {
            "openai_agents.span.type": kind,
            "openai_agents.turn": data.turn,
            "openai_agents.agent_name": data.agent_name,
        }
    name = getattr(data, "name", None)
    return (f"{kind} {name}" if name else str(kind)), {"openai_agents.span.type": kind}


def _chat_end_attributes(data: Any) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Attributes of a finished model call, and the tool calls its output requested."""
    attributes: dict[str, Any] = {}
    if data.type == "response":
        response = data.response
        inputs = responses_input_messages(data.input)
        outputs, calls = responses_output(get(response, "output"))
        instructions = get(response, "instructions")
        if isinstance(instructions, str) and instructions:
            attributes["gen_ai.system_instructions"] = _json(
                [{"type": "text", "content": instructions}]
            )
        model = get(response, "model")
        attributes["gen_ai.request.model"] = model
        attributes["gen_ai.response.model"] = model
        attributes["gen_ai.response.id"] = get(response, "id") or getattr(
            data, "_response_id", None
        )
        if outputs:
            attributes["gen_ai.response.finish_reasons"] = [outputs[0]["finish_reason"]]
        attributes.update(usage_attributes(data.usage or get(response, "usage")))
    else:
        inputs, _ = chat_messages(data.input)
        outputs, calls = chat_messages(data.output)
        for message in outputs:
            message["finish_reason"] = (
                "tool_call" if any(p["type"] == "tool_call" for p in message["parts"]) else "stop"
            )
        attributes["gen_ai.request.model"] = data.model
        attributes.update(usage_attributes(data.usage))
    policy = content_policy()
    if inputs:
        attributes["gen_ai.input.messages"] = policy.record("messages", _json(inputs))
    if outputs:
        attributes["gen_ai.output.messages"] = policy.record("messages", _json(outputs))
    return attributes, calls


def _function_end_attributes(data: Any) -> dict[str, Any]:
    policy = content_policy()
    arguments = data.input if isinstance(data.input, str) else None
    attributes: dict[str, Any] = {
        "gen_ai.tool.call.arguments": policy.record("tool_arguments", arguments),
        "gen_ai.tool.call.result": policy.record("tool_results", _result_text(data.output)),
    }
    if data.mcp_data:
        attributes["openai_agents.mcp_data"] = _json(data.mcp_data)
    return attributes


_processor_class: type[Any] | None = None


def _make_processor(tracer: Tracer) -> OpenTelemetryTracingProcessor:
    """The processor, as a subclass of the SDK's `TracingProcessor` (imported here)."""
    global _processor_class
    if _processor_class is None:
        from agents.tracing import TracingProcessor

        _processor_class = type(
            "OpenTelemetryTracingProcessor",
            (OpenTelemetryTracingProcessor, TracingProcessor),
            {"__module__": __name__},
        )
    processor: OpenTelemetryTracingProcessor = _processor_class(tracer)
    return processor


# --- the instrumentor ------------------------------------------------------------------------


def supported_version() -> str | None:
    """The installed openai-agents version when it is supported; None (logged) otherwise."""
    return _versions.supported_version(DISTRIBUTION, SUPPORTED, _instruments[0])


class OpenAIAgentsInstrumentor(SpanscoreInstrumentor):
    """Registers the processor with the SDK; one per process. Entry point:
    `spanscore_openai_agents`.

    `instrument()` a second time only warns; `uninstrument()` removes the processor from the
    SDK's list and disables it (inert even where the SDK cannot drop it), ending open spans.
    """

    instruments = _instruments
    _lock = threading.Lock()
    _processor: OpenTelemetryTracingProcessor | None = None

    def _patch(self, tracer_provider: TracerProvider | None) -> bool:
        with self._lock:
            if OpenAIAgentsInstrumentor._processor is not None:
                return True
            version = supported_version()
            if version is None:
                return False
            try:
                from agents.tracing import add_trace_processor
            except ImportError:
                log.info("the `agents` package cannot be imported; its shim is skipped")
                return False
            tracer = trace.get_tracer(
                "spanscore.instrumentation.openai_agents",
                version,
                tracer_provider=tracer_provider,
                schema_url="https://opentelemetry.io/schemas/1.37.0",
            )
            processor = _make_processor(tracer)
            add_trace_processor(processor)  # type: ignore[arg-type]
            OpenAIAgentsInstrumentor._processor = processor
            return True

    def _unpatch(self) -> None:
        with self._lock:
            processor = OpenAIAgentsInstrumentor._processor
            if processor is None:
                return
            OpenAIAgentsInstrumentor._processor = None
            processor.enabled = False
            try:
                _remove_processor(processor)
            except Exception:
                log.warning("could not remove the openai-agents processor", exc_info=True)
            processor.shutdown()

    @property
    def is_instrumented(self) -> bool:
        return OpenAIAgentsInstrumentor._processor is not None


def registered_processors() -> Iterable[Any]:
    """The SDK's current trace processors (the SDK has no public getter: read, guarded)."""
    from agents.tracing import get_trace_provider

    multi = getattr(get_trace_provider(), "_multi_processor", None)
    return tuple(getattr(multi, "_processors", ()))


def _remove_processor(processor: Any) -> None:
    from agents.tracing import set_trace_processors

    current = list(registered_processors())
    if processor in current:
        set_trace_processors([p for p in current if p is not processor])


__all__ = [
    "OpenAIAgentsInstrumentor",
    "OpenTelemetryTracingProcessor",
    "chat_messages",
    "error_attributes",
    "responses_input_messages",
    "responses_output",
]
