"""OpenAI Python client shim: a `chat {model}` span per model call, with the calls it requested.

Usage::

    from spanscore.instrumentation.openai_client import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider)  # default: the global one
    completion = client.chat.completions.create(model=..., messages=..., tools=...)

`spanscore.instrumentation.instrument()` does this itself when `openai` is installed.

Patched: `create` and `parse` of `chat.completions` and `responses`, on the sync and async
clients (`openai.resources.chat.completions.Completions` / `AsyncCompletions`,
`openai.resources.responses.Responses` / `AsyncResponses`), so every client, made before or
after, is covered; the `.stream()` helpers go through `create` and are recorded there, once.
Not covered: the Realtime API.

Each call is a CLIENT span `chat {model}`, current while the request runs, with
`gen_ai.operation.name=chat`, `gen_ai.provider.name=openai`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.response.id`, `gen_ai.response.finish_reasons`, token usage,
`gen_ai.tool.definitions` (the `tools` argument, as JSON), `gen_ai.system_instructions`
(Responses `instructions`), and `gen_ai.input.messages` / `gen_ai.output.messages` in the GenAI
parts format (`text`, `tool_call` with the model's call id, `tool_call_response`), the shape the
collector's GenAI convention reads (requested tool calls, tool results, response text). Messages
obey the content policy (kind `messages`). A failed call sets `error.type` (the exception's
class) and status ERROR, and the exception reaches the caller unchanged.

Streaming (`stream=True`): the stream is returned in a proxy that passes every chunk/event
through, and ends the span when the stream is exhausted, fails or is closed (directly or by its
context manager); chat chunks are accumulated into the output message, a Responses stream is
read from its final `response.completed` (or `.incomplete` / `.failed`) event.

The calls a response requested are remembered (context-local, bounded) so that
`spanscore.instrumentation.tool` can put the model's call id on the tool's span.

With the OpenAI Agents SDK shim also active, model calls the SDK makes inside its own
response/generation span are not recorded a second time here (the SDK shim records them).

Supported: openai >= 1.66 (the Responses API), < 4; tested with 3.52.0. Other versions are
skipped with a warning.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import _model, _tool, _versions
from ._content import content_policy
from ._instrumentor import SpanscoreInstrumentor, Switch, restore
from .openai_agents import chat_messages, get, responses_output, usage_attributes
from .openai_agents import responses_input_messages as _responses_input

log = logging.getLogger("spanscore.instrumentation")

DISTRIBUTION = "openai"
SUPPORTED = ((1, 66), (4, 0))  # [min, max)
_instruments = ("openai >= 1.66, < 4",)

# (module, class, api) of each patched class
TARGETS = (
    ("openai.resources.chat.completions", "Completions", "chat"),
    ("openai.resources.chat.completions", "AsyncCompletions", "chat"),
    ("openai.resources.responses", "Responses", "responses"),
    ("openai.resources.responses", "AsyncResponses", "responses"),
)
# The methods patched on each: `parse` (structured outputs) posts by itself, not through
# `create`; the `stream` helpers call `create` and are recorded there.
METHODS = ("create", "parse")
# Set while a patched method runs: a method that calls another one (an openai version whose
# `parse` goes through `create`) is recorded once, by the outer one.
_recording: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "spanscore_openai_recording", default=False
)

_FINISH = {"tool_calls": "tool_call", "function_call": "tool_call"}
_REQUEST_PARAMETERS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("seed", "gen_ai.request.seed"),
)


# --- pure helpers ------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _plain(value: Any) -> Any:
    """Request values (TypedDicts, pydantic models, iterables) as plain JSON-able data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:
            return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def request_attributes(api: str, kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(span name, attributes) of a `create(**kwargs)` call, before it is sent."""
    model = kwargs.get("model")
    model = model if isinstance(model, str) else None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
    }
    for key, attribute in _REQUEST_PARAMETERS:
        value = kwargs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[attribute] = value
    # Only lists are read: any other iterable (a generator) is left for the client alone.
    tools = kwargs.get("tools")
    if isinstance(tools, list | tuple):
        attributes["gen_ai.tool.definitions"] = _json(_plain(tools))
    policy = content_policy()
    if api == "chat":
        messages = kwargs.get("messages")
        inputs, _ = chat_messages(_plain(messages)) if isinstance(messages, list) else ([], [])
    else:
        items = kwargs.get("input")
        inputs = _responses_input(_plain(items)) if isinstance(items, str | list) else []
        instructions = kwargs.get("instructions")
        if isinstance(instructions, str) and instructions:
            attributes["gen_ai.system_instructions"] = policy.record(
                "messages", _json([{"type": "text", "content": instructions}])
            )
    if inputs:
        attributes["gen_ai.input.messages"] = policy.record("messages", _json(inputs))
    return (f"chat {model}" if model else "chat"), attributes


def chat_completion_output(
    completion: Any,
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Attributes of a Chat Completions result, and the tool calls it requested."""
    outputs: list[dict[str, Any]] = []
    calls: list[tuple[str, str, str]] = []
    reasons: list[str] = []
    for choice in get(completion, "choices") or []:
        messages, requested = chat_messages([get(choice, "message")])
        reason = get(choice, "finish_reason")
        reason = _FINISH.get(reason, reason) if isinstance(reason, str) else None
        if reason is None:
            reason = "tool_call" if requested else "stop"
        reasons.append(reason)
        for message in messages:
            message["finish_reason"] = reason
        outputs += messages
        calls += requested
    attributes = _response_attributes(completion)
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    if outputs:
        attributes["gen_ai.output.messages"] = content_policy().record("messages", _json(outputs))
    return attributes, calls


def responses_result_output(
    response: Any,
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Attributes of a Responses API result, and the function calls it requested."""
    outputs, calls = responses_output(_plain(get(response, "output")))
    attributes = _response_attributes(response)
    if outputs:
        attributes["gen_ai.response.finish_reasons"] = [outputs[0]["finish_reason"]]
        attributes["gen_ai.output.messages"] = content_policy().record("messages", _json(outputs))
    return attributes, calls


def _response_attributes(response: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.response.model": get(response, "model"),
        "gen_ai.response.id": get(response, "id"),
    }
    attributes.update(usage_attributes(get(response, "usage")))
    return {k: v for k, v in attributes.items() if isinstance(v, str | int)}


class ChatStreamAccumulator:
    """Chat Completions stream chunks folded back into one completion (as plain data)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.usage: Any = None
        self.choices: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        self.id = self.id or get(chunk, "id")
        self.model = self.model or get(chunk, "model")
        usage = get(chunk, "usage")
        if usage is not None:
            self.usage = usage
        for choice in get(chunk, "choices") or []:
            index = get(choice, "index", 0) or 0
            state = self.choices.setdefault(
                index, {"content": [], "tool_calls": {}, "finish_reason": None}
            )
            reason = get(choice, "finish_reason")
            if reason:
                state["finish_reason"] = reason
            delta = get(choice, "delta")
            if delta is None:
                continue
            content = get(delta, "content")
            if isinstance(content, str):
                state["content"].append(content)
            for call in get(delta, "tool_calls") or []:
                at = get(call, "index", 0) or 0
                known = state["tool_calls"].setdefault(at, {"id": None, "name": "", "args": []})
                known["id"] = known["id"] or get(call, "id")
                function = get(call, "function")
                name = get(function, "name")
                if isinstance(name, str):
                    known["name"] += name
                arguments = get(function, "arguments")
                if isinstance(arguments, str):
                    known["args"].append(arguments)

    def completion(self) -> dict[str, Any]:
        choices = []
        for index, state in sorted(self.choices.items()):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(state["content"]) or None,
            }
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "".join(c["args"])},
                }
                for _, c in sorted(state["tool_calls"].items())
            ]
            if calls:
                message["tool_calls"] = calls
            choices.append(
                {"index": index, "message": message, "finish_reason": state["finish_reason"]}
            )
        return {"id": self.id, "model": self.model, "usage": self.usage, "choices": choices}


