"""Conversation identity: stamp a conversation id (and attributes) on every span inside a block.

`conversation("conv-123", user_id=..., scenario_id=..., **attributes)` puts the values in
OpenTelemetry baggage, so they follow the context: into nested calls, asyncio tasks (which copy
the context), and other services (W3C `baggage` header, with the default propagators). The
`ConversationSpanProcessor` that `instrument()` installs copies them onto every span started
in that context, whoever starts it: our shims or any other instrumentation on the provider.
`ConversationInstrumentor` installs it (and carries the context into threads): `instrument()`
always, `opentelemetry-instrument` (entry point `spanscore_conversation`) when
SPANSCORE_CONVERSATION_CONTEXT is true.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import baggage, context, trace
from opentelemetry.context import Context

# The module says `# type: ignore` of itself: to mypy it has no attributes.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import _threads, _tool
from ._content import flag

log = logging.getLogger("spanscore.instrumentation")

CONVERSATION_ID = "gen_ai.conversation.id"
_PREFIX = "spanscore."  # baggage keys we own carry this prefix; the span attribute does not
_NAMED = {"user_id": "user.id", "scenario_id": "scenario.id"}

F = TypeVar("F", bound=Callable[..., Any])


class conversation:  # noqa: N801 - used like a function: `with conversation("c-1"):`
    """Sync and async context manager, and decorator, for one conversation's work."""

    def __init__(
        self,
        conversation_id: str,
        *,
        user_id: str | None = None,
        scenario_id: str | None = None,
        **attributes: str | int | float | bool,
    ) -> None:
        values: dict[str, str] = {CONVERSATION_ID: str(conversation_id)}
        named = {"user_id": user_id, "scenario_id": scenario_id}
        for key, attribute in _NAMED.items():
            if named[key] is not None:
                values[attribute] = str(named[key])
        for key, extra in attributes.items():
            values[key] = str(extra)
        self.values = values
        self._tokens: list[tuple[contextvars.Token[Context], contextvars.Token[Any]]] = []

    def __enter__(self) -> conversation:
        ctx = context.get_current()
        for key, value in self.values.items():
            ctx = baggage.set_baggage(_PREFIX + key, value, ctx)
        # A fresh registry of requested tool calls (see `tool`), shared by the threads and
        # asyncio tasks started inside: a model call in one and its tools in another still link.
        pending = _tool._pending.set(_tool.PendingCalls())
        self._tokens.append((context.attach(ctx), pending))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, pending = self._tokens.pop()
        context.detach(token)
        _tool._pending.reset(pending)

    async def __aenter__(self) -> conversation:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with conversation.__new__(conversation)._like(self):
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with conversation.__new__(conversation)._like(self):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    def _like(self, other: conversation) -> conversation:
        """A fresh manager with the same values (a decorated function may run concurrently)."""
        self.values = other.values
        self._tokens = []
        return self


# A conversation id a framework run announces (LangChain's thread id, set by its shim while a
# model runs): stamped on spans that carry no conversation of their own.
_ambient: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "spanscore_ambient_conversation", default=None
)


def set_ambient_conversation(conversation_id: str | None) -> contextvars.Token[str | None]:
    return _ambient.set(conversation_id)


def reset_ambient_conversation(token: contextvars.Token[str | None]) -> None:
    with contextlib.suppress(ValueError):  # set in another context: it ends with that one
        _ambient.reset(token)


def current_values(ctx: Context | None = None) -> dict[str, str]:
    """The conversation values in `ctx` (default: the current context)."""
    return {
        key[len(_PREFIX) :]: str(value)
        for key, value in baggage.get_all(ctx).items()
        if key.startswith(_PREFIX)
    }


class ConversationSpanProcessor(SpanProcessor):
    """Copies the conversation values of the span's context onto the span when it starts."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            values = current_values(parent_context)
            if CONVERSATION_ID not in values:
                ambient = _ambient.get()
                if ambient is not None and not (span.attributes or {}).get(CONVERSATION_ID):
                    values[CONVERSATION_ID] = ambient
            if values:
                span.set_attributes(values)
        except Exception:  # telemetry must never break the agent
            log.debug("could not stamp the conversation on a span", exc_info=True)

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


# --- on the provider: the processor, and the context carried into threads ----------------------

CONVERSATION_CONTEXT = "SPANSCORE_CONVERSATION_CONTEXT"


def remove_span_processors(provider: Any, processors: tuple[SpanProcessor, ...]) -> None:
    """Take `processors` off an SDK provider (which has no public way to remove one)."""
    multi = getattr(provider, "_active_span_processor", None)
    procs = getattr(multi, "_span_processors", None)
    if multi is not None and isinstance(procs, tuple):
        # Its processor list is an immutable tuple, swapped under its own lock.
        with multi._lock:
            multi._span_processors = tuple(p for p in procs if p not in processors)


class ConversationInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Puts a `ConversationSpanProcessor` on the tracer provider and carries the context into
    threads (see `_threads`), so that `conversation(...)`, the `spanscore.*` baggage an upstream
    service sent, and LangChain's thread id reach every span. Entry point: `spanscore_conversation`.

    `instrument()` does it when `enabled` is true, or (not given, as under
    `opentelemetry-instrument`) when `SPANSCORE_CONVERSATION_CONTEXT` is true; otherwise it
    changes nothing and returns False. The provider is `tracer_provider`, else the global one,
    which must be an SDK `TracerProvider`. `spanscore.instrumentation.instrument()` does it
    always, on its provider, before it adds its exporter. `uninstrument()` takes both away.
    """

    _installed: tuple[Any, ConversationSpanProcessor] | None = None  # (provider, processor)

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # OpenTelemetry's SDK only

    def instrument(self, **kwargs: Any) -> bool:
        if self.is_instrumented_by_opentelemetry:
            super().instrument(**kwargs)  # warns, changes nothing
            return True
        super().instrument(**kwargs)
        if ConversationInstrumentor._installed is None:
            self._is_instrumented_by_opentelemetry = False
        return ConversationInstrumentor._installed is not None

    def _instrument(self, **kwargs: Any) -> None:
        enabled = kwargs.get("enabled")
        if enabled is None:
            enabled = flag(CONVERSATION_CONTEXT, default=False)
        if not enabled:
            return
        provider: Any = kwargs.get("tracer_provider") or trace.get_tracer_provider()
        if not callable(getattr(provider, "add_span_processor", None)):
            log.warning(
                "%s is on, but the tracer provider is not OpenTelemetry's SDK provider (%s): "
                "conversation ids are not stamped on spans",
                CONVERSATION_CONTEXT,
                type(provider).__name__,
            )
            return
        processor = ConversationSpanProcessor()
        provider.add_span_processor(processor)
        _threads.patch()
        ConversationInstrumentor._installed = (provider, processor)

    def _uninstrument(self, **kwargs: Any) -> None:
        installed, ConversationInstrumentor._installed = ConversationInstrumentor._installed, None
        if installed is not None:
            remove_span_processors(installed[0], (installed[1],))
            _threads.restore()
