"""The OTLP/HTTP front end: `POST /v1/traces` and `/v1/logs`, `POST /v1/metrics` (answered,
not stored: `metrics_refused`), `GET /health`, `/status` and `/metrics` (Prometheus text,
behind the same token as `/status`).

A hand-written HTTP/1.1 body reader over `http.server`, because the body is where a client can
hurt the collector:

- A body is read a piece at a time (`_PIECE`), each piece reserved in the receive budget first
  (see admission), and must arrive within `client_timeout_s` (a TLS handshake too): a slow
  client is cut and answered 408, and holds only the bytes it has sent meanwhile.
- `Content-Length` is required and must be one decimal number (or the body is chunked); a body
  over `max_request_bytes` (compressed or inflated) is refused 413 before it is read.
- The decoding slot is taken only once the body is in; the body is let go once decoded, before
  the wait for the commit.
- An unwanted body is read and discarded (up to `_DISCARD_CAP`) before the error is sent, so
  the client sees the answer rather than a connection reset.

Outcomes are answered in the request's format (protobuf or JSON): success is 200 with the OTLP
response; a refusal is the HTTP status of its code with a `google.rpc.Status` body, and
`Retry-After` for the retryable ones (429, 503). An exporter's endpoint mistakes (the gRPC port,
a path given twice) are logged once each, with the fix.

`stop` waits for the requests in progress (`OTLPHTTPServer.requests`), not for idle keep-alive
connections.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from typing import Any

from google.rpc import code_pb2, status_pb2

from . import metrics_refused, otlp, prometheus
from .admission import Admission, Body, Deadlines
from .config import CollectorConfig
from .ingest import Ingest
from .stats import Stats

log = logging.getLogger("spanscore.collector")


def start_http(
    config: CollectorConfig,
    admission: Admission,
    stats: Stats,
    ingest: Ingest,
    *,
    health: Callable[..., dict[str, Any]],
    status_report: Callable[[], dict[str, Any]],
    grpc_port: int,
) -> OTLPHTTPServer:
    """The bound HTTP server (`http_port` 0 picks a free one); the caller runs `serve_forever`.

    `health(detailed=...)` and `status_report()` answer `GET /health` and `/status`; `grpc_port`
    is named to an exporter that sends gRPC to this port.
    """
    cfg = config
    handler = _make_handler(cfg, admission, stats, ingest, health, status_report, grpc_port)
    server = OTLPHTTPServer((cfg.host, cfg.http_port), handler)
    server.client_timeout_s = cfg.client_timeout_s
    server.deadlines = admission.deadlines
    if cfg.tls_cert is not None and cfg.tls_key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key))
        server.tls = context
    return server


_MISTAKES_LOGGED: set[str] = set()


def _endpoint_mistake(key: str, message: str) -> None:
    """Log an exporter's endpoint mistake with its fix, once per kind (it repeats with every
    export)."""
    if key in _MISTAKES_LOGGED or len(_MISTAKES_LOGGED) > 100:
        return
    _MISTAKES_LOGGED.add(key)
    log.warning(message)


def _endpoint_fix(path: str, port: int) -> str:
    for signal in ("traces", "logs"):
        if path.endswith(f"/v1/{signal}") and path != f"/v1/{signal}":
            return (
                f"POST {path}: no OTLP endpoint here, the exporter's URL has the path twice: "
                f"set OTEL_EXPORTER_OTLP_ENDPOINT to the base URL (http://HOST:{port}, the "
                f"exporter adds /v1/{signal}), or OTEL_EXPORTER_OTLP_"
                f"{signal.upper()}_ENDPOINT to the full URL (http://HOST:{port}/v1/{signal})"
            )
    return f"POST {path}: no OTLP endpoint here; OTLP/HTTP is POST /v1/traces and /v1/logs"


class OTLPHTTPServer(http.server.ThreadingHTTPServer):
    """The HTTP server: a thread per connection, TLS handshakes in those threads."""

    # Handler threads are daemons: stop() waits for the requests in progress itself (see
    # `requests`), so an idle keep-alive connection cannot hold shutdown up.
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024  # exporters reconnecting together after a restart

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler]):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.requests = _InFlight()
        self.tls: ssl.SSLContext | None = None
        self.client_timeout_s = 30.0
        self.deadlines: Deadlines | None = None  # the collector's; needed for TLS
        super().__init__(address, handler)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that resets or times out is no server error (socketserver would print a
        traceback on stderr for each)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | ssl.SSLError):
            log.debug("connection from %s ended: %s", client_address[0], exc)
        else:
            log.error("error handling a request from %s", client_address[0], exc_info=True)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs in the connection's own thread. The TLS handshake happens here, with a
        deadline: on the accept loop (a wrapped listening socket), one silent client stopped
        every HTTPS client, for as long as it liked."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        assert self.deadlines is not None
        connection = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        watch = self.deadlines.watch(connection, self.client_timeout_s)
        try:
            connection.do_handshake()
        except OSError:  # ssl.SSLError, and a handshake cut at the deadline: this client only
            connection.close()
            return
        finally:
            watch.finish()
        try:
            super().finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_WR)
            connection.close()


class _InFlight:
    """Counts requests being handled, so shutdown can wait for them (and only them)."""

    def __init__(self) -> None:
        self._count = 0
        self._cond = threading.Condition()

    def __enter__(self) -> None:
        with self._cond:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._count == 0, timeout)


_HTTP_STATUS = {
    code_pb2.OK: 200,
    code_pb2.INVALID_ARGUMENT: 400,
    code_pb2.DEADLINE_EXCEEDED: 408,
    code_pb2.UNAUTHENTICATED: 401,
    code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.UNAVAILABLE: 503,
    code_pb2.INTERNAL: 500,
}
_PROTOBUF = "application/x-protobuf"
_DISCARD_CAP = 64 * 1024 * 1024
_PIECE = 256 * 1024  # bytes of a body read (and reserved) at a time
_JSON = "application/json"


def _make_handler(
    config: CollectorConfig,
    admission: Admission,
    stats: Stats,
    ingest: Ingest,
    health: Callable[..., dict[str, Any]],
    status_report: Callable[[], dict[str, Any]],
    grpc_port: int,
) -> type[http.server.BaseHTTPRequestHandler]:
    limit = config.max_request_bytes
    client_timeout_s = config.client_timeout_s
    routes = {"/v1/traces": otlp.TRACES, "/v1/logs": otlp.LOGS}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "spanscore"
        sys_version = ""
        timeout = 60  # seconds a connection may sit idle between requests
        server: OTLPHTTPServer
        body_read = False
        watch: Deadlines.Watch | None = None

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("http %s", format % args)

        def parse_request(self) -> bool:
            if getattr(self, "raw_requestline", b"").startswith(b"PRI * HTTP/2"):
                _endpoint_mistake(
                    "grpc-to-http-port",
                    f"an OTLP/gRPC exporter is sending to the OTLP/HTTP port "
                    f"{self.server.port}: point it at the gRPC port {grpc_port}, "
                    "or switch it to OTLP/HTTP (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)",
                )
            return bool(super().parse_request())

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            if self.command == "POST" and not self.body_read:
                self._discard_body()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def _error(
            self,
            http_status: int,
            code: int,
            message: str,
            as_json: bool,
            retry: float | None = None,
        ) -> None:
            message = otlp.client_message(message)
            status = status_pb2.Status(code=code, message=message)
            if as_json:
                body = json.dumps({"code": code, "message": message}).encode()
            else:
                body = status.SerializeToString()
            headers = {"Retry-After": str(max(1, int(retry)))} if retry is not None else {}
            if http_status == 401:
                headers["WWW-Authenticate"] = "Bearer"
            self._send(http_status, body, _JSON if as_json else _PROTOBUF, headers)

        def _json_doc(self, status: int, doc: dict[str, Any]) -> None:
            self._send(status, json.dumps(doc, default=str).encode(), _JSON)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/healthz"):
                doc = health(detailed=admission.authenticated(self.headers.get("Authorization")))
                self._json_doc(200 if doc["status"] == "ok" else 503, doc)
            elif path in ("/status", "/metrics"):
                if not admission.authorized(self.headers.get("Authorization")):
                    self._error(
                        401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token", True
                    )
                    return
                if path == "/status":
                    self._json_doc(200, status_report())
                else:
                    text = prometheus.render(status_report()).encode()
                    self._send(200, text, prometheus.CONTENT_TYPE)
            else:
                self._json_doc(404, {"error": f"no such endpoint: GET {path}"})

        def _discard_body(self) -> None:
            """Read an unwanted body so the client sees our answer instead of a reset.

            Closing a socket with unread data makes the kernel reset the connection, and a
            client still sending then gets a broken pipe, not the 4xx. Past a cap we give up
            and close.
            """
            self.body_read = True
            self.close_connection = True
            remaining = self._content_length()
            if remaining is None or remaining > _DISCARD_CAP:
                return
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    return
                remaining -= len(chunk)

        def _content_length(self) -> int | None:
            """The body's length, or None when the header is missing, repeated with different
            values, or anything but digits (RFC 9110 8.6). int() alone would take "-1" (read to
            the end of the stream, past every limit), "+5" and "1_0"."""
            values = {v.strip() for v in self.headers.get_all("Content-Length") or ()}
            if len(values) != 1:
                return None
            (value,) = values
            if not (value.isascii() and value.isdigit()):
                return None
            return int(value)

        def _receive(self, as_json: bool) -> Body | None:
            """The request body, read under the receive budget; None once answered."""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return self._receive_chunked(as_json)
            if self.headers.get("Content-Length") is None:
                self.close_connection = True
                self._error(411, code_pb2.INVALID_ARGUMENT, "Content-Length is required", as_json)
                return None
            length = self._content_length()
            if length is None:
                self.close_connection = True
                self._error(
                    400,
                    code_pb2.INVALID_ARGUMENT,
                    "bad Content-Length: send one length, in decimal digits",
                    as_json,
                )
                return None
            if length > limit:
                stats.add("refused_too_large")
                self._error(
                    413,
                    code_pb2.INVALID_ARGUMENT,
                    f"request body of {length} bytes is over the limit of {limit} bytes",
                    as_json,
                )
                return None
            self.body_read = True
            body = Body(budget=admission.receiving)
            if not self._read_into(body, length, as_json):
                body.close()
                return None
            return body

        def _read_into(self, body: Body, size: int, as_json: bool) -> bool:
            """Append `size` bytes to `body`, a piece at a time, each piece first reserved in
            the receive budget (a slow client holds only what it has sent). False once
            answered: the budget is spent, or the client stopped or was too slow."""
            while size > 0:
                want = min(size, _PIECE)
                if not body.reserve(want):
                    self.close_connection = True
                    stats.add("refused_receive_budget")
                    self._error(
                        503,
                        code_pb2.UNAVAILABLE,
                        "the collector is receiving too much at once; retry",
                        as_json,
                        retry=1,
                    )
                    return False
                chunk = self.rfile.read(want)
                body.append(chunk, want)
                if len(chunk) < want:  # end of stream: the client left, or was cut
                    self.close_connection = True
                    if self.watch is not None and self.watch.expired:
                        stats.add("refused_client_too_slow")
                        self._error(
                            408,
                            code_pb2.DEADLINE_EXCEEDED,
                            f"the body did not arrive within {client_timeout_s:g}s",
                            as_json,
                        )
                    return False
                size -= len(chunk)
            return True

        def _receive_chunked(self, as_json: bool) -> Body | None:
            self.body_read = True  # a partly read chunked body cannot be drained: we close
            body = Body(budget=admission.receiving)
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    if self.watch is not None and self.watch.expired:
                        stats.add("refused_client_too_slow")
                        self._error(
                            408,
                            code_pb2.DEADLINE_EXCEEDED,
                            f"the body did not arrive within {client_timeout_s:g}s",
                            as_json,
                        )
                    else:
                        self._error(400, code_pb2.INVALID_ARGUMENT, "bad chunked encoding", as_json)
                    body.close()
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                if body.size + size > limit:
                    self.close_connection = True
                    stats.add("refused_too_large")
                    self._error(
                        413,
                        code_pb2.INVALID_ARGUMENT,
                        f"request body is over the limit of {limit} bytes",
                        as_json,
                    )
                    body.close()
                    return None
                if not self._read_into(body, size, as_json):
                    body.close()
                    return None
                self.rfile.readline(1024)

        def do_POST(self) -> None:
            self.body_read = False
            # The client has until the deadline to send its body (see Deadlines).
            self.watch: Deadlines.Watch | None = admission.deadlines.watch(
                self.connection, client_timeout_s
            )
            try:
                with self.server.requests:
                    self._post()
            finally:
                if self.watch.finish():
                    self.close_connection = True  # its read side is shut

        def _post(self) -> None:
            path = self.path.split("?", 1)[0]
            content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            as_json = content_type == _JSON
            shape = routes.get(path)
            metrics = path == "/v1/metrics"
            if shape is None and not metrics:
                self.close_connection = True
                _endpoint_mistake(path, _endpoint_fix(path, self.server.port))
                self._error(
                    404, code_pb2.NOT_FOUND, f"no OTLP endpoint at {otlp.clip(path)}", as_json
                )
                return
            if not admission.authorized(self.headers.get("Authorization")):
                self.close_connection = True
                stats.add("refused_unauthenticated")
                self._error(401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token", as_json)
                return
            if content_type not in (_PROTOBUF, _JSON):
                self.close_connection = True
                stats.add("refused_bad_content_type")
                self._error(
                    415,
                    code_pb2.INVALID_ARGUMENT,
                    f"unsupported Content-Type {otlp.clip(content_type or '(none)')!r}: "
                    f"send {_PROTOBUF} or {_JSON}",
                    as_json,
                )
                return
            encoding = self.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity", "gzip"):
                stats.add("refused_bad_request")
                self._error(
                    415,
                    code_pb2.INVALID_ARGUMENT,
                    f"unsupported Content-Encoding {otlp.clip(encoding)!r}",
                    as_json,
                )
                return
            # The body first, without a decoding slot: a slow client must not hold one.
            body = self._receive(as_json)
            if body is None:
                return
            assert self.watch is not None
            self.watch.finish()  # the body is in; answering may take a commit's time
            try:
                if shape is None:
                    self._answer_metrics(body, as_json, encoding == "gzip")
                else:
                    self._decode_and_answer(shape, body, as_json, encoding == "gzip")
            finally:
                body.close()

        def _answer_metrics(self, body: Body, as_json: bool, gzipped: bool) -> None:
            try:
                data = body.take()
                answer = metrics_refused.answer(
                    otlp.gunzip(data, limit) if gzipped else data, as_json
                )
            except otlp.BadRequest as exc:
                too_large = isinstance(exc, otlp.TooLarge)
                stats.add("refused_too_large" if too_large else "refused_bad_request")
                self._error(413 if too_large else 400, code_pb2.INVALID_ARGUMENT, str(exc), as_json)
                return
            stats.add("metrics_exports_not_stored")
            self._send(200, answer, _JSON if as_json else _PROTOBUF)

        def _decode_and_answer(
            self, shape: otlp._Shape, body: Body, as_json: bool, gzipped: bool
        ) -> None:
            refusal = admission.admit()
            if refusal is not None:
                self._error(
                    _HTTP_STATUS.get(refusal.code, 503),
                    refusal.code,
                    refusal.message,
                    as_json,
                    refusal.retry_after_s,
                )
                return
            if gzipped:  # inside the slot: inflating takes up to `limit` bytes more
                compressed = body.take()
                body.close()  # its receive budget: the compressed bytes go with this frame
                try:
                    body = Body(otlp.gunzip(compressed, limit))
                except otlp.BadRequest as exc:
                    admission.release()
                    too_large = isinstance(exc, otlp.TooLarge)
                    stats.add("refused_too_large" if too_large else "refused_bad_request")
                    self._error(
                        413 if too_large else 400, code_pb2.INVALID_ARGUMENT, str(exc), as_json
                    )
                    return
                del compressed  # a request waiting for its commit holds rows, not bytes
            outcome = ingest(shape, body, as_json, admitted=True)
            if outcome.code == code_pb2.OK:
                assert outcome.body is not None
                self._send(200, outcome.body, _JSON if as_json else _PROTOBUF)
            else:
                self._error(
                    _HTTP_STATUS.get(outcome.code, 500),
                    outcome.code,
                    outcome.message,
                    as_json,
                    outcome.retry_after_s,
                )

    return Handler
