"""The TracerProvider and exporter that `instrument()` sets up."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import _tool
from ._content import ContentPolicy, Redactor, set_content_policy
from ._conversation import ConversationInstrumentor, remove_span_processors

log = logging.getLogger("spanscore.instrumentation")

# (importable package, our shim module, its instrumentor): activated when the package is there
SHIMS = (
    ("agents", "openai_agents", "OpenAIAgentsInstrumentor"),
    ("openai", "openai_client", "OpenAIInstrumentor"),
    ("langchain_core", "langchain", "LangChainInstrumentor"),
    ("mcp", "mcp", "MCPInstrumentor"),
)

_lock = threading.Lock()
_state: dict[str, Any] = {}
# Set by `redirect()`: where `instrument()` exports, whatever it is told.
_route: dict[str, str] = {}
_exit_handler_registered = False

# While the exporter retries one batch against a collector that refuses (its queue is full,
# it restarts), the SDK's queue keeps filling. With the SDK's defaults (2,048 spans, 10 s per
# export) a few seconds of refusals dropped a third to a half of the spans of busy agents.
# A larger queue holds more finished spans in memory during an outage (at most this many,
# a few KiB each) and drops none in the meantime; a longer export timeout lets the exporter
# go through its retries (it honours Retry-After / RetryInfo) before giving a batch up.
# The standard variables, when set, win.
QUEUE_SIZE = 8192
EXPORT_TIMEOUT_S = 30.0
# What the process may spend, when it ends (or `uninstrument()` is called), sending the spans
# it still holds. Past it, an unreachable collector costs no more: what is left is dropped, and
# said so once. SPANSCORE_EXIT_TIMEOUT_S overrides.
EXIT_TIMEOUT_S = 5.0


def _exit_timeout(explicit: float | None) -> float:
    if explicit is not None:
        return max(0.0, explicit)
    text = os.environ.get("SPANSCORE_EXIT_TIMEOUT_S", "").strip()
    if text:
        try:
            return max(0.0, float(text))
        except ValueError:
            log.warning(
                "SPANSCORE_EXIT_TIMEOUT_S=%r is not a number of seconds; using %s",
                text,
                EXIT_TIMEOUT_S,
            )
    return EXIT_TIMEOUT_S


class _ClosableExporter(SpanExporter):
    """The exporter, with a way out: `abandon()` stops its retries (through its own shutdown)
    and makes it refuse what comes after, counting the spans it did not send."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.unsent = 0
        self.sending = 0  # the batch an export holds right now
        self._abandoned = threading.Event()
        self._shut = threading.Lock()
        self._is_shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._abandoned.is_set():
            self.unsent += len(spans)
            return SpanExportResult.FAILURE
        self.sending = len(spans)
        try:
            result = self.inner.export(spans)
        finally:
            self.sending = 0
        if result is not SpanExportResult.SUCCESS:
            self.unsent += len(spans)
        return result

    def abandon(self) -> None:
        self._abandoned.set()
        self.shutdown()

    def shutdown(self) -> None:
        with self._shut:
            if self._is_shut:
                return
            self._is_shut = True
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _queued(processor: BatchSpanProcessor) -> int:
    """Spans still waiting in the processor's queue (0 where the SDK does not say)."""
    queue = getattr(getattr(processor, "_batch_processor", None), "_queue", None)
    try:
        return len(queue) if queue is not None else 0
    except TypeError:
        return 0


def _batch_settings() -> dict[str, Any]:
    if os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE"):
        return {}
    return {"max_queue_size": QUEUE_SIZE}


def _export_timeout() -> float | None:
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TIMEOUT"
    ):
        return None
    return EXPORT_TIMEOUT_S


