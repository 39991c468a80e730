"""Slow and silent clients cannot take the collector from the others (issue 16, items 2, 3).

- Forty HTTP bodies arriving at 1 byte per 10 s used to hold every decoding slot before their
  bodies were read, and starved every other HTTP and gRPC client for as long as they liked.
  Bodies now arrive without a slot, each piece reserved in a receive budget
  (`max_receiving_bytes`), and must be complete within `client_timeout_s`.
- One idle TCP connection to the TLS HTTP port stopped every HTTPS client: the handshake ran
  on the accept loop with no timeout. It now runs in the connection's thread, with a deadline.

Real collector, real sockets on 127.0.0.1; waits poll with generous deadlines.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spanscore.collector import Collector

from ..support.otlp_wire import (
    PROTOBUF,
    TRANSPORTS,
    assert_clean_success,
    export,
    make_span,
    post,
    span_ids,
    trace_request,
)
from ..support.polling import wait_for

DECLARED = 100_000  # what each slow client says its body holds


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Raw client sockets, all closed when the test ends."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _slow_client(collector: Collector, opened: list[socket.socket]) -> socket.socket:
    """Headers, then 1 byte of a 100 kB body, then nothing (a client at 1 byte per hour)."""
    sock = socket.create_connection(("127.0.0.1", collector.http_port), timeout=60)
    opened.append(sock)
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: " + PROTOBUF.encode() + b"\r\n"
        b"Content-Length: %d\r\n\r\n\x0a" % DECLARED
    )
    return sock


def _receiving(collector: Collector) -> int:
    return int(collector.status()["gauges"]["receiving_bytes"])


def test_slow_bodies_do_not_starve_other_clients(
    make_collector: Callable[..., Collector], lake_dir: Path, sockets: list[socket.socket]
) -> None:
    collector = make_collector(max_concurrent_requests=4)
    for _ in range(3 * 4):  # three times as many slow clients as decoding slots
        _slow_client(collector, sockets)
    # Every slow body is being received (its first piece reserved in the budget)...
    wait_for(lambda: _receiving(collector) >= 12 * DECLARED, timeout=60)
    # ...and the other clients, over both protocols, are served.
    sent: set[str] = set()
    for transport in TRANSPORTS:
        span = make_span(f"served over {transport}")
        assert_clean_success(export(collector, transport, trace_request([span])))
        sent.add(span.span_id.hex())
    assert span_ids(lake_dir) == sent
    assert collector.stats.get("refused_busy") == 0


def test_a_body_that_does_not_arrive_in_time_is_answered_408(
    make_collector: Callable[..., Collector], sockets: list[socket.socket]
) -> None:
    collector = make_collector(client_timeout_s=1)
    sock = _slow_client(collector, sockets)
    response = http.client.HTTPResponse(sock)
    response.begin()  # blocks until the deadline cuts the body short (socket timeout: 60 s)
    assert response.status == 408
    assert response.getheader("Connection") == "close"
    assert "did not arrive within 1s" in response.read().decode(errors="replace")
    wait_for(lambda: _receiving(collector) == 0, timeout=30)  # its bytes are given back
    assert collector.stats.get("refused_client_too_slow") == 1


def test_the_receive_budget_refuses_with_a_retryable_answer(
    make_collector: Callable[..., Collector], sockets: list[socket.socket]
) -> None:
    # Room for one declared body and a half: a second one that does not fit is refused with
    # 503 and Retry-After (the exporter retries), instead of the collector holding it.
    collector = make_collector(max_request_bytes=DECLARED, max_receiving_bytes=DECLARED * 3 // 2)
    _slow_client(collector, sockets)
    wait_for(lambda: _receiving(collector) >= DECLARED, timeout=60)
    big = make_span("big", attributes={"blob": "b" * (DECLARED * 3 // 4)})
    reply = post(collector, trace_request([big]).SerializeToString())
    assert reply.status == 503, reply
    assert int(reply.headers["retry-after"]) >= 1
    assert "receiving too much at once" in reply.message
    small = make_span("small")  # what fits in what is left is received
    assert_clean_success(post(collector, trace_request([small]).SerializeToString()))


def test_a_silent_tls_client_does_not_stop_https(
    make_collector: Callable[..., Collector],
    tls_files: tuple[Path, Path],
    sockets: list[socket.socket],
) -> None:
    cert, key = tls_files
    collector = make_collector(tls_cert=str(cert), tls_key=str(key), client_timeout_s=2)
    silent = socket.create_connection(("127.0.0.1", collector.http_port), timeout=60)
    sockets.append(silent)  # connects, never says hello
    context = ssl.create_default_context(cafile=str(cert))
    for _ in range(3):  # HTTPS clients are served while it sits there
        conn = http.client.HTTPSConnection(
            "127.0.0.1", collector.http_port, context=context, timeout=30
        )
        with contextlib.closing(conn):
            conn.request("GET", "/health")
            response = conn.getresponse()
            assert (response.status, json.loads(response.read())) == (200, {"status": "ok"})
    # At the deadline the collector closes the silent connection (a TLS alert, then EOF; a
    # recv that times out instead fails the test).
    while silent.recv(4096):
        pass
