"""The collector: OTLP/gRPC and OTLP/HTTP front ends over one group-commit writer.

Both front ends share `Collector.ingest`, which decodes, flattens, submits and waits for the
commit; they differ only in how a request arrives and how an outcome is answered.
"""

from __future__ import annotations

import hmac
import http.server
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from spanscore import lake

from . import otlp
from .config import CollectorConfig
from .flatten import Limits, summarize
from .pool import FlattenPool
from .stats import Stats
from .writer import GroupCommitWriter, Pending, QueueFull, WriterClosed

log = logging.getLogger("spanscore.collector")


@dataclass
class Outcome:
    """How an export ended, in protocol-neutral terms."""

    code: int  # google.rpc.Code
    message: str = ""
    rejected: int = 0
    retry_after_s: float | None = None
    body: bytes | None = None  # the success response, encoded for the request's format


class Collector:
    """Run with `start()` / `stop()` or as a context manager. Ports 0 pick free ports."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.stats = Stats()
        self.limits = Limits(
            max_attributes=config.max_attributes,
            max_value_length=config.max_attribute_length,
            redact_patterns=tuple(config.redact),
        )
        self.pool: FlattenPool | None = None
        self._token = config.bearer_token()
        self._admission = threading.BoundedSemaphore(config.max_concurrent_requests)
        self._closing = False
        self._stopped = False
        self._maintenance_stop = threading.Event()
        self.grpc_port = 0
        self.http_port = 0
        self._con: Any = None
        self.writer: GroupCommitWriter | None = None
        self._grpc: grpc.Server | None = None
        self._http: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Collector:
        cfg = self.config
        self._con = lake.connect(cfg.lake, create=True, data_path=cfg.data_path)
        self.location = lake.LakeLocation.parse(cfg.lake, cfg.data_path)
        self.writer = GroupCommitWriter(
            self._con.cursor(),
            self.stats,
            batch_rows=cfg.batch_rows,
            batch_delay_s=cfg.batch_delay_ms / 1000,
            queue_rows=cfg.queue_rows,
            commit_deadline_s=cfg.commit_deadline_s,
            dedup_keys=cfg.dedup_keys,
        )
        self.writer.start()
        try:
            self.pool = FlattenPool(
                self.limits, self.config.conversation_attribute, self.config.workers
            )
            self._start_grpc()
            self._start_http()
        except Exception:
            self.stop(timeout=5)
            raise
        if cfg.maintenance_interval_s > 0:
            self._spawn(self._maintenance_loop, "spanscore-maintenance")
        log.info(
            "listening",
            extra={
                "lake": self.location.describe(),
                "grpc": f"{cfg.host}:{self.grpc_port}",
                "http": f"{cfg.host}:{self.http_port}",
                "tls": cfg.tls_cert is not None,
                "auth": self._token is not None,
            },
        )
        return self

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop taking exports, commit and answer every queued one, close. Idempotent."""
        if self._stopped:
            return True
        self._stopped = True
        self._closing = True
        deadline = time.monotonic() + timeout
        grpc_done = self._grpc.stop(grace=timeout) if self._grpc is not None else None
        if self._http is not None:
            self._http.shutdown()  # stops accepting; in-flight handlers go on
        drained = (
            self.writer.shutdown(max(0.1, deadline - time.monotonic())) if self.writer else True
        )
        if grpc_done is not None:
            grpc_done.wait(max(0.1, deadline - time.monotonic()))
        if self._http is not None:
            self._http.requests.wait_idle(max(0.1, deadline - time.monotonic()))
            self._http.server_close()
        self._maintenance_stop.set()
        if self.pool is not None:
            self.pool.close()
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        if self._con is not None:
            self._con.close()
        log.info("stopped", extra={"drained": drained, **self.stats.snapshot()["counters"]})  # type: ignore[dict-item]
        return drained

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _maintenance_loop(self) -> None:
        con = self._con.cursor()
        while not self._maintenance_stop.wait(self.config.maintenance_interval_s):
            try:
                started = time.monotonic()
                done = lake.maintain(
                    con,
                    expire_older_than_s=self.config.snapshot_retention_s,
                    delete_older_than_s=self.config.snapshot_retention_s,
                )
                self.stats.add("maintenance_runs")
                log.info(
                    "maintenance",
                    extra={**done, "seconds": round(time.monotonic() - started, 3)},
                )
            except Exception as exc:  # maintenance must never stop ingestion
                self.stats.add("maintenance_failed")
                log.warning("maintenance failed: %s", exc)

    # --- the shared export path ---------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        ok = not self._closing and self.writer is not None and self.writer.healthy
        return {
            "status": "ok" if ok else ("stopping" if self._closing else "degraded"),
            "last_error": self.writer.last_error if self.writer else None,
        }

    def status(self) -> dict[str, Any]:
        return {**self.health(), **self.stats.snapshot()}

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token.encode())

    def admit(self) -> Outcome | None:
        """Take one of the `max_concurrent_requests` decoding slots, or say why not.

        Bodies are read (HTTP) and decoded only inside a slot, so the memory they take is
        bounded whatever the number of connections. Release with `release()`.
        """
        if self._closing or self.writer is None or self.pool is None:
            self.stats.add("refused_shutting_down")
            return Outcome(code_pb2.UNAVAILABLE, "the collector is shutting down", retry_after_s=5)
        if not self._admission.acquire(timeout=1.0):
            self.stats.add("refused_busy")
            return Outcome(
                code_pb2.RESOURCE_EXHAUSTED, "too many concurrent requests", retry_after_s=1
            )
        return None

    def release(self) -> None:
        self._admission.release()

    def ingest(
        self, shape: otlp._Shape, body: bytes, as_json: bool, admitted: bool = False
    ) -> Outcome:
        """Decode, flatten, queue and wait for the commit. Never raises.

        With `admitted`, the caller already holds a slot from `admit()`; it is released here
        once the body is decoded.
        """
        signal = "spans" if shape is otlp.TRACES else "logs"
        if not admitted:
            refusal = self.admit()
            if refusal is not None:
                return refusal
        assert self.pool is not None
        assert self.writer is not None
        try:
            try:
                flat = self.pool.run(signal, body, as_json)
            except otlp.BadRequest as exc:
                self.stats.add("refused_bad_request")
                return Outcome(code_pb2.INVALID_ARGUMENT, str(exc))
            except Exception as exc:  # a bug must answer the client, not kill the handler
                log.exception("could not decode an export")
                self.stats.add("refused_internal")
                return Outcome(code_pb2.INTERNAL, f"could not read the request: {exc}")
        finally:
            self.release()
        rejected = flat.rejected
        problems = flat.problems
        self.stats.add(f"{signal}_received", flat.rows + rejected)
        self.stats.add(f"{signal}_rejected", rejected)
        self.stats.add(f"{signal}_truncated", flat.truncated)
        pending = Pending(**{signal: flat.batch})
        message = summarize(problems)
        if flat.rows:
            try:
                self.writer.submit(pending)
            except QueueFull as exc:
                self.stats.add(f"{signal}_refused_queue_full", flat.rows)
                return Outcome(
                    code_pb2.RESOURCE_EXHAUSTED, str(exc), retry_after_s=exc.retry_after_s
                )
            except WriterClosed as exc:
                self.stats.add(f"{signal}_refused_shutting_down", flat.rows)
                return Outcome(code_pb2.UNAVAILABLE, str(exc), retry_after_s=5)
            if not pending.done.wait(self.config.commit_deadline_s + 5):
                self.stats.add(f"{signal}_unacknowledged_timeout", flat.rows)
                return Outcome(
                    code_pb2.UNAVAILABLE, "the commit is taking too long; retry", retry_after_s=5
                )
            if pending.error is not None:
                return Outcome(
                    code_pb2.UNAVAILABLE,
                    f"the lake did not accept the commit: {pending.error}",
                    retry_after_s=5,
                )
        return Outcome(
            code_pb2.OK,
            message,
            rejected=rejected,
            body=otlp.response_bytes(shape, rejected, message, as_json),
        )

    # --- gRPC ---------------------------------------------------------------------------------

    def _start_grpc(self) -> None:
        cfg = self.config
        options = [
            ("grpc.max_receive_message_length", cfg.max_request_bytes),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=cfg.max_concurrent_requests, thread_name_prefix="spanscore-grpc"
            ),
            options=options,
            # Bounds the request bodies gRPC holds (each up to max_request_bytes); beyond it
            # gRPC answers RESOURCE_EXHAUSTED, which exporters retry.
            maximum_concurrent_rpcs=cfg.max_concurrent_requests * 2,
        )
        handlers = {
            "opentelemetry.proto.collector.trace.v1.TraceService": self._grpc_method(otlp.TRACES),
            "opentelemetry.proto.collector.logs.v1.LogsService": self._grpc_method(otlp.LOGS),
        }
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(service, {"Export": handler})
                for service, handler in handlers.items()
            ]
        )
        address = f"{_bracket(cfg.host)}:{cfg.grpc_port}"
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            creds = grpc.ssl_server_credentials(
                [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())]
            )
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"cannot bind OTLP/gRPC to {address}")
        server.start()
        self._grpc = server
        self.grpc_port = port

    def _grpc_method(self, shape: otlp._Shape) -> grpc.RpcMethodHandler:
        def export(request: bytes, context: grpc.ServicerContext) -> bytes:
            metadata = dict(context.invocation_metadata())
            if not self.authorized(_text(metadata.get("authorization"))):
                self.stats.add("refused_unauthenticated")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
            outcome = self.ingest(shape, request, as_json=False)
            if outcome.code == code_pb2.OK:
                assert outcome.body is not None
                return outcome.body
            context.abort_with_status(_grpc_status(outcome))
            raise AssertionError("unreachable")  # abort_with_status raises

        return grpc.unary_unary_rpc_method_handler(export)

    # --- HTTP ---------------------------------------------------------------------------------

    def _start_http(self) -> None:
        cfg = self.config
        server = _HTTPServer((cfg.host, cfg.http_port), _make_handler(self))
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key))
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._http = server
        self.http_port = server.server_address[1]
        self._spawn(server.serve_forever, "spanscore-http")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


