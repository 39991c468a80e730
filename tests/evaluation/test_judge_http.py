"""The judge's own HTTP/1.1 transport: every framing an answer can come in, read whole however
its bytes are split; connections kept and reused, one dropped while idle sent again once;
answers that stop half-way, never come, or are not HTTP end in the errors the `openai` client
maps (so the judge records them); TLS with a trusted and an untrusted certificate; a proxy in
the environment hands the judge to aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.evaluation.llm.http import (
    HEAD_LIMIT,
    Connection,
    JudgeTransport,
    judge_http_client,
    proxied,
)

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "model": "m"}
BODY = json.dumps(ANSWER).encode()


def ok(body: bytes = BODY, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


def chunked(body: bytes, sizes: tuple[int, ...] = (5, 1, 40), trailer: str = "") -> bytes:
    pieces, rest = [], body
    for size in sizes * (len(body) // max(1, sum(sizes)) + 1):
        if not rest:
            break
        piece, rest = rest[:size], rest[size:]
        pieces.append(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    head += b"Transfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(pieces) + b"0\r\n" + trailer.encode() + b"\r\n"


FRAMINGS = {
    "content-length": (ok(), 200, BODY),
    "chunked, with extensions and a trailer": (
        chunked(BODY, trailer="X-Checksum: 1\r\n"),
        200,
        BODY,
    ),
    "chunked, empty": (chunked(b""), 200, b""),
    "until the server closes (HTTP/1.0)": (
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY,
        200,
        BODY,
    ),
    "100 Continue first": (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(), 200, BODY),
    "204 without a body": (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
    "gzip, decoded by httpx": (
        ok(gzip.compress(BODY), "Content-Encoding: gzip"),
        200,
        BODY,
    ),
    "429 with Retry-After": (
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}",
        429,
        b"{}",
    ),
}


class Wire(asyncio.Transport):
    """The connection's other end in memory: what is written, and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def read_in_pieces(raw: bytes, cuts: list[int]) -> tuple[Any, Wire]:
    """Feed `raw` to a connection cut at `cuts`, each piece on its own turn of the loop, and
    return its answer (or the exception) and its wire."""

    async def run() -> Any:
        loop = asyncio.get_running_loop()
        connection, wire = Connection(loop), Wire()
        connection.connection_made(wire)
        bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]

        async def feed() -> None:
            for start, end in itertools.pairwise(bounds):
                await asyncio.sleep(0)
                connection.data_received(raw[start:end])
            if raw.startswith(b"HTTP/1.0"):
                connection.eof_received()

        feeding = asyncio.ensure_future(feed())
        try:
            answer = await connection.exchange(b"GET / HTTP/1.1\r\n\r\n", b"", False, 10)
        except Exception as exc:
            answer = exc
        await feeding
        return answer, wire

    return asyncio.run(run())


@pytest.mark.parametrize("framing", list(FRAMINGS), ids=list(FRAMINGS))
def test_every_framing_is_read_whole_in_one_piece_or_byte_by_byte(framing: str):
    raw, status, body = FRAMINGS[framing]
    for cuts in ([], list(range(len(raw)))):
        answer, wire = read_in_pieces(raw, cuts)
        assert not isinstance(answer, Exception), answer
        assert answer.status == status
        if "gzip" not in framing:
            assert answer.body == body
        assert answer.keep_alive is not raw.startswith(b"HTTP/1.0")
        assert not wire.closed


