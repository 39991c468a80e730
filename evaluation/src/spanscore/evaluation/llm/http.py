"""The judge's HTTP/1.1 transport under the `openai` client: keep-alive connections on asyncio
protocols, and nothing more.

A nightly run makes tens of thousands of small JSON calls to one host, and general-purpose
transports spend a large share of the client's CPU on each (aiohttp under its httpx adapter
about 0.45 ms a call more than this one against a provider answering in 300 ms). This one does
only what those calls need: one request at a time per connection, `Content-Length`, chunked or
until-close bodies, TLS through the event loop, idle connections reused for `keepalive_s`.
Redirects and decompression stay in httpx above it, retries in the judge. Proxies are not
handled here: `judge_http_client` keeps aiohttp when the environment routes the endpoint
through one.

The `read` timeout bounds the whole answer, from the moment the request is written to the
answer's last byte (httpx's own transports bound each read instead): a provider that
trickles bytes cannot hold a judge call past its timeout.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
import urllib.request
from typing import cast

import httpx2

HEAD_LIMIT = 64 * 1024  # a status line and headers longer than this are no API's answer


_NO_BODY = frozenset({204, 304})


_ONE_WRITE = 64 * 1024  # request bodies up to this size go out with their head in one write


class _Unanswered(httpx2.RemoteProtocolError):
    """The connection closed before a byte of the answer: on a reused connection, the server
    had dropped it while idle, so the request was never read."""


class _Answer:
    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, keep_alive: bool
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection. `exchange` sends one request and waits for its whole answer,
    parsed as its bytes arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[_Answer] | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reset(False)

    # the answer being read
    def _reset(self, is_head: bool) -> None:
        self._buffer.clear()
        self._is_head = is_head
        self._received = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._keep_alive = True
        self._length: int | None = None  # None: chunked, or until the server closes
        self._chunked = False
        self._body_start = -1
        self._chunks: list[bytes] = []
        self._scan = 0  # where chunk parsing resumes

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not `asyncio.Transport` subclasses, only alike)
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection is in no known state
            return
        self._received = True
        self._buffer += data
        try:
            answer = self._parse()
        except httpx2.RemoteProtocolError as exc:
            self._fail(exc)
            return
        if answer is not None:
            self._resolve(answer)

    def eof_received(self) -> bool:
        if self._waiter is not None and self._body_start >= 0 and self._until_close():
            start = self._body_start
            self._resolve(_Answer(self._status, self._headers, bytes(self._buffer[start:]), False))
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None:
            why = f" ({exc})" if exc else ""
            if not self._received:
                self._fail(_Unanswered(f"the server closed the connection before answering{why}"))
            else:
                self._fail(httpx2.RemoteProtocolError(f"the server closed the connection{why}"))

    # requests

    async def exchange(
        self, head: bytes, body: bytes, is_head: bool, timeout: float | None
    ) -> _Answer:
        transport = self._transport
        assert transport is not None
        self._reset(is_head)
        waiter: asyncio.Future[_Answer] = self._loop.create_future()
        self._waiter = waiter
        if len(body) <= _ONE_WRITE:
            transport.write(head + body)
        else:
            transport.writelines((head, body))
        timer = None
        if timeout is not None:
            timer = self._loop.call_later(timeout, self._time_out, waiter, timeout)
        try:
            return await waiter
        except BaseException:
            self.close()  # failed or cancelled half-way: nothing more can be read from it
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _resolve(self, answer: _Answer) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def _time_out(self, waiter: asyncio.Future[_Answer], timeout: float) -> None:
        if waiter is self._waiter:
            self._fail(httpx2.ReadTimeout(f"no whole answer within {timeout:g} s"))

    # parsing

    def _until_close(self) -> bool:
        return not self._chunked and self._length is None

    def _parse(self) -> _Answer | None:
        buffer = self._buffer
        while self._body_start < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > HEAD_LIMIT:
                    raise httpx2.RemoteProtocolError("the answer's headers are too long")
                return None
            self._read_head(bytes(buffer[:end]))
            if 100 <= self._status < 200:  # 100 Continue and the like: the answer follows
                del buffer[: end + 4]
                continue
            self._body_start = self._scan = end + 4
        if self._is_head or self._status in _NO_BODY:
            return self._answer(b"")
        if self._chunked:
            return self._parse_chunks()
        if self._length is None:
            return None  # the body ends when the server closes (eof_received)
        start = self._body_start
        if len(buffer) - start < self._length:
            return None
        return self._answer(bytes(buffer[start : start + self._length]))

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise httpx2.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self._status = int(code)
        keep_alive = version == b"HTTP/1.1"
        self._headers = headers = []
        self._length, self._chunked = None, False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpx2.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
            value = value.strip()
            headers.append((name, value))
            key = name.lower()
            if key == b"content-length":
                if not value.isdigit():
                    raise httpx2.RemoteProtocolError(f"a malformed Content-Length: {value!r}")
                self._length = int(value)
            elif key == b"transfer-encoding":
                self._chunked = value.lower().rstrip().endswith(b"chunked")
            elif key == b"connection":
                tokens = value.lower()
                keep_alive = b"close" not in tokens and (keep_alive or b"keep-alive" in tokens)
        if self._chunked:
            self._length = None  # RFC 9112: Transfer-Encoding overrides Content-Length
        self._keep_alive = keep_alive

    def _parse_chunks(self) -> _Answer | None:
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n", self._scan)
            if line_end < 0:
                return None
            size_text = bytes(buffer[self._scan : line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx2.RemoteProtocolError(
                    f"a malformed chunk size: {size_text[:20]!r}"
                ) from None
            if size == 0:  # the last chunk; trailer lines, if any, end with an empty line
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    return None
                return self._answer(b"".join(self._chunks))
            start = line_end + 2
            if len(buffer) < start + size + 2:
                return None
            if buffer[start + size : start + size + 2] != b"\r\n":
                raise httpx2.RemoteProtocolError("a chunk is longer than its size says")
            self._chunks.append(bytes(buffer[start : start + size]))
            self._scan = start + size + 2

    def _answer(self, body: bytes) -> _Answer:
        self._body_start = -1
        return _Answer(self._status, self._headers, body, self._keep_alive)


class JudgeTransport(httpx2.AsyncBaseTransport):
    """An httpx transport for many small requests to few hosts (see the module's docstring).

    Connections are opened as needed, one per request in flight (the judge's adaptive limit
    bounds those), and kept while idle for `keepalive_s`."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext | None = None, keepalive_s: float = 5.0
    ) -> None:
        self._ssl = ssl_context
        self._keepalive_s = keepalive_s
        self._idle: dict[tuple[str, str, int], collections.deque[Connection]] = {}
        self._open: set[Connection] = set()

    @property
    def open_connections(self) -> int:
        return sum(not c.closed for c in self._open)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(f"the judge's transport speaks http(s), not {url}")
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        try:
            body = request.content
        except httpx2.RequestNotRead:  # a streamed body (a Batch API upload): read it whole
            body = await request.aread()
        headers = request.headers
        if body and "content-length" not in headers:  # a read stream: sent with its length
            headers.pop("transfer-encoding", None)
            headers["Content-Length"] = str(len(body))
        lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), url.raw_path)]
        lines.extend(b"%s: %s" % pair for pair in headers.raw)
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        is_head = request.method == "HEAD"
        for attempt in (1, 2):
            connection, reused = await self._connection(key, timeouts, request, attempt == 2)
            try:
                answer = await connection.exchange(head, body, is_head, timeouts.get("read"))
                break
            except _Unanswered:
                self._open.discard(connection)
                if not reused or attempt == 2:
                    raise
                # an idle connection the server had dropped: the request was never read, so
                # it goes once more on a new connection (as browsers and urllib3 do)
            except BaseException:
                self._open.discard(connection)
                raise
        if answer.keep_alive and not connection.closed:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(key, collections.deque()).append(connection)
        else:
            connection.close()
            self._open.discard(connection)
        return httpx2.Response(
            answer.status,
            headers=answer.headers,
            content=answer.body,  # httpx decodes a Content-Encoding when it reads this
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def _connection(
        self,
        key: tuple[str, str, int],
        timeouts: dict[str, float | None],
        request: httpx2.Request,
        fresh: bool,
    ) -> tuple[Connection, bool]:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle and not fresh:
            connection = idle.pop()  # the most recently used: the least likely to be dropped
            if not connection.closed and now - connection.idle_since < self._keepalive_s:
                return connection, True
            connection.close()
            self._open.discard(connection)
        scheme, host, port = key
        tls = None
        if scheme == "https":
            if self._ssl is None:
                # as httpx's own: SSL_CERT_FILE, SSL_CERT_DIR, else the system's certificates
                self._ssl = httpx2.create_ssl_context()
            tls = self._ssl
        sni = request.extensions.get("sni_hostname") or host
        loop = asyncio.get_running_loop()
        try:
            transport, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(loop),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=str(sni) if tls is not None else None,
                ),
                timeouts.get("connect"),
            )
        except TimeoutError:
            seconds = timeouts.get("connect")
            raise httpx2.ConnectTimeout(f"no connection to {host}:{port} in {seconds} s") from None
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        # uvloop hands the connection over before it calls `connection_made`
        connection.connection_made(transport)
        self._open.add(connection)
        return connection, False

    async def aclose(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()


def proxied(url: str) -> bool:
    """Whether the environment (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY) sends `url` via a proxy."""
    parsed = httpx2.URL(url)
    proxies = urllib.request.getproxies()
    if parsed.scheme not in proxies and "all" not in proxies:
        return False
    return not urllib.request.proxy_bypass(parsed.host)


def judge_http_client(base_url: str, timeout: float) -> httpx2.AsyncClient:
    """The http client under the judge's `openai` client: `JudgeTransport`, or aiohttp (the
    `openai` package's own alternative) where a proxy is configured for `base_url`."""
    import openai

    if proxied(base_url):
        client: httpx2.AsyncClient = openai.DefaultAioHttpClient(timeout=timeout)
        return client
    return httpx2.AsyncClient(transport=JudgeTransport(), timeout=timeout, follow_redirects=True)