class _GrpcStatus(grpc.Status):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[Any, ...]):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing


def _grpc_status(outcome: Outcome) -> grpc.Status:
    """A gRPC status with google.rpc.Status details; RetryInfo for the retryable refusals."""
    status = status_pb2.Status(code=outcome.code, message=outcome.message)
    if outcome.retry_after_s is not None:
        info = error_details_pb2.RetryInfo(
            retry_delay=duration_pb2.Duration(seconds=int(outcome.retry_after_s))
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status.details.append(detail)
    return _GrpcStatus(
        _GRPC_CODES[outcome.code],
        outcome.message,
        (("grpc-status-details-bin", status.SerializeToString()),),
    )


class _HTTPServer(http.server.ThreadingHTTPServer):
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
        super().__init__(address, handler)


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
    code_pb2.UNAUTHENTICATED: 401,
    code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.UNAVAILABLE: 503,
    code_pb2.INTERNAL: 500,
}
_PROTOBUF = "application/x-protobuf"
_DISCARD_CAP = 64 * 1024 * 1024
_JSON = "application/json"


def _make_handler(collector: Collector) -> type[http.server.BaseHTTPRequestHandler]:
    limit = collector.config.max_request_bytes
    routes = {"/v1/traces": otlp.TRACES, "/v1/logs": otlp.LOGS}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "spanscore"
        sys_version = ""
        timeout = 60  # seconds a connection may sit idle or stall mid-body
        body_read = False

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("http %s", format % args)

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
                health = collector.health()
                self._json_doc(200 if health["status"] == "ok" else 503, health)
            elif path == "/status":
                if not collector.authorized(self.headers.get("Authorization")):
                    self._error(
                        401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token", True
                    )
                    return
                self._json_doc(200, collector.status())
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
            try:
                remaining = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return
            if remaining > _DISCARD_CAP:
                return
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    return
                remaining -= len(chunk)

        def _read_body(self, as_json: bool) -> bytes | None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return self._read_chunked(as_json)
            length_header = self.headers.get("Content-Length")
            if length_header is None:
                self.close_connection = True
                self._error(411, code_pb2.INVALID_ARGUMENT, "Content-Length is required", as_json)
                return None
            try:
                length = int(length_header)
            except ValueError:
                self.close_connection = True
                self._error(400, code_pb2.INVALID_ARGUMENT, "bad Content-Length", as_json)
                return None
            if length > limit:
                collector.stats.add("refused_too_large")
                self._error(
                    413,
                    code_pb2.INVALID_ARGUMENT,
                    f"request body of {length} bytes is over the limit of {limit} bytes",
                    as_json,
                )
                return None
            self.body_read = True
            return self.rfile.read(length)

        def _read_chunked(self, as_json: bool) -> bytes | None:
            self.body_read = True  # a partly read chunked body cannot be drained: we close
            parts: list[bytes] = []
            total = 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    self._error(400, code_pb2.INVALID_ARGUMENT, "bad chunked encoding", as_json)
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                total += size
                if total > limit:
                    self.close_connection = True
                    collector.stats.add("refused_too_large")
                    self._error(
                        413,
                        code_pb2.INVALID_ARGUMENT,
                        f"request body is over the limit of {limit} bytes",
                        as_json,
                    )
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)

        def do_POST(self) -> None:
            self.body_read = False
            with self.server.requests:  # type: ignore[attr-defined]
                self._post()

        def _post(self) -> None:
            path = self.path.split("?", 1)[0]
            content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            as_json = content_type == _JSON
            shape = routes.get(path)
            if shape is None:
                self.close_connection = True
                self._error(404, code_pb2.NOT_FOUND, f"no OTLP endpoint at {path}", as_json)
                return
            if not collector.authorized(self.headers.get("Authorization")):
                self.close_connection = True
                collector.stats.add("refused_unauthenticated")
                self._error(401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token", as_json)
                return
            if content_type not in (_PROTOBUF, _JSON):
                self.close_connection = True
                collector.stats.add("refused_bad_content_type")
                self._error(
                    415,
                    code_pb2.INVALID_ARGUMENT,
                    f"unsupported Content-Type {content_type or '(none)'!r}: "
                    f"send {_PROTOBUF} or {_JSON}",
                    as_json,
                )
                return
            refusal = collector.admit()
            if refusal is not None:
                self._error(
                    _HTTP_STATUS.get(refusal.code, 503),
                    refusal.code,
                    refusal.message,
                    as_json,
                    refusal.retry_after_s,
                )
                return
            try:
                body = self._read_body(as_json)
            except BaseException:
                collector.release()
                raise
            if body is None:
                collector.release()
                return
            encoding = self.headers.get("Content-Encoding", "").strip().lower()
            failure: tuple[int, str] | None = None
            if encoding == "gzip":
                try:
                    body = otlp.gunzip(body, limit)
                except otlp.TooLarge as exc:
                    collector.stats.add("refused_too_large")
                    failure = (413, str(exc))
                except otlp.BadRequest as exc:
                    collector.stats.add("refused_bad_request")
                    failure = (400, str(exc))
            elif encoding not in ("", "identity"):
                collector.stats.add("refused_bad_request")
                failure = (415, f"unsupported Content-Encoding {encoding!r}")
            if failure is not None:
                collector.release()
                self._error(failure[0], code_pb2.INVALID_ARGUMENT, failure[1], as_json)
                return
            outcome = collector.ingest(shape, body, as_json, admitted=True)
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