@settings(max_examples=200, deadline=None)
@given(
    framing=st.sampled_from(sorted(FRAMINGS)),
    cuts=st.lists(st.integers(min_value=1, max_value=600), max_size=12),
)
def test_an_answer_split_anywhere_reads_the_same(framing: str, cuts: list[int]):
    raw, _status, _ = FRAMINGS[framing]
    whole, _ = read_in_pieces(raw, [])
    split, _ = read_in_pieces(raw, cuts)
    assert (split.status, split.headers, split.body) == (whole.status, whole.headers, whole.body)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", "longer than"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * HEAD_LIMIT, "headers are too long"),
    ],
    ids=["not-http", "header", "length", "chunk-size", "chunk-overrun", "head-limit"],
)
def test_an_answer_that_is_not_http_fails_its_request_and_closes(raw: bytes, words: str):
    answer, wire = read_in_pieces(raw, [7])
    assert isinstance(answer, httpx2.RemoteProtocolError)
    assert words in str(answer)
    assert wire.closed


# --- over real sockets --------------------------------------------------------------------------


class RawServer:
    """An HTTP/1.1 server on 127.0.0.1 that answers each request with the next scripted bytes
    (a function of the request, or bytes), sent in small pieces; it counts connections and keeps
    what it received. `close_after`: the server closes the connection after every answer
    without saying so (as a server whose keep-alive expired does)."""

    def __init__(
        self,
        answer: Callable[[bytes, bytes], bytes | None] | bytes,
        *,
        close_after: bool = False,
        tls: ssl.SSLContext | None = None,
        piece: int = 97,
        pace_s: float = 0.0,
    ) -> None:
        self.answer = answer
        self.close_after = close_after
        self.piece, self.pace_s = piece, pace_s
        self.tls = tls
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)  # so that the accepting thread sees `close` promptly
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            self.connections += 1
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            self._open.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                self.requests.append((head, body))
                raw = self.answer(head, body) if callable(self.answer) else self.answer
                if raw is None:  # never answer: wait until the client goes
                    while conn.recv(65536):
                        pass
                    return
                for start in range(0, len(raw), self.piece):
                    if self.pace_s and self._stop.wait(self.pace_s):
                        return
                    try:
                        conn.sendall(raw[start : start + self.piece])
                    except OSError:
                        return  # the client gave up
                if self.close_after or raw.startswith(b"HTTP/1.0"):
                    return

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for conn in self._open:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Any, **kwargs: Any) -> RawServer:
        server = RawServer(answer, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def call_all(
    url: str,
    n: int,
    concurrency: int,
    timeout: float = 30.0,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> list[Any]:
    """`n` POSTs through the real `openai` client on the judge's http client, `concurrency`
    at once, on a loop of `loop_factory` (default asyncio's); each result is the parsed JSON
    or the exception."""

    async def run() -> list[Any]:
        http = judge_http_client(url, timeout)
        client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, http_client=http)
        limit = asyncio.Semaphore(concurrency)

        async def one(i: int) -> Any:
            async with limit:
                try:
                    return await client.post("/chat/completions", cast_to=object, body={"n": i})
                except Exception as exc:
                    return exc

        try:
            return await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await client.close()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run())


def test_connections_are_kept_and_reused(serve: Callable[..., RawServer]):
    server = serve(ok())
    assert call_all(server.url, 40, 1) == [ANSWER] * 40
    assert server.connections == 1
    assert call_all(server.url, 60, 6) == [ANSWER] * 60
    assert server.connections <= 1 + 6
    bodies = sorted(json.loads(body)["n"] for _, body in server.requests[40:])
    assert bodies == list(range(60))  # each request sent once, with its own body


def test_the_transport_runs_on_uvloop(serve: Callable[..., RawServer]):
    # The judge's loop comes from the event-loop policy: an application that installed
    # uvloop's gets uvloop, whose transports are not `asyncio.Transport` subclasses and whose
    # `create_connection` returns before `connection_made` is called.
    import uvloop

    server = serve(ok())
    assert call_all(server.url, 30, 4, loop_factory=uvloop.new_event_loop) == [ANSWER] * 30
    assert server.connections <= 4


