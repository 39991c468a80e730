"""LangChain / LangGraph shim: every tool run as an `execute_tool` span with its real call id.

Usage::

    from spanscore.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)  # default: the global one
    graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "conv-123"}})

`spanscore.instrumentation.instrument()` does this itself when `langchain_core` is installed.

A callback handler is installed globally, for every run of every chain, agent, graph and tool,
through langchain-core's public extension point `register_configure_hook` (the one its own
tracers use): `CallbackManager.configure` adds the handler held by a context variable to every
callback manager it builds. The variable's *default* is our handler, so it is seen in every
thread and task without setting anything per context, and nothing of LangChain is patched.
`uninstrument()` removes the hook from langchain-core's list and disables the handler.

Tool runs (`on_tool_start` / `on_tool_end` / `on_tool_error`) become `execute_tool {tool}`
spans: `gen_ai.tool.name`, `gen_ai.tool.type=function`, `gen_ai.tool.call.id` (the model's call
id that LangChain hands the tool: `ToolCall["id"]`, also on the resulting `ToolMessage`),
`gen_ai.tool.call.arguments` (the tool's input as JSON, injected arguments left out, as
LangChain filters them), `gen_ai.tool.call.result` (the `ToolMessage` content, or the tool's
output as JSON). A tool that raises sets `error.type` (the exception's class) and status
ERROR; a tool whose error LangChain handled (`ToolMessage.status == "error"`) sets
`error.type=tool_error` and the message as the status description.

Conversation: a thread id in the run's metadata (`thread_id`, which LangGraph copies there from
`configurable.thread_id`; else `conversation_id` or `session_id`) becomes
`gen_ai.conversation.id` (a surrounding `conversation()` block wins).

Chat model runs (`on_chat_model_start` / `on_llm_end` / `on_llm_error`), whatever the provider
(`ChatOpenAI`, `ChatAnthropic`, `ChatBedrock`, `ChatGoogleGenerativeAI`, `ChatOllama`, ...),
become `chat {model}` spans: `gen_ai.request.model` and `gen_ai.provider.name` (LangChain's
`ls_model_name` / `ls_provider`), `gen_ai.input.messages` and `gen_ai.output.messages` in the
GenAI form (text, `tool_call` parts with LangChain's call ids, `tool_call_response` parts), the
token usage, and the thread id. This shim sees the call first, so it records it: while the
model runs, the `openai` client shim records nothing (`_model.recorded_by_framework`), and a
`ChatOpenAI` call is recorded once.

The handler runs inline (`run_inline`), never raises (every callback is guarded and logs),
and keeps at most `MAX_OPEN` unfinished tool spans.

Supported: langchain-core >= 0.3, < 2 (tested with 1.7.2, LangGraph 1.2.22).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import _model, _versions
from ._content import content_policy
from ._conversation import reset_ambient_conversation, set_ambient_conversation
from ._instrumentor import SpanscoreInstrumentor
from ._tool import as_json_text, error_type, framework_run_ended, framework_run_started

log = logging.getLogger("spanscore.instrumentation")

DISTRIBUTION = "langchain-core"
SUPPORTED = ((0, 3), (2, 0))  # [min, max)
_instruments = ("langchain-core >= 0.3, < 2",)

MAX_OPEN = 10_000  # unfinished tool spans kept; beyond, the oldest is ended as is
THREAD_KEYS = ("thread_id", "conversation_id", "session_id")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def conversation_of(metadata_: Any) -> str | None:
    """The conversation id in a run's metadata: its thread id (LangGraph puts
    `configurable.thread_id` there), else `conversation_id` or `session_id`."""
    if not isinstance(metadata_, Mapping):
        return None
    for key in THREAD_KEYS:
        value = metadata_.get(key)
        if value is not None and value != "":
            return str(value)
    return None


def tool_arguments(input_str: Any, inputs: Any) -> str | None:
    """The tool's input as JSON: the `inputs` dict LangChain passes (never its repr); a plain
    string input as it is (JSON when it parses as JSON)."""
    if isinstance(inputs, Mapping):
        return as_json_text(dict(inputs))
    return input_str if isinstance(input_str, str) else None


def tool_output(output: Any) -> tuple[str | None, str | None, str | None]:
    """(result text, call id, handled error message) of what a tool run returned: a
    `ToolMessage` (its content, `tool_call_id`, and its content again when `status` is
    "error"), a `Command` (its messages' tool message), or a plain value (as JSON)."""
    if _get(output, "type") == "tool":
        content = _get(output, "content")
        text = content if isinstance(content, str) else as_json_text(content)
        failed = _get(output, "status") == "error"
        return text, _get(output, "tool_call_id"), (text or "error") if failed else None
    update = _get(output, "update")
    if isinstance(update, Mapping) and isinstance(update.get("messages"), list):
        for message in update["messages"]:
            if _get(message, "type") == "tool":
                return tool_output(message)
    return as_json_text(output), None, None


class SpanscoreCallbackHandler:
    """Tool runs as `execute_tool` spans. Subclassed from langchain-core's
    `BaseCallbackHandler` at runtime (`_make_handler`), so this module imports without it."""

    run_inline = True  # called in the caller's thread/task: cheap, and the context is right
    raise_error = False

    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self._tracer = tracer
        self._lock = threading.Lock()
        self._spans: OrderedDict[Any, Span] = OrderedDict()
        self._models: OrderedDict[Any, tuple[Span, list[Any]]] = OrderedDict()
        self._marks: OrderedDict[Any, contextvars.Token[Any]] = OrderedDict()
        self.enabled = True

    # -- the callbacks; each guarded ----------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not self.enabled:
            return
        try:
            self._start(serialized, input_str, run_id, metadata, inputs, kwargs)
        except Exception:
            log.warning("langchain shim: on_tool_start failed", exc_info=True)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: Any,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call's span; the provider's client call comes next, in this context: it
        takes the run's thread id and records nothing of its own until the model ends."""
        if not self.enabled:
            return
        try:
            self._model_started(messages, run_id, metadata, kwargs)
        except Exception:
            log.warning("langchain shim: on_chat_model_start failed", exc_info=True)

    def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._model_ended(run_id, response, None)

    def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        self._model_ended(run_id, None, error)

    def _model_started(
        self, messages: Any, run_id: Any, metadata_: Any, kwargs: Mapping[str, Any]
    ) -> None:
        conversation_id = conversation_of(metadata_)
        params = kwargs.get("invocation_params")
        model = (
            _get(metadata_, "ls_model_name") or _get(params, "model") or _get(params, "model_name")
        )
        history = messages[0] if isinstance(messages, list) and messages else []
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": _get(metadata_, "ls_provider"),
            "gen_ai.conversation.id": conversation_id,
            "gen_ai.input.messages": content_policy().record(
                "messages", json.dumps(genai_messages(history), default=str)
            ),
        }
        span = self._tracer.start_span(
            f"chat {model}" if model else "chat",
            kind=SpanKind.CLIENT,
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        tokens: list[Any] = [_model.recorded_by_framework.set(True)]
        if conversation_id is not None:
            tokens.append(set_ambient_conversation(conversation_id))
        with self._lock:
            self._models[run_id] = (span, tokens)
            overflow = (
                [
                    self._models.popitem(last=False)[1][0]
                    for _ in range(len(self._models) - MAX_OPEN)
                ]
                if len(self._models) > MAX_OPEN
                else []
            )
        for stale in overflow:
            stale.end()

    def _model_ended(self, run_id: Any, response: Any, error: BaseException | None) -> None:
        try:
            with self._lock:
                span, tokens = self._models.pop(run_id, (None, []))
            for token in reversed(tokens):  # in this context: the run's callbacks run inline
                with contextlib.suppress(ValueError):
                    if token.var is _model.recorded_by_framework:
                        _model.recorded_by_framework.reset(token)
                    else:
                        reset_ambient_conversation(token)
            if span is None:
                return
            try:
                if error is not None:
                    _failed(span, error)
                    return
                for key, value in model_output_attributes(response).items():
                    span.set_attribute(key, value)
            finally:
                span.end()
        except Exception:
            log.warning("langchain shim: on_llm_end failed", exc_info=True)

    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        try:
            self._end(run_id, output, None)
        except Exception:
            log.warning("langchain shim: on_tool_end failed", exc_info=True)

    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        try:
            self._end(run_id, None, error)
        except Exception:
            log.warning("langchain shim: on_tool_error failed", exc_info=True)

    # -- the work -------------------------------------------------------------------------------

    def _start(
        self,
        serialized: Any,
        input_str: Any,
        run_id: Any,
        metadata_: Any,
        inputs: Any,
        kwargs: Mapping[str, Any],
    ) -> None:
        name = kwargs.get("name") or _get(serialized, "name") or "tool"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": kwargs.get("tool_call_id"),
            "gen_ai.tool.description": _get(serialized, "description"),
            "gen_ai.conversation.id": conversation_of(metadata_),
            "gen_ai.tool.call.arguments": content_policy().record(
                "tool_arguments", tool_arguments(input_str, inputs)
            ),
        }
        span = self._tracer.start_span(
            f"execute_tool {name}",
            kind=SpanKind.INTERNAL,
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        # A spanscore `@tool` function this run calls is recorded by this span only.
        mark = framework_run_started(name, lambda: run_id in self._spans)
        with self._lock:
            self._spans[run_id] = span
            self._marks[run_id] = mark
            while len(self._marks) > MAX_OPEN:
                self._marks.popitem(last=False)
            overflow = (
                [self._spans.popitem(last=False)[1] for _ in range(len(self._spans) - MAX_OPEN)]
                if len(self._spans) > MAX_OPEN
                else []
            )
        for stale in overflow:
            stale.end()

    def _end(self, run_id: Any, output: Any, error: BaseException | None) -> None:
        with self._lock:
            span = self._spans.pop(run_id, None)
            mark = self._marks.pop(run_id, None)
        if mark is not None:
            framework_run_ended(mark)
        if span is None:
            return
        try:
            if error is not None:
                _failed(span, error)
                return
            result, call_id, handled_error = tool_output(output)
            if call_id and not _has(span, "gen_ai.tool.call.id"):
                span.set_attribute("gen_ai.tool.call.id", call_id)
            recorded = content_policy().record("tool_results", result)
            if recorded is not None:
                span.set_attribute("gen_ai.tool.call.result", recorded)
            if handled_error is not None:
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR, handled_error))
        finally:
            span.end()

    def end_all(self) -> None:
        with self._lock:
            spans = list(self._spans.values()) + [span for span, _ in self._models.values()]
            self._spans.clear()
            self._models.clear()
        for span in spans:
            span.end()


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _text(content: Any) -> str | None:
    """A message's text: a string, or the text blocks of a list of content blocks."""
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [
            block if isinstance(block, str) else block.get("text")
            for block in content
            if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
        ]
        return "\n".join(t for t in texts if isinstance(t, str)) or None
    return None


