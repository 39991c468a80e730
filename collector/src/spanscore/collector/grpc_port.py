"""The OTLP/gRPC port: the collector reads each connection's first bytes before gRPC does.

grpcio gives no hook for a connection that does not open with the HTTP/2 preface: it closes it
and logs nothing, so an OTLP/HTTP exporter sent to the gRPC port failed without a trace. So the
collector owns the public gRPC listening socket, and grpcio listens on a private socket (an
abstract Unix socket on Linux, a socket file in a private directory elsewhere). For each
connection accepted, `classify` reads its first bytes without consuming them (`MSG_PEEK`):

- an HTTP/1.x request line (`POST /v1/traces HTTP/1.1`, `GET /status ...`): answered here,
  `400` with the fix (the collector's HTTP port), counted as `refused_http_on_grpc_port`, and
  logged once per client host per `LOG_EVERY_S` (a misconfigured exporter retries every batch);
- anything else (the HTTP/2 preface of a gRPC client, a TLS ClientHello, bytes we do not know):
  relayed untouched, both ways, to grpcio, which applies TLS, the token, deadlines and
  keepalives exactly as before. With TLS configured, an `https://` OTLP/HTTP exporter sends a
  ClientHello: that is relayed, and grpcio refuses it after the handshake (not detected here).

The relay moves bytes with `splice(2)` through a pipe (no copy through Python) where the
platform has it, one thread per direction per connection, blocked in the kernel (the GIL is
released) until bytes arrive. Its cost against grpcio on the public port, the alternatives
measured and those that do not exist (grpcio takes no accepted socket) are in
docs/design/grpc-port.md. The setting `grpc_listener = "grpcio"` gives the port back to grpcio.

Shutdown: `close()` stops accepting (call it when the collector stops taking exports); relays
go on carrying what grpcio answers during its grace period, and end when grpcio closes its
side; `shutdown(timeout)` ends any that remain (a client that never closes).

Anyone on the host who can reach the public port can reach the private socket too (an
abstract socket has no file permissions): it bypasses the sniffing only, not TLS or the token,
which grpcio applies behind it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .stats import Stats

log = logging.getLogger("spanscore.collector")

HTTP1: Final = "http1"
OTHER: Final = "other"
# Request methods of HTTP/1.x, each with the space that ends it: `PRI * HTTP/2.0` (the HTTP/2
# preface) is none of them, and differs from the three that start with P at its second byte.
_METHODS = tuple(
    m.encode() + b" "
    for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
_LONGEST = max(map(len, _METHODS))
SNIFF_TIMEOUT_S = 10.0  # silent past this long: relayed anyway (grpcio has its own limits)
LOG_EVERY_S = 3600.0
_HEAD_LIMIT = 16 * 1024
_DRAIN_S = 5.0
_DRAIN_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20
# Pipe capacity counts against the user's pipe pages (fs.pipe-user-pages-soft, 64 MiB): past
# it, new pipes get 8 KiB. Two pipes of 256 KiB per connection: ~128 connections' worth.
_PIPE_BYTES = 256 * 1024


def classify(first: bytes) -> str | None:
    """`HTTP1` for the start of an HTTP/1.x request, `OTHER` for anything else (an HTTP/2
    preface, a TLS ClientHello), None while `first` is too short to tell."""
    if first.startswith(_METHODS):
        return HTTP1
    if any(m.startswith(first) for m in _METHODS):
        return None  # "P", "POS", "GET" without its space yet
    return OTHER


class OncePerClient:
    """Whether to log a client's mistake now: once per host per `every_s`, at most `limit`
    hosts remembered (past it, nothing more is logged until old entries expire)."""

    def __init__(self, every_s: float = LOG_EVERY_S, limit: int = 1024) -> None:
        self.every_s = every_s
        self.limit = limit
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, host: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            last = self._last.get(host)
            if last is not None and now - last < self.every_s:
                return False
            if last is None and len(self._last) >= self.limit:
                self._last = {h: t for h, t in self._last.items() if now - t < self.every_s}
                if len(self._last) >= self.limit:
                    return False
            self._last[host] = now
            return True


def private_address() -> tuple[str, Callable[[], None]]:
    """A private address for grpcio (`unix-abstract:` on Linux, else `unix:` in a directory
    only this user can enter), and what removes it."""
    name = f"spanscore-grpc-{os.getpid()}-{secrets.token_hex(8)}"
    if sys.platform == "linux":
        return f"unix-abstract:{name}", lambda: None
    directory = tempfile.mkdtemp(prefix="spanscore-")
    return f"unix:{directory}/grpc.sock", lambda: shutil.rmtree(directory, ignore_errors=True)


def _connect_private(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if address.startswith("unix-abstract:"):
            sock.connect("\0" + address.removeprefix("unix-abstract:"))
        else:
            sock.connect(address.removeprefix("unix:"))
    except BaseException:
        sock.close()
        raise
    return sock


def _printable(text: str, limit: int = 120) -> str:
    """A client's text, safe to log: printable ASCII only, cut at `limit`."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[:limit])
    return clean + ("..." if len(text) > limit else "")