# --- one model call ----------------------------------------------------------------------------


class ModelCall:
    """The span of one `create` call; every method is guarded and ends the span at most once."""

    def __init__(self, tracer: Tracer, api: str, instance: Any, kwargs: Mapping[str, Any]):
        self.api = api
        name, attributes = request_attributes(api, kwargs)
        attributes.update(_server_attributes(instance))
        self._unnamed = name == "chat"
        self.span: Span = tracer.start_span(
            name,
            kind=SpanKind.CLIENT,
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        self._token: object | None = None
        self._ended = False
        self._chunks: ChatStreamAccumulator | None = None
        self._final: Any = None

    def enter(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))

    def leave(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                log.debug("openai shim: could not detach the context", exc_info=True)

    def succeed(self, result: Any) -> None:
        if self._ended:
            return
        try:
            if self.api == "chat":
                attributes, calls = chat_completion_output(result)
            else:
                attributes, calls = responses_result_output(result)
            model = attributes.get("gen_ai.response.model")
            if model and self._unnamed:  # no model in the request: name it by the response's
                self.span.update_name(f"chat {model}")
            self.span.set_attributes({k: v for k, v in attributes.items() if v is not None})
            if calls:
                _tool.remember_requested_calls(calls)
            status = get(result, "status")
            if self.api == "responses" and status == "failed":
                error = get(result, "error")
                code = get(error, "code")
                self.span.set_attribute("error.type", code if isinstance(code, str) else "failed")
                self.span.set_status(Status(StatusCode.ERROR, get(error, "message")))
        except Exception:
            log.warning("openai shim: could not record a model response", exc_info=True)
        finally:
            self._end()

    def fail(self, exc: BaseException) -> None:
        if self._ended:
            return
        try:
            self.span.set_attribute("error.type", _tool.error_type(exc))
            self.span.set_status(Status(StatusCode.ERROR, str(exc) or None))
        except Exception:
            log.warning("openai shim: could not record a failed model call", exc_info=True)
        finally:
            self._end()

    # -- streams -----------------------------------------------------------------------------

    def observe(self, item: Any) -> None:
        try:
            if self.api == "chat":
                if self._chunks is None:
                    self._chunks = ChatStreamAccumulator()
                self._chunks.add(item)
            elif get(item, "type") in (
                "response.completed",
                "response.incomplete",
                "response.failed",
            ):
                self._final = get(item, "response")
        except Exception:
            log.warning("openai shim: could not read a stream event", exc_info=True)

    def stream_ended(self, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, StopIteration | StopAsyncIteration):
            self.fail(exc)
            return
        if self.api == "chat":
            result: Any = self._chunks.completion() if self._chunks is not None else None
        else:
            result = self._final
        if result is None:
            self._end()
        else:
            self.succeed(result)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self.span.end()


def _server_attributes(instance: Any) -> dict[str, Any]:
    try:
        url = instance._client.base_url
        return {"server.address": url.host, "server.port": url.port}
    except Exception:
        return {}


class StreamProxy:
    """A sync stream passed through; the span ends when it is exhausted, fails or is closed."""

    def __init__(self, stream: Any, call: ModelCall) -> None:
        self._stream = stream
        self._call = call

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            item = self._stream.__next__()
        except BaseException as exc:
            self._call.stream_ended(exc)
            raise
        self._call.observe(item)
        return item

    def __enter__(self) -> StreamProxy:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self._stream.__exit__(*exc_info)
        finally:
            self._call.stream_ended(exc_info[1])

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._call.stream_ended(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class AsyncStreamProxy:
    """An async stream passed through; the span ends when it is exhausted, fails or is closed."""

    def __init__(self, stream: Any, call: ModelCall) -> None:
        self._stream = stream
        self._call = call

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._stream.__anext__()
        except BaseException as exc:
            self._call.stream_ended(exc)
            raise
        self._call.observe(item)
        return item

    async def __aenter__(self) -> AsyncStreamProxy:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._stream.__aexit__(*exc_info)
        finally:
            self._call.stream_ended(exc_info[1])

    async def close(self) -> None:
        try:
            await self._stream.close()
        finally:
            self._call.stream_ended(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# --- the wrappers ------------------------------------------------------------------------------


def _inside_agents_model_span() -> bool:
    """True when the Agents SDK shim is active and the SDK's own model span is current: that
    call is recorded by the SDK shim already."""
    shim = sys.modules.get("spanscore.instrumentation.openai_agents")
    tracing = sys.modules.get("agents.tracing")
    if shim is None or tracing is None or shim.OpenAIAgentsInstrumentor._processor is None:
        return False
    span = tracing.get_current_span()
    return getattr(getattr(span, "span_data", None), "type", None) in ("response", "generation")


def _begin(tracer: Tracer, api: str, instance: Any, kwargs: Mapping[str, Any]) -> ModelCall | None:
    """The call's span, made current; None when it is not recorded (or our code failed)."""
    try:
        if _recording.get() or _model.recorded_by_framework.get() or _inside_agents_model_span():
            return None
        call = ModelCall(tracer, api, instance, kwargs)
        call.enter()
        return call
    except Exception:
        log.warning("openai shim: could not start a model-call span", exc_info=True)
        return None


def _after(call: ModelCall, result: Any, stream: bool, is_async: bool) -> Any:
    """The result to hand back: streams in their proxy; other results recorded now."""
    call.leave()
    if _is_raw_response(result):  # `with_raw_response` (LangChain's ChatOpenAI uses it)
        try:
            parsed = result.parse()  # parsed once: the client caches it for the caller
        except Exception:
            log.debug("openai shim: could not parse a raw response", exc_info=True)
            call.stream_ended(None)
            return result
        if stream:
            wrapped = _after(call, parsed, stream, is_async)
            if wrapped is not parsed:  # the caller's `.parse()` returns the cached stream
                try:
                    result._parsed_by_type[_raw_cache_key(result)] = wrapped
                except Exception:
                    log.debug("openai shim: raw stream not wrapped", exc_info=True)
            return result
        call.succeed(parsed)
        return result
    if stream:
        try:
            if is_async and hasattr(result, "__anext__"):
                return AsyncStreamProxy(result, call)
            if not is_async and hasattr(result, "__next__"):
                return StreamProxy(result, call)
        except Exception:
            log.warning("openai shim: could not wrap a stream", exc_info=True)
        call.stream_ended(None)
        return result
    call.succeed(result)
    return result


def _is_raw_response(result: Any) -> bool:
    return hasattr(result, "http_response") and callable(getattr(result, "parse", None))


def _raw_cache_key(result: Any) -> Any:
    return result._cast_to  # the key `parse()` caches its result under


def _wrap_sync(
    original: Callable[..., Any], api: str, tracer: Tracer, switch: Switch
) -> Callable[..., Any]:
    @functools.wraps(original)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(tracer, api, self, kwargs) if switch.on else None
        if call is None:
            return original(self, *args, **kwargs)
        token = _recording.set(True)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            call.leave()
            call.fail(exc)
            raise
        finally:
            _recording.reset(token)
        return _after(call, result, kwargs.get("stream") is True, is_async=False)

    create.__spanscore_original__ = original  # type: ignore[attr-defined]
    return create


def _wrap_async(
    original: Callable[..., Any], api: str, tracer: Tracer, switch: Switch
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(tracer, api, self, kwargs) if switch.on else None
        if call is None:
            return await original(self, *args, **kwargs)
        token = _recording.set(True)
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            call.leave()
            call.fail(exc)
            raise
        finally:
            _recording.reset(token)
        return _after(call, result, kwargs.get("stream") is True, is_async=True)

    create.__spanscore_original__ = original  # type: ignore[attr-defined]
    return create


# --- the instrumentor --------------------------------------------------------------------------


def supported_version() -> str | None:
    """The installed openai version when it is supported; None (logged) otherwise."""
    return _versions.supported_version(DISTRIBUTION, SUPPORTED, _instruments[0])


class OpenAIInstrumentor(SpanscoreInstrumentor):
    """Patches the client's `create` and `parse` methods; one per process (instances are one
    and the same, as for every `BaseInstrumentor`).

    `instrument()` a second time only warns; `uninstrument()` puts the originals back (see
    `SpanscoreInstrumentor`). Entry point: `spanscore_openai`.
    """

    instruments = _instruments
    _lock = threading.Lock()
    # (class, method) -> (original, our wrapper)
    _originals: dict[tuple[type, str], tuple[Any, Any]] = {}  # noqa: RUF012 - shared on purpose
    _switch = Switch()

    def _patch(self, tracer_provider: TracerProvider | None) -> bool:
        with self._lock:
            if OpenAIInstrumentor._originals:
                return True
            version = supported_version()
            if version is None:
                return False
            tracer = trace.get_tracer(
                "spanscore.instrumentation.openai_client",
                version,
                tracer_provider=tracer_provider,
                schema_url="https://opentelemetry.io/schemas/1.37.0",
            )
            import importlib

            switch = OpenAIInstrumentor._switch = Switch()
            for module_name, class_name, api in TARGETS:
                for method in METHODS:
                    try:
                        cls = getattr(importlib.import_module(module_name), class_name)
                        original = cls.__dict__[method]
                    except (ImportError, AttributeError, KeyError):
                        log.info("openai shim: %s.%s.%s not found", module_name, class_name, method)
                        continue
                    wrap = _wrap_async if class_name.startswith("Async") else _wrap_sync
                    wrapper = wrap(original, api, tracer, switch)
                    setattr(cls, method, wrapper)
                    OpenAIInstrumentor._originals[(cls, method)] = (original, wrapper)
            return bool(OpenAIInstrumentor._originals)

    def _unpatch(self) -> None:
        with self._lock:
            for (cls, method), (original, wrapper) in OpenAIInstrumentor._originals.items():
                if not restore(cls, method, wrapper, original, OpenAIInstrumentor._switch):
                    log.info(
                        "openai shim: %s.%s was wrapped again after us; ours is left in place, "
                        "switched off",
                        cls.__name__,
                        method,
                    )
            OpenAIInstrumentor._originals.clear()

    @property
    def is_instrumented(self) -> bool:
        return bool(OpenAIInstrumentor._originals)


__all__ = [
    "AsyncStreamProxy",
    "ChatStreamAccumulator",
    "OpenAIInstrumentor",
    "StreamProxy",
    "chat_completion_output",
    "request_attributes",
    "responses_result_output",
]
