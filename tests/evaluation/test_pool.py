"""The decode pool: requests flattened in worker processes give the same rows, and survive."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from spanscore.collector import Collector

from ..support import otlp_factory as f
from ..support.lake import query

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _export(collector: Collector, body: bytes) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        channel.unary_unary(EXPORT, request_serializer=lambda b: b)(body, timeout=30)


@pytest.mark.slow
def test_worker_processes_store_what_inline_decoding_stores(
    make_collector: Callable[..., Collector], tmp_path: Path
) -> None:
    spans = f.tool_spans(20, conversation="pooled")
    body = f.request(spans)
    pooled = make_collector(workers=2, lake=str(tmp_path / "pooled"))
    inline = make_collector(workers=0, lake=str(tmp_path / "inline"))
    _export(pooled, body)
    _export(inline, body)
    columns = "trace_id, span_id, name, attributes, conversation_id, tool_arguments"
    sql = f"SELECT {columns} FROM spans ORDER BY span_id"
    assert query(tmp_path / "pooled", sql) == query(tmp_path / "inline", sql)
    assert len(query(tmp_path / "pooled", sql)) == 20


@pytest.mark.slow
def test_a_bad_request_in_a_worker_is_refused_and_the_pool_serves_on(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(workers=1)
    with pytest.raises(grpc.RpcError) as refused:
        _export(collector, b"\x0a\xff\xff\xff")
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "truncated protobuf" in refused.value.details()  # type: ignore[attr-defined]
    _export(collector, f.request(f.tool_spans(3)))
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(3,)]


@pytest.mark.slow
def test_a_killed_worker_is_replaced(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    import psutil

    collector = make_collector(workers=1)
    workers = psutil.Process(os.getpid()).children(recursive=True)
    victims = [p for p in workers if "spawn" in " ".join(p.cmdline())]
    assert victims, "no decode worker process found"
    for p in victims:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    _export(collector, f.request(f.tool_spans(2)))  # answered (decoded in-process this time)
    _export(collector, f.request(f.tool_spans(2)))  # and by the new pool
    assert query(lake_dir, "SELECT count(*) FROM spans") == [(4,)]
