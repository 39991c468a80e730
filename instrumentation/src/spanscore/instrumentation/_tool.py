"""`@tool`: `execute_tool` spans for the tool functions of a hand-written tool loop.

Usage::

    from spanscore.instrumentation import tool

    @tool
    def get_order(order_id: str) -> dict: ...

    @tool(name="search")                     # another tool name; async functions too
    async def search_products(query: str) -> list: ...

    with tool("cancel_order", call_id=call.id, arguments=args) as t:
        t.result = store.cancel_order(**args)

Each execution is an `execute_tool {name}` span (`gen_ai.tool.name`, `gen_ai.tool.type`,
`gen_ai.tool.call.id`, `gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` as JSON when
they serialise, as text otherwise), current while the tool runs. A raised exception sets
`error.type` (its fully qualified class name) and status ERROR, and is re-raised unchanged.
The content policy of `instrument()` applies (kinds `tool_arguments`, `tool_results`).

The call id: given (`call_id=`), or recovered from the model call that requested the tool. The
OpenAI client shim remembers the calls each model response requested in a context-local,
bounded registry; an execution takes the first unclaimed call of the same tool name, with equal
arguments when several are pending (parallel calls of one tool), else in order. The registry
follows asyncio tasks and, while instrumented, threads (the context is copied, the registry is
shared).

Without `instrument()` the spans go to the global tracer provider (a no-op one by default).
Telemetry never breaks the tool: our part is guarded and logs.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from ._content import content_policy

log = logging.getLogger("spanscore.instrumentation")

F = TypeVar("F", bound=Callable[..., Any])
ToolType = Literal["function", "extension", "datastore"]

MAX_PENDING = 256  # requested calls remembered per context; the oldest go first

SCOPE = "spanscore.instrumentation"


# --- which tracer ------------------------------------------------------------------------------

_provider: TracerProvider | None = None
_tracer: Tracer | None = None


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """The provider our tool spans go to (`instrument()` sets it; None: the global one)."""
    global _provider, _tracer
    _provider, _tracer = provider, None


def tracer() -> Tracer:
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(SCOPE, tracer_provider=_provider)
    return _tracer


# --- pure helpers ------------------------------------------------------------------------------


def as_json_text(value: Any) -> str | None:
    """An attribute value: strings as they are, JSON-serialisable values as JSON, pydantic
    models as their JSON, anything else as its `str`."""
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            try:
                return json.dumps(dump(mode="json"), ensure_ascii=False)
            except Exception:
                pass
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(value)


def error_type(exc: BaseException) -> str:
    """`error.type` of an exception: its fully qualified class name (builtins unqualified)."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _parsed(arguments: Any) -> Any:
    if isinstance(arguments, str | bytes):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


# --- the calls models requested --------------------------------------------------------------


@dataclass
class RequestedCall:
    call_id: str
    name: str
    arguments: Any  # parsed JSON (the text when it is not JSON)


class PendingCalls:
    """Requested, not yet executed tool calls (bounded; shared by threads of one context)."""

    def __init__(self, maxlen: int = MAX_PENDING) -> None:
        self._lock = threading.Lock()
        self._calls: deque[RequestedCall] = deque(maxlen=maxlen)

    def add(self, calls: list[tuple[str, str, str]]) -> None:
        with self._lock:
            self._calls.extend(RequestedCall(i, n, _parsed(a)) for i, n, a in calls)

    def claim(self, name: str, arguments: Any = None) -> str | None:
        """The call id of the first pending call of `name` (with equal arguments when several
        are pending), removed; None when there is none."""
        with self._lock:
            candidates = [c for c in self._calls if c.name == name]
            if not candidates:
                return None
            chosen = candidates[0]
            if len(candidates) > 1 and arguments is not None:
                wanted = _parsed(arguments)
                chosen = next((c for c in candidates if c.arguments == wanted), chosen)
            self._calls.remove(chosen)
            return chosen.call_id

    def __len__(self) -> int:
        return len(self._calls)


_pending: contextvars.ContextVar[PendingCalls | None] = contextvars.ContextVar(
    "spanscore_pending_tool_calls", default=None
)


# A framework shim that records a tool run itself (LangChain's callback handler sees the run
# before the function is called) marks the run here: a `@tool` function it runs under that
# name is then not recorded a second time. The check says whether the run is still open, so a
# mark left behind (a callback that ended in another context) can never hide a later call.
_framework_run: contextvars.ContextVar[tuple[str, Callable[[], bool]] | None] = (
    contextvars.ContextVar("spanscore_framework_tool_run", default=None)
)


def framework_run_started(
    name: str, is_open: Callable[[], bool]
) -> contextvars.Token[tuple[str, Callable[[], bool]] | None]:
    """Called by a framework shim as it starts recording the tool run `name`."""
    return _framework_run.set((name, is_open))


def framework_run_ended(token: contextvars.Token[tuple[str, Callable[[], bool]] | None]) -> None:
    # Ended in another context (ValueError): the open check covers the mark left there.
    with contextlib.suppress(ValueError):
        _framework_run.reset(token)


def recorded_by_framework(name: str) -> bool:
    """True inside a framework's still-open recording of a tool run of this name."""
    run = _framework_run.get()
    return run is not None and run[0] == name and run[1]()


def remember_requested_calls(calls: list[tuple[str, str, str]]) -> None:
    """Called by the client shim with (call_id, name, arguments text) of a model response."""
    if not calls:
        return
    pending = _pending.get()
    if pending is None:
        pending = PendingCalls()
        _pending.set(pending)
    pending.add(calls)


