"""spanscore.instrumentation: one call sends spans to the collector; light on dependencies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import spanscore.instrumentation as instrumentation
from spanscore.collector import Collector

from .conftest import query


def _requirements(dist: str, seen: set[str]) -> set[str]:
    """The installed distributions `dist` pulls in, transitively (extras not requested)."""
    name = re.sub(r"[-_.]+", "-", dist).lower()
    if name in seen:
        return seen
    seen.add(name)
    try:
        requires = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return seen
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        _requirements(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0], seen)
    return seen


def test_instrumentation_pulls_neither_duckdb_nor_grpc() -> None:
    pulled = _requirements("spanscore-instrumentation", set())
    assert "opentelemetry-sdk" in pulled
    assert not {p for p in pulled if p.startswith(("duckdb", "grpcio", "pyarrow"))}, pulled


@pytest.fixture
def clean_instrumentation() -> Iterator[None]:
    yield
    instrumentation.uninstrument()


def test_instrument_sends_spans_to_the_collector(
    collector: Collector, lake_dir: Path, clean_instrumentation: None
) -> None:
    provider = TracerProvider()
    got = instrumentation.instrument(
        endpoint=f"http://127.0.0.1:{collector.http_port}", tracer_provider=provider
    )
    assert got is provider
    assert instrumentation.instrument(tracer_provider=TracerProvider()) is provider  # idempotent
    with provider.get_tracer("agent").start_as_current_span(
        "execute_tool lookup", attributes={"gen_ai.tool.name": "lookup"}
    ):
        pass
    instrumentation.uninstrument()  # flushes
    assert not instrumentation.is_instrumented()
    assert query(lake_dir, "SELECT tool_name FROM spans") == [("lookup",)]
    # Uninstrumented: the provider's spans no longer reach the collector.
    with provider.get_tracer("agent").start_as_current_span("after"):
        pass
    provider.force_flush()
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(1,)]