class GrpcPort:
    """The public OTLP/gRPC listener in front of grpcio's private `upstream` address."""

    def __init__(self, host: str, port: int, upstream: str, stats: Stats) -> None:
        self.upstream = upstream
        self.stats = stats
        self.http_port = 0  # named in the answer to HTTP; set before `start`
        self.once = OncePerClient()
        self._listeners = _listen(host.strip("[]"), port)
        self.port: int = self._listeners[0].getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._relayed: set[socket.socket] = set()  # of `_open`, those relayed to grpcio
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._ending = False  # `shutdown`: connections still being read are not relayed
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="spanscore-grpc-port", daemon=True
        )

    def start(self, http_port: int) -> None:
        self.http_port = http_port
        self._acceptor.start()

    def close(self) -> None:
        """Stop accepting connections; those open go on. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        for listener in self._listeners:
            listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def shutdown(self, timeout: float) -> None:
        """`close()`, then end every connection: those not relayed (still being read) at once;
        relayed ones once they have passed on grpcio's last bytes (grpcio, stopped, closes its
        side; cutting them earlier could lose an answer grpcio had already sent), or at
        `timeout`."""
        self.close()
        with self._lock:
            self._ending = True
            waiting = [s for s in self._open if s not in self._relayed]
        for sock in waiting:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        self._join(deadline)
        with self._lock:
            left = list(self._open)
        for sock in left:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._join(time.monotonic() + 1.0)

    def _join(self, deadline: float) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            for listener in self._listeners:
                selector.register(listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._closed:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r or self._closed:
                        return
                    try:
                        client, address = key.fileobj.accept()  # type: ignore[union-attr]
                    except OSError as exc:  # EMFILE and the like: log, keep serving
                        if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED):
                            log.warning("OTLP/gRPC port: cannot accept a connection: %s", exc)
                            time.sleep(0.1)
                        continue
                    self._track(client)  # before its thread runs: `shutdown` sees it
                    self._spawn(self._serve, client, str(address[0]))

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=self._run, args=(target, *args), daemon=True)
        thread.name = "spanscore-grpc-relay"
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _run(self, target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except OSError as exc:  # a client that resets or goes away
            log.debug("OTLP/gRPC port: connection ended: %s", exc)
        except Exception:
            log.exception("OTLP/gRPC port: error relaying a connection")
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.update(socks)

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            self._open.difference_update(socks)
            self._relayed.difference_update(socks)
        for sock in socks:
            sock.close()

    def _serve(self, client: socket.socket, host: str) -> None:
        try:
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._sniff(client) == HTTP1:
                self._answer_http(client, host)
                return
            upstream = _connect_private(self.upstream)
            with self._lock:
                if self._ending:  # `shutdown` began while this connection was being read
                    upstream.close()
                    raise ConnectionAbortedError("the collector is stopping")
                self._open.add(upstream)
                self._relayed.update((client, upstream))
        except BaseException:
            self._untrack(client)
            raise
        back = threading.Thread(
            target=self._run, args=(_pump_back, upstream, client), name="spanscore-grpc-relay"
        )
        with self._lock:
            self._threads.add(back)
        back.start()
        try:
            _pump(client, upstream)
            back.join()
        finally:
            self._untrack(client, upstream)

    def _sniff(self, client: socket.socket) -> str:
        deadline = time.monotonic() + SNIFF_TIMEOUT_S
        client.settimeout(SNIFF_TIMEOUT_S)
        try:
            while True:
                first = client.recv(_LONGEST, socket.MSG_PEEK)
                kind = classify(first) if first else OTHER
                if kind is not None:
                    return kind
                if time.monotonic() >= deadline:
                    return OTHER
                time.sleep(0.01)  # a request line cut in its first 8 bytes: rare
        except TimeoutError:
            return OTHER
        finally:
            client.settimeout(None)

    def _answer_http(self, client: socket.socket, host: str) -> None:
        """Read the request's head, answer 400 with the fix, close after the client's body."""
        head = b""
        deadline = time.monotonic() + _DRAIN_S  # a head sent byte by byte holds no thread long
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < _HEAD_LIMIT:
                client.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = client.recv(_HEAD_LIMIT)
                if not chunk:
                    break
                head += chunk
        lines = head.split(b"\r\n")
        method, _, rest = lines[0].decode("latin-1").partition(" ")
        path = _printable(rest.rpartition(" ")[0] or rest)
        method = _printable(method, 16)
        authority = next(
            (
                line.split(b":", 1)[1].strip().decode("latin-1")
                for line in lines[1:]
                if line.lower().startswith(b"host:")
            ),
            "",
        )
        name = _host_of(_printable(authority, 255)) or "HOST"
        self.stats.add("refused_http_on_grpc_port")
        exporter = path.startswith("/v1/")
        where = f"http://{name}:{self.http_port}"
        if self.once(host):
            who = "an OTLP/HTTP exporter" if exporter else "an HTTP client"
            log.warning(
                f"{who} at {host} sent {method} {path} to the OTLP/gRPC port {self.port}: "
                f"OTLP/HTTP goes to the HTTP port {self.http_port} (point the exporter at "
                f"{where}), or switch the exporter to gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc)",
                extra={"client": host, "grpc_port": self.port, "http_port": self.http_port},
            )
        body = (
            f"This is the spanscore collector's OTLP/gRPC port ({self.port}). OTLP/HTTP "
            f"(POST /v1/traces, /v1/logs), /status, /health and /metrics are on its HTTP port "
            f"{self.http_port}: {where}{path if path.startswith('/') else '/'} ; or switch the "
            "exporter to gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc).\n"
        ).encode()
        # The reason phrase is what OTLP/HTTP exporters log ("code: 400, reason: ...").
        reason = f"This is the OTLP/gRPC port; OTLP/HTTP is port {self.http_port}"
        answer = (
            f"HTTP/1.1 400 {reason}\r\n".encode()
            + b"Content-Type: text/plain; charset=utf-8\r\n"
            + f"Content-Length: {len(body)}\r\n".encode()
            + f"Spanscore-Http-Port: {self.http_port}\r\n".encode()
            + b"Connection: close\r\n\r\n"
            + body
        )
        with contextlib.suppress(OSError):
            client.sendall(answer)
            # Close only once the client has sent what it meant to (its body): closing with
            # unread bytes resets the connection, and the client may lose the answer.
            client.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _DRAIN_S
            drained = 0
            while drained < _DRAIN_BYTES and time.monotonic() < deadline:
                client.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = client.recv(_CHUNK)
                if not chunk:
                    break
                drained += len(chunk)
        self._untrack(client)


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` resolves to (`localhost`: 127.0.0.1 and ::1,
    as grpcio did), one port for all (`port` 0: the first one's); `::` takes IPv4 too."""
    addresses: list[tuple[socket.AddressFamily, socket.SocketKind, int, tuple[Any, ...]]] = []
    for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
        if (info[0], info[4][0]) not in [(f, a[0]) for f, _, _, a in addresses]:
            addresses.append((info[0], info[1], info[2], info[4]))
    listeners: list[socket.socket] = []
    try:
        for family, kind, proto, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # alone (`::`), it takes IPv4 too
                    with contextlib.suppress(OSError):
                        v6only = int(len(addresses) > 1)
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
                bound = listeners[0].getsockname()[1] if listeners else port
                sock.bind((address[0], bound, *address[2:]))
                sock.listen(1024)  # exporters reconnecting together after a restart
            except OSError as exc:
                sock.close()
                if len(addresses) > 1 and exc.errno in _UNUSABLE:
                    continue  # one address of several this host cannot use (no IPv6)
                raise
            listeners.append(sock)
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    if not listeners:
        raise OSError(errno.EADDRNOTAVAIL, f"no address of {host} to listen on")
    return listeners