def claim_call_id(name: str, arguments: Any = None) -> str | None:
    pending = _pending.get()
    return pending.claim(name, arguments) if pending is not None else None


def forget_requested_calls() -> None:
    """Drop this context's pending calls (say, when a conversation ends)."""
    _pending.set(None)


def pending_calls() -> PendingCalls | None:
    """This context's registry (for tests and diagnostics)."""
    return _pending.get()


# --- the span ----------------------------------------------------------------------------------


class ToolExecution:
    """One tool execution: a context manager (sync and async) and, unentered, a decorator.

    Set `result` inside the block to record it; `call_id` is the id in use after entering.
    """

    def __init__(
        self,
        name: str,
        *,
        call_id: str | None = None,
        arguments: Any = None,
        tool_type: ToolType = "function",
        description: str | None = None,
    ) -> None:
        self.name = name
        self.call_id = call_id
        self.arguments = arguments
        self.tool_type = tool_type
        self.description = description
        self.result: Any = None
        self.span: Span | None = None
        self._token: object | None = None

    # -- as a decorator: `@tool("name")` ---------------------------------------------------

    def __call__(self, fn: F) -> F:
        return _decorate(fn, self.name, self.tool_type, self.description)

    # -- as a context manager ----------------------------------------------------------------

    def __enter__(self) -> ToolExecution:
        try:
            self._start()
        except Exception:
            log.warning("spanscore tool: could not start the span of %s", self.name, exc_info=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(exc)  # never suppresses the user's exception

    async def __aenter__(self) -> ToolExecution:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(exc)

    def _start(self) -> None:
        if self.call_id is None:
            self.call_id = claim_call_id(self.name, self.arguments)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.name,
            "gen_ai.tool.type": self.tool_type,
        }
        if self.call_id is not None:
            attributes["gen_ai.tool.call.id"] = self.call_id
        if self.description:
            attributes["gen_ai.tool.description"] = self.description
        span = tracer().start_span(
            f"execute_tool {self.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        self.span = span
        if span.is_recording() and self.arguments is not None:
            recorded = content_policy().record("tool_arguments", as_json_text(self.arguments))
            if recorded is not None:
                span.set_attribute("gen_ai.tool.call.arguments", recorded)
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def _end(self, exc: BaseException | None) -> None:
        span, token = self.span, self._token
        self.span, self._token = None, None
        if span is None:
            return
        try:
            if token is not None:
                otel_context.detach(token)  # type: ignore[arg-type]
            if span.is_recording():
                if exc is not None:
                    span.set_attribute("error.type", error_type(exc))
                    span.set_status(Status(StatusCode.ERROR, str(exc) or None))
                    if isinstance(exc, Exception):
                        span.record_exception(exc)
                elif self.result is not None:
                    recorded = content_policy().record("tool_results", as_json_text(self.result))
                    if recorded is not None:
                        span.set_attribute("gen_ai.tool.call.result", recorded)
        except Exception:
            log.warning("spanscore tool: could not record %s", self.name, exc_info=True)
        finally:
            span.end()


def _bound_arguments(signature: inspect.Signature | None, args: Any, kwargs: Any) -> Any:
    """The call's arguments by parameter name (as passed: defaults are not added)."""
    if signature is None:
        return {"args": list(args), **kwargs} if args else dict(kwargs)
    bound = signature.bind_partial(*args, **kwargs)
    out: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        if key in ("self", "cls"):
            continue
        kind = signature.parameters[key].kind
        if kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, Mapping):
            out.update(value)
        else:
            out[key] = list(value) if kind is inspect.Parameter.VAR_POSITIONAL else value
    return out


def _decorate(fn: F, name: str, tool_type: ToolType, description: str | None) -> F:
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None

    def execution(args: Any, kwargs: Any) -> ToolExecution:
        try:
            arguments = _bound_arguments(signature, args, kwargs)
        except Exception:  # a call that does not fit the signature fails in the tool itself
            arguments = None
        return ToolExecution(
            name, arguments=arguments, tool_type=tool_type, description=description
        )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            if recorded_by_framework(name):
                return await fn(*args, **kwargs)
            with execution(args, kwargs) as t:
                t.result = await fn(*args, **kwargs)
                return t.result

        return run_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if recorded_by_framework(name):
            return fn(*args, **kwargs)
        with execution(args, kwargs) as t:
            t.result = fn(*args, **kwargs)
            return t.result

    return run  # type: ignore[return-value]


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    tool_name: str | None = None,
    /,
    *,
    call_id: str | None = None,
    arguments: Any = None,
    tool_type: ToolType = "function",
    description: str | None = None,
    name: str | None = None,
) -> ToolExecution: ...


def tool(
    fn_or_name: Any = None,
    /,
    *,
    call_id: str | None = None,
    arguments: Any = None,
    tool_type: ToolType = "function",
    description: str | None = None,
    name: str | None = None,
) -> Any:
    """`@tool`, `@tool("name")`, `@tool(name=...)`, or `with tool("name", ...) as t:`."""
    if callable(fn_or_name):
        return _decorate(fn_or_name, name or fn_or_name.__name__, tool_type, description)
    tool_name = fn_or_name or name
    if not isinstance(tool_name, str) or not tool_name:
        raise TypeError("tool() needs a function to decorate or a tool name")
    return ToolExecution(
        tool_name,
        call_id=call_id,
        arguments=arguments,
        tool_type=tool_type,
        description=description,
    )