def _protocol(explicit: str | None) -> str:
    value = (
        explicit
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    return value.strip().lower()


def _exporter(protocol: str, endpoint: str | None, headers: dict[str, str] | None) -> SpanExporter:
    """The OTLP exporter; its `_endpoint` says where it sends (for the exit message)."""
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise RuntimeError(
                "OTLP/gRPC export needs `pip install spanscore-instrumentation[grpc]`"
            ) from exc
        if endpoint is None and not (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        ):
            endpoint = "http://127.0.0.1:4317"
        return GrpcExporter(endpoint=endpoint, headers=headers, timeout=_export_timeout())
    if protocol not in ("http/protobuf", "http"):
        raise ValueError(f"unsupported OTLP protocol {protocol!r}: use http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint is None and not (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        endpoint = "http://127.0.0.1:4318/v1/traces"
    elif endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=_export_timeout())


@contextlib.contextmanager
def redirect(endpoint: str, *, protocol: str = "http/protobuf") -> Iterator[None]:
    """While inside, `instrument()` exports to `endpoint` over `protocol`, whatever endpoint,
    protocol or exporter it is given; the rest of its set-up stays the caller's: the service
    name, the tracer provider and its resource, content capture and redaction.

    `spanscore simulate` imports an agent inside it, so that the agent's own `instrument()`
    call keeps its set-up (the simulated spans look like production's) while the spans go to
    the simulation's collector, not production's. An `instrument()` made before the block is
    left as it is."""
    with _lock:
        previous = dict(_route)
        _route.clear()
        _route.update(endpoint=endpoint, protocol=protocol)
    try:
        yield
    finally:
        with _lock:
            _route.clear()
            _route.update(previous)


def instrument(
    *,
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: dict[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
    exporter: SpanExporter | None = None,
    capture_tool_arguments: bool | None = None,
    capture_tool_results: bool | None = None,
    capture_messages: bool | None = None,
    redact: Sequence[str] | Redactor | None = None,
    exit_timeout_s: float | None = None,
) -> TracerProvider:
    """Send this process's spans to a spanscore collector; returns the provider in use.

    Content (tool arguments, tool results, model messages) is captured by default; switch a
    kind off here or with `SPANSCORE_CAPTURE_*`, and redact with key patterns
    (``redact=["email", "card_number"]``) or a callable ``(kind, value) -> value``.

    With `tracer_provider` (or an SDK provider already installed globally) the exporter is added
    to it; otherwise a new provider is created and made global. A second call does nothing and
    returns the same provider.

    Export survives a collector that refuses for a few seconds: the batch queue holds
    `QUEUE_SIZE` spans (`OTEL_BSP_MAX_QUEUE_SIZE` overrides; the SDK's default is 2,048) and
    an export retries for up to `EXPORT_TIMEOUT_S` seconds (`OTEL_EXPORTER_OTLP_TIMEOUT`
    overrides; the SDK's is 10). The price is memory while the collector is away.

    Ending is bounded: `uninstrument()`, and the end of the process, spend at most
    `exit_timeout_s` (default `EXIT_TIMEOUT_S`, 5 s; `SPANSCORE_EXIT_TIMEOUT_S`) sending the
    spans still held; past it, what is left is dropped and a warning says how much and where
    it should have gone.
    """
    with _lock:
        if _state:
            log.warning("spanscore.instrumentation is already instrumented; ignoring")
            provider: TracerProvider = _state["provider"]
            return provider
        if _route:  # `redirect()`: the spans go there, the rest of the set-up is the caller's
            endpoint, protocol, exporter = _route["endpoint"], _route["protocol"], None
        current = trace.get_tracer_provider()
        owned = False
        if tracer_provider is not None:
            provider = tracer_provider
        elif isinstance(current, TracerProvider):
            provider = current
        else:
            attributes = {"service.name": service_name} if service_name else {}
            provider = TracerProvider(resource=Resource.create(attributes))
            trace.set_tracer_provider(provider)
            owned = True
        set_content_policy(
            ContentPolicy.from_environment(
                capture_tool_arguments=capture_tool_arguments,
                capture_tool_results=capture_tool_results,
                capture_messages=capture_messages,
                redact=redact,
            )
        )
        # The conversation processor (first: it stamps before any exporter sees the span) and
        # the context carried into threads.
        ConversationInstrumentor().instrument(tracer_provider=provider, enabled=True)
        inner = exporter or _exporter(_protocol(protocol), endpoint, headers)
        closable = _ClosableExporter(inner, str(getattr(inner, "_endpoint", "") or "the collector"))
        processor = BatchSpanProcessor(closable, **_batch_settings())
        provider.add_span_processor(processor)
        _state.update(
            provider=provider,
            processor=processor,
            exporter=closable,
            owned=owned,
            exit_timeout_s=_exit_timeout(exit_timeout_s),
        )
        global _exit_handler_registered
        if not _exit_handler_registered:
            # After the SDK's own handler, so it runs first (atexit is last in, first out).
            atexit.register(_uninstrument_at_exit)
            _exit_handler_registered = True
        _tool.use_tracer_provider(provider)  # @tool spans go where the shims' spans go
        for package, module, instrumentor in SHIMS:
            if importlib.util.find_spec(package) is None:  # the framework is not installed
                continue
            try:
                shim = importlib.import_module(f"{__package__}.{module}")
                # The shim checks the version itself (and says why it skips); the content
                # policy is the one set above.
                getattr(shim, instrumentor)().instrument(
                    tracer_provider=provider, skip_dep_check=True, process_setup=False
                )
            except Exception:
                log.warning("could not instrument %s", package, exc_info=True)
        return provider


def is_instrumented() -> bool:
    return bool(_state)


def _uninstrument_at_exit() -> None:
    if _state:
        uninstrument()


def _close(processor: BatchSpanProcessor, exporter: _ClosableExporter, timeout_s: float) -> None:
    """Send what the processor holds, for at most `timeout_s`; then give the rest up (its
    retries stopped), and say once what was not sent."""
    done = threading.Event()

    def close() -> None:
        try:
            processor.force_flush()
            processor.shutdown()  # type: ignore[no-untyped-call]
        except Exception:
            log.warning("flushing the last spans failed", exc_info=True)
        finally:
            done.set()

    # A thread, so that the wait is ours to bound: the SDK's flush ignores its timeout.
    threading.Thread(target=close, name="spanscore-exit-flush", daemon=True).start()
    if not done.wait(timeout_s):
        left = _queued(processor)
        exporter.abandon()
        done.wait(1.0)
        unsent = exporter.unsent + exporter.sending + left
        log.warning(
            "spanscore.instrumentation: %s did not take the last spans within %g s "
            "(SPANSCORE_EXIT_TIMEOUT_S); %d span(s) not sent",
            exporter.endpoint,
            timeout_s,
            unsent,
        )
    elif exporter.unsent:
        log.warning(
            "spanscore.instrumentation: %d span(s) could not be sent to %s",
            exporter.unsent,
            exporter.endpoint,
        )


def uninstrument(timeout_millis: int | None = None) -> None:
    """Flush and detach what `instrument()` added. The global provider stays (OpenTelemetry
    allows setting it only once), but our exporter no longer receives its spans.

    Flushing takes at most `timeout_millis` (default: the exit timeout `instrument()` was
    given, 5 s unless set); what is not sent by then is dropped, with a warning."""
    with _lock:
        if not _state:
            return
        for package, module, instrumentor in SHIMS:
            shim = sys.modules.get(f"{__package__}.{module}")
            if shim is not None:  # loaded (by instrument() or the application): undo it
                try:
                    shim_instrumentor = getattr(shim, instrumentor)()
                    if shim_instrumentor.is_instrumented_by_opentelemetry:
                        shim_instrumentor.uninstrument()
                except Exception:
                    log.warning("could not uninstrument %s", package, exc_info=True)
        _tool.use_tracer_provider(None)
        processor: BatchSpanProcessor = _state["processor"]
        timeout_s = (
            timeout_millis / 1000 if timeout_millis is not None else _state["exit_timeout_s"]
        )
        _close(processor, _state["exporter"], timeout_s)
        remove_span_processors(_state["provider"], (processor,))
        conversations = ConversationInstrumentor()
        if conversations.is_instrumented_by_opentelemetry:
            conversations.uninstrument()
        _state.clear()
        set_content_policy(ContentPolicy())