_UNUSABLE = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


def _host_of(authority: str) -> str:
    """The host of a Host header (`[::1]:4317` -> `[::1]`, `a:4317` -> `a`)."""
    if authority.startswith("["):
        return authority.partition("]")[0] + "]"
    return authority.partition(":")[0]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Move bytes from `src` to `dst` until `src` ends, then end `dst`'s writing side."""
    try:
        if hasattr(os, "splice"):
            _splice(src.fileno(), dst.fileno())
        else:  # pragma: no cover - not Linux
            buffer = memoryview(bytearray(_CHUNK))
            while n := src.recv_into(buffer):
                dst.sendall(buffer[:n])
    except OSError as exc:  # reset, broken pipe, or shut down by `GrpcPort.shutdown`
        log.debug("OTLP/gRPC port: relay ended: %s", exc)
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _pump_back(upstream: socket.socket, client: socket.socket) -> None:
    """grpcio's answers to the client; once grpcio closes the connection, the client's side
    ends too (nothing it sends after can be delivered), as when grpcio held the socket."""
    _pump(upstream, client)
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RD)


def _splice(src: int, dst: int) -> None:
    """splice(2) `src` into a pipe and the pipe into `dst`: the bytes stay in the kernel."""
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):
            import fcntl

            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        while True:
            moved = os.splice(src, write_end, _CHUNK)
            if moved == 0:
                return
            while moved:
                moved -= os.splice(read_end, dst, moved)
    finally:
        os.close(read_end)
        os.close(write_end)