def genai_messages(messages: Any) -> list[dict[str, Any]]:
    """LangChain messages in the GenAI form (`{"role", "parts"}`), whatever the provider."""
    out = []
    for message in messages if isinstance(messages, list) else []:
        kind = getattr(message, "type", None)
        parts: list[dict[str, Any]] = []
        if kind == "tool":
            content = message.content
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": getattr(message, "tool_call_id", None),
                    "response": content if isinstance(content, str) else _text(content),
                }
            )
        else:
            text = _text(getattr(message, "content", None))
            if text is not None:
                parts.append({"type": "text", "content": text})
            for call in getattr(message, "tool_calls", None) or []:
                parts.append(
                    {
                        "type": "tool_call",
                        "id": _get(call, "id"),
                        "name": _get(call, "name"),
                        "arguments": _get(call, "args"),
                    }
                )
        out.append({"role": _ROLES.get(str(kind), str(kind)), "parts": parts})
    return out


def model_output_attributes(response: Any) -> dict[str, Any]:
    """A chat model run's answer (`LLMResult`): its output messages and token usage."""
    generations = _get(response, "generations") or []
    first = generations[0][0] if generations and generations[0] else None
    message = _get(first, "message")
    if message is None:
        return {}
    output = genai_messages([message])
    reason = _get(_get(message, "response_metadata") or {}, "finish_reason") or _get(
        _get(first, "generation_info") or {}, "finish_reason"
    )
    if reason:
        output[0]["finish_reason"] = str(reason)
    attributes: dict[str, Any] = {
        "gen_ai.output.messages": content_policy().record(
            "messages", json.dumps(output, default=str)
        ),
    }
    usage = _get(message, "usage_metadata") or {}
    for source, target in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
    ):
        if isinstance(_get(usage, source), int):
            attributes[target] = _get(usage, source)
    return {k: v for k, v in attributes.items() if v is not None}


