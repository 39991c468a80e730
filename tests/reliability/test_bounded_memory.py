"""The work and memory a request may cause are bounded (issue 16, items 5 and 6).

- During a stalled commit, every waiting HTTP request kept its whole body, and the write
  queue counted rows only: memory grew from 181 MiB to 1.4 GiB with 148 rows queued. Bodies are
  now let go once decoded, and the queue is bounded in bytes too (`queue_bytes`).
- 7.6 MiB of 4 million empty spans cost about 1 GiB and 14-25 s of CPU per request. Requests
  over `max_items_per_request` spans or records are refused before the items are built.

A real collector on a real lake; a stalled commit is a real lock held on the catalog by
another process.
"""

from __future__ import annotations

import http.client
import socket
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.protobuf.internal.encoder import _VarintBytes

from spanscore.collector import Collector

from ..support.catalog_lock import CatalogLock
from ..support.otlp_wire import (
    JSON,
    PROTOBUF,
    TRANSPORTS,
    assert_clean_success,
    assert_refused,
    export,
    grpc_export,
    logs_request,
    make_log,
    make_span,
    new_span_id,
    new_trace_id,
    post,
    span_ids,
    still_serving,
    trace_request,
)
from ..support.polling import wait_for


def test_the_write_queue_is_bounded_by_bytes_not_rows(
    make_collector: Callable[..., Collector], catalog_lock: CatalogLock
) -> None:
    collector = make_collector(queue_bytes=3 * 1024 * 1024, commit_deadline_s=300)
    catalog_lock.hold()
    acknowledged: list[bool] = []

    def one_export() -> None:
        span = make_span("big", attributes={f"a{i}": "v" * 200_000 for i in range(4)})
        acknowledged.append(export(collector, "grpc", trace_request([span])).ok)

    threads = []
    for n in range(1, 4):  # three ~800 kB spans: one committing, two queued
        threads.append(threading.Thread(target=one_export))
        threads[-1].start()
        wait_for(lambda n=n: collector.stats.get("spans_received") >= n, timeout=60)
    # Three rows in memory, far below queue_rows: the fourth is refused for its bytes.
    span = make_span("one too many", attributes={f"a{i}": "v" * 200_000 for i in range(4)})
    refused = grpc_export(collector, trace_request([span]).SerializeToString())
    assert refused.status is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
    assert "write queue is full" in refused.message
    assert collector.status()["gauges"]["queue_bytes"] <= 3 * 1024 * 1024
    catalog_lock.release()  # what was queued is committed and acknowledged
    for t in threads:
        t.join(120)
    assert acknowledged == [True, True, True]


def _post_and_forget(port: int, answers: list[int]) -> None:
    """Send a 1 MiB body on a raw socket and drop every reference to it before the answer
    comes, so that only the collector could still be holding it."""
    span = make_span("big body", attributes={"blob": "x" * 1024 * 1024})
    body = trace_request([span]).SerializeToString()
    del span
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\n\r\n" % (PROTOBUF.encode(), len(body))
        )
        sock.sendall(body)
        del body
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        answers.append(response.status)


def test_requests_waiting_for_a_commit_do_not_keep_their_bodies(
    make_collector: Callable[..., Collector], catalog_lock: CatalogLock
) -> None:
    # 16 requests of 1 MiB each whose rows are tiny (the value is truncated to 16 chars):
    # while they wait for the stalled commit, the collector holds their rows, not their bodies.
    collector = make_collector(max_attribute_length=16, commit_deadline_s=300)
    catalog_lock.hold()
    answers: list[int] = []
    tracemalloc.start()
    try:
        threads = [
            threading.Thread(target=_post_and_forget, args=(collector.http_port, answers))
            for _ in range(16)
        ]
        for t in threads:
            t.start()
        wait_for(lambda: collector.stats.get("spans_received") >= 16, timeout=120)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Were the 16 MiB of bodies kept, they would be here (Python allocations only: the rows
    # are Arrow buffers, outside tracemalloc).
    assert held < 6 * 1024 * 1024, f"{held / 2**20:.1f} MiB held while waiting"
    assert answers == []  # all still waiting: the measure was taken mid-stall
    catalog_lock.release()
    for t in threads:
        t.join(120)
    assert answers == [200] * 16


# --- item 6: items per request ----------------------------------------------------------------


def _ld(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2]) + _VarintBytes(len(payload)) + payload


def _empty_items(count: int) -> bytes:
    """request { group { scope group { item {} x count } } }: 2 bytes per empty item."""
    return _ld(1, _ld(2, b"\x12\x00" * count))


MANY = 4_000_000  # 7.6 MiB on the wire, under the 8 MiB request limit


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_millions_of_empty_items_are_refused_before_they_are_built(
    collector: Collector, lake_dir: Path, signal: str
) -> None:
    body = _empty_items(MANY)
    assert len(body) < collector.config.max_request_bytes
    noun = "spans" if signal == "traces" else "log records"
    for transport in TRANSPORTS:
        reply = export(collector, transport, body, signal=signal)
        assert_refused(reply, "invalid", f"{MANY} {noun}", "over the limit of 100000", "smaller")
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


def test_many_items_in_otlp_json_are_refused_before_they_are_built(collector: Collector) -> None:
    body = (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": ['
        + b",".join([b"{}"] * 2_000_000)
        + b"]}]}]}"
    )
    reply = post(collector, body, content_type=JSON)
    assert reply.status == 400, reply
    assert "2000000 spans, over the limit of 100000" in reply.message


def test_the_item_limit_is_a_setting_and_inclusive(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(max_items_per_request=10)
    at_limit = [make_span(f"s{i}") for i in range(10)]
    assert_clean_success(export(collector, "http", trace_request(at_limit)))
    over = [make_span(f"o{i}") for i in range(11)]
    assert_refused(export(collector, "grpc", trace_request(over)), "invalid", "11 spans")
    records = [make_log(trace_id=new_trace_id(), span_id=new_span_id()) for _ in range(11)]
    reply = export(collector, "http-json", logs_request(*records), signal="logs")
    assert_refused(reply, "invalid", "11 log records", "limit of 10")
    assert len(span_ids(lake_dir)) == 10