def test_a_connection_dropped_while_idle_is_replaced_and_the_request_sent_once(
    serve: Callable[..., RawServer],
):
    server = serve(ok(), close_after=True)

    async def run() -> list[int]:
        transport = JudgeTransport()
        async with httpx2.AsyncClient(transport=transport) as client:
            statuses = []
            for i in range(5):
                answer = await client.post(server.url + "/x", json={"n": i})
                statuses.append(answer.status_code)
                # the server's close reaches the client while the connection is idle, or
                # not yet: both ways the next request must go through exactly once
                await asyncio.sleep(0.05 if i % 2 else 0)
            return statuses

    assert asyncio.run(run()) == [200] * 5
    assert [json.loads(body)["n"] for _, body in server.requests] == list(range(5))
    assert server.connections == 5


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (ok()[:-10], openai.APIConnectionError),  # the server stops half-way through the body
        (b"garbage\r\n\r\n", openai.APIConnectionError),
        (None, openai.APITimeoutError),  # never answers
    ],
    ids=["half-an-answer", "not-http", "no-answer"],
)
def test_answers_that_never_complete_become_the_openai_clients_errors(
    serve: Callable[..., RawServer], raw: bytes | None, error: type[Exception]
):
    server = serve(lambda head, body: raw, close_after=True)
    [result] = call_all(server.url, 1, 1, timeout=1.0)
    assert isinstance(result, error), repr(result)


def test_an_answer_trickling_in_is_cut_at_the_timeout(serve: Callable[..., RawServer]):
    """Every byte comes before the last one is late, but the whole answer is: a provider that
    trickles cannot hold a judge call past its timeout."""
    server = serve(ok(), piece=1, pace_s=0.2)
    [result] = call_all(server.url, 1, 1, timeout=1.0)
    assert isinstance(result, openai.APITimeoutError), repr(result)


def test_a_cancelled_request_closes_its_connection_and_the_next_one_works(
    serve: Callable[..., RawServer],
):
    answers = iter([None, ok()])
    server = serve(lambda head, body: next(answers))

    async def run() -> int:
        transport = JudgeTransport()
        async with httpx2.AsyncClient(transport=transport, timeout=30) as client:
            waiting = asyncio.ensure_future(client.post(server.url + "/x", json={}))
            deadline = time.monotonic() + 20
            while not server.requests and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert transport.open_connections == 0
            return (await client.post(server.url + "/x", json={})).status_code

    assert asyncio.run(run()) == 200
    assert server.connections == 2


@pytest.fixture
def certificates(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    return server_context, bundle


def test_https_with_a_trusted_certificate(
    serve: Callable[..., RawServer],
    certificates: tuple[ssl.SSLContext, Path],
    monkeypatch: pytest.MonkeyPatch,
):
    context, bundle = certificates
    server = serve(ok(), tls=context)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert call_all(server.url, 10, 3) == [ANSWER] * 10
    assert server.connections <= 3


def test_https_with_an_unknown_certificate_is_refused(
    serve: Callable[..., RawServer],
    certificates: tuple[ssl.SSLContext, Path],
    monkeypatch: pytest.MonkeyPatch,
):
    context, _ = certificates
    server = serve(ok(), tls=context)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    [result] = call_all(server.url, 1, 1)
    assert isinstance(result, openai.APIConnectionError)
    assert "CERTIFICATE_VERIFY_FAILED" in repr(result.__cause__) + str(result.__cause__)
    assert not server.requests


def test_a_proxy_for_the_endpoint_hands_the_judge_to_aiohttp(monkeypatch: pytest.MonkeyPatch):
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert proxied("https://api.openai.com/v1")
    assert not proxied("http://127.0.0.1:8000/v1")  # no HTTP_PROXY: plain http goes direct
    direct = judge_http_client("http://127.0.0.1:8000/v1", 5)
    assert isinstance(direct._transport, JudgeTransport)
    via_proxy = judge_http_client("https://api.openai.com/v1", 5)
    assert not isinstance(via_proxy._transport, JudgeTransport)
    monkeypatch.setenv("NO_PROXY", "api.openai.com")
    assert not proxied("https://api.openai.com/v1")