def _failed(span: Span, error: BaseException) -> None:
    span.set_attribute("error.type", error_type(error))
    span.set_status(Status(StatusCode.ERROR, str(error) or None))


def _has(span: Span, key: str) -> bool:
    attributes = getattr(span, "attributes", None)
    return isinstance(attributes, Mapping) and key in attributes


_handler_class: type[Any] | None = None


def _make_handler(tracer: Tracer) -> SpanscoreCallbackHandler:
    global _handler_class
    if _handler_class is None:
        from langchain_core.callbacks import BaseCallbackHandler

        _handler_class = type(
            "SpanscoreCallbackHandler",
            (SpanscoreCallbackHandler, BaseCallbackHandler),
            {"__module__": __name__},
        )
    handler: SpanscoreCallbackHandler = _handler_class(tracer)
    return handler


def supported_version() -> str | None:
    """The installed langchain-core version when it is supported; None (logged) otherwise."""
    return _versions.supported_version(DISTRIBUTION, SUPPORTED, _instruments[0])


class LangChainInstrumentor(SpanscoreInstrumentor):
    """Installs the handler globally; one per process. Entry point: `spanscore_langchain`."""

    instruments = _instruments
    _lock = threading.Lock()
    _handler: SpanscoreCallbackHandler | None = None
    _hook: tuple[Any, ...] | None = None

    def _patch(self, tracer_provider: TracerProvider | None) -> bool:
        with self._lock:
            if LangChainInstrumentor._handler is not None:
                return True
            version = supported_version()
            if version is None:
                return False
            from langchain_core.tracers import context as lc_context

            tracer = trace.get_tracer(
                "spanscore.instrumentation.langchain",
                version,
                tracer_provider=tracer_provider,
                schema_url="https://opentelemetry.io/schemas/1.37.0",
            )
            handler = _make_handler(tracer)
            # The default of a context variable is process-wide: every context sees it.
            variable: contextvars.ContextVar[Any] = contextvars.ContextVar(
                "spanscore_langchain_handler", default=handler
            )
            before = len(lc_context._configure_hooks)
            lc_context.register_configure_hook(variable, inheritable=True)
            LangChainInstrumentor._hook = tuple(lc_context._configure_hooks[before])
            LangChainInstrumentor._handler = handler
            return True

    def _unpatch(self) -> None:
        with self._lock:
            handler, hook = LangChainInstrumentor._handler, LangChainInstrumentor._hook
            if handler is None:
                return
            LangChainInstrumentor._handler = LangChainInstrumentor._hook = None
            handler.enabled = False  # inert even in callback managers already built
            try:
                from langchain_core.tracers import context as lc_context

                hooks = lc_context._configure_hooks
                hooks[:] = [h for h in hooks if tuple(h) != hook]
            except Exception:
                log.warning("could not remove the langchain configure hook", exc_info=True)
            handler.end_all()

    @property
    def is_instrumented(self) -> bool:
        return LangChainInstrumentor._handler is not None


__all__ = [
    "LangChainInstrumentor",
    "SpanscoreCallbackHandler",
    "conversation_of",
    "tool_arguments",
    "tool_output",
]
