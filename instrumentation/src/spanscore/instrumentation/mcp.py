"""MCP client shim: each `ClientSession.call_tool` as an `execute_tool` span.

Usage::

    from spanscore.instrumentation.mcp import MCPInstrumentor

    MCPInstrumentor().instrument(tracer_provider=provider)  # default: the global one
    result = await session.call_tool("get_order", {"order_id": "ORD-1"})

`spanscore.instrumentation.instrument()` does this itself when `mcp` is installed.

`mcp.ClientSession.call_tool` is patched (so `mcp.Client.call_tool`, which goes through it, is
covered too). Each call is an `execute_tool {tool}` span, current while the call runs, with
`gen_ai.tool.name`, `gen_ai.tool.type=extension`, `gen_ai.tool.call.arguments` (JSON),
`gen_ai.tool.call.result` (the structured content as JSON when the server sent one, else the
text content blocks joined), and the server: `mcp.server.name` (and `mcp.server.version`)
from the session's initialize / discover result. A call id is taken from the model's requested
calls when the OpenAI client shim saw them (see `spanscore.instrumentation.tool`). A result
with `isError` sets `error.type=tool_error` and status ERROR (the call still returns it
normally); an exception sets `error.type` (its class) and status ERROR and is re-raised
unchanged. The content policy applies (kinds `tool_arguments`, `tool_results`).

Supported: mcp >= 1.0, < 3 (tested with 2.3.0).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import _versions
from ._content import content_policy
from ._instrumentor import SpanscoreInstrumentor, Switch, restore
from ._tool import as_json_text, claim_call_id, error_type

log = logging.getLogger("spanscore.instrumentation")

DISTRIBUTION = "mcp"
SUPPORTED = ((1, 0), (3, 0))  # [min, max)
_instruments = ("mcp >= 1.0, < 3",)


def _field(obj: Any, *names: str) -> Any:
    """The first present attribute (mcp 2 uses snake_case, mcp 1 camelCase)."""
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def server_info(session: Any) -> tuple[str | None, str | None]:
    """(name, version) of the server a session talks to, when it has said."""
    info = _field(session, "server_info")
    if info is None:
        result = _field(session, "initialize_result", "_initialize_result")
        info = _field(result, "server_info", "serverInfo")
    name, version = _field(info, "name"), _field(info, "version")
    return (
        name if isinstance(name, str) and name else None,
        version if isinstance(version, str) and version else None,
    )


def result_text(result: Any) -> str | None:
    """A tool result as an attribute: its structured content as JSON, else its text blocks."""
    structured = _field(result, "structured_content", "structuredContent")
    if structured is not None:
        return as_json_text(structured)
    texts = [
        block.text
        for block in _field(result, "content") or []
        if isinstance(getattr(block, "text", None), str)
    ]
    return "\n".join(texts) if texts else None


def is_error(result: Any) -> bool:
    return bool(_field(result, "is_error", "isError"))


def _call_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    name = args[0] if args else kwargs.get("name")
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    return name, arguments


def _start(tracer: Tracer, session: Any, name: Any, arguments: Any) -> tuple[Span, object]:
    server, version = server_info(session)
    call_id = claim_call_id(name, arguments) if isinstance(name, str) else None
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "extension",
        "gen_ai.tool.call.id": call_id,
        "mcp.server.name": server,
        "mcp.server.version": version,
        "gen_ai.tool.call.arguments": content_policy().record(
            "tool_arguments", json.dumps(arguments if arguments is not None else {}, default=str)
        ),
    }
    span = tracer.start_span(
        f"execute_tool {name}",
        kind=SpanKind.CLIENT,
        attributes={k: v for k, v in attributes.items() if v is not None},
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    return span, token


def _finish(span: Span, result: Any) -> None:
    try:
        recorded = content_policy().record("tool_results", result_text(result))
        if recorded is not None:
            span.set_attribute("gen_ai.tool.call.result", recorded)
        if is_error(result):
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, result_text(result) or "tool error"))
    except Exception:
        log.warning("mcp shim: could not record a tool result", exc_info=True)


def _wrap(original: Callable[..., Any], tracer: Tracer, switch: Switch) -> Callable[..., Any]:
    @functools.wraps(original)
    async def call_tool(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not switch.on:
            return await original(self, *args, **kwargs)
        try:
            name, arguments = _call_arguments(args, kwargs)
            span, token = _start(tracer, self, name, arguments)
        except Exception:
            log.warning("mcp shim: could not start a tool span", exc_info=True)
            return await original(self, *args, **kwargs)
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:
            try:
                span.set_attribute("error.type", error_type(exc))
                span.set_status(Status(StatusCode.ERROR, str(exc) or None))
            except Exception:
                log.warning("mcp shim: could not record a failed call", exc_info=True)
            raise
        else:
            _finish(span, result)
            return result
        finally:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                log.debug("mcp shim: could not detach the context", exc_info=True)
            span.end()

    call_tool.__spanscore_original__ = original  # type: ignore[attr-defined]
    return call_tool


def supported_version() -> str | None:
    """The installed mcp version when it is supported; None (logged) otherwise."""
    return _versions.supported_version(DISTRIBUTION, SUPPORTED, _instruments[0])


class MCPInstrumentor(SpanscoreInstrumentor):
    """Patches `ClientSession.call_tool`; one per process. Entry point: `spanscore_mcp`."""

    instruments = _instruments
    _lock = threading.Lock()
    _patched: tuple[Any, Any] | None = None  # (original, our wrapper)
    _switch = Switch()

    def _patch(self, tracer_provider: TracerProvider | None) -> bool:
        with self._lock:
            if MCPInstrumentor._patched is not None:
                return True
            version = supported_version()
            if version is None:
                return False
            from mcp.client.session import ClientSession

            tracer = trace.get_tracer(
                "spanscore.instrumentation.mcp",
                version,
                tracer_provider=tracer_provider,
                schema_url="https://opentelemetry.io/schemas/1.37.0",
            )
            original = ClientSession.__dict__["call_tool"]
            switch = MCPInstrumentor._switch = Switch()
            wrapper = _wrap(original, tracer, switch)
            ClientSession.call_tool = wrapper  # type: ignore[method-assign]
            MCPInstrumentor._patched = (original, wrapper)
            return True

    def _unpatch(self) -> None:
        with self._lock:
            if MCPInstrumentor._patched is None:
                return
            from mcp.client.session import ClientSession

            original, wrapper = MCPInstrumentor._patched
            if not restore(ClientSession, "call_tool", wrapper, original, MCPInstrumentor._switch):
                log.info("mcp shim: call_tool was wrapped again after us; ours is switched off")
            MCPInstrumentor._patched = None

    @property
    def is_instrumented(self) -> bool:
        return MCPInstrumentor._patched is not None


__all__ = ["MCPInstrumentor", "is_error", "result_text", "server_info"]
