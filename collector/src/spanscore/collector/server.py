"""The collector: OTLP/gRPC and OTLP/HTTP front ends over one group-commit writer.

Both front ends share `Collector.ingest`, which decodes, flattens, submits and waits for the
commit; they differ only in how a request arrives and how an outcome is answered.
"""

from __future__ import annotations

import contextlib
import heapq
import hmac
import http.server
import json
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from spanscore import lake

from . import otlp, secrets
from .config import SMALL_COMMIT_SPANS, CollectorConfig
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

    def __post_init__(self) -> None:
        self.message = otlp.client_message(self.message)


class ByteBudget:
    """Bytes the collector may hold for one purpose at once; `take` refuses past the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Body:
    """A request body that is let go as soon as it is decoded.

    Handlers wait for the commit after decoding; a waiting handler that kept its body made
    memory grow with the number of waiting requests (1.4 GiB for 148 queued rows), whatever
    the write queue's limits. `take()` hands the bytes over once; `close()` gives back the
    receive budget they held (idempotent).
    """

    def __init__(self, data: bytes = b"", budget: ByteBudget | None = None) -> None:
        self.parts: list[bytes] = [data] if data else []
        self.size = len(data)
        self._budget = budget
        self._held = 0

    def reserve(self, n: int) -> bool:
        if self._budget is not None:
            if not self._budget.take(n):
                return False
            self._held += n
        return True

    def append(self, chunk: bytes, reserved: int) -> None:
        """Keep `chunk`, read into `reserved` bytes of budget (the rest is given back)."""
        if self._budget is not None and reserved > len(chunk):
            self._budget.give(reserved - len(chunk))
            self._held -= reserved - len(chunk)
        if chunk:
            self.parts.append(chunk)
            self.size += len(chunk)

    def take(self) -> bytes:
        data = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
        self.parts = []
        return data

    def close(self) -> None:
        self.parts = []
        if self._budget is not None and self._held:
            self._budget.give(self._held)
            self._held = 0


class Deadlines:
    """Cuts the connections of clients that are too slow: one thread watches them all.

    A client sending its body at 1 byte per 10 s, or opening a TLS connection and saying
    nothing, passes every per-read timeout and would hold its thread and its bytes as long as
    it liked. At the deadline the read side of its socket is shut down: the blocked read
    returns, and the handler can still answer.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadlines.Watch]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._closed = False
        self._compact_at = 4096

    class Watch:
        __slots__ = ("expired", "finished", "sock")

        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock
            self.finished = False
            self.expired = False

        def finish(self) -> bool:
            """Stop watching; whether the deadline had passed (then the read side is shut)."""
            self.finished = True
            return self.expired

    def watch(self, sock: socket.socket, seconds: float) -> Deadlines.Watch:
        watch = Deadlines.Watch(sock)
        deadline = time.monotonic() + seconds
        with self._cond:
            if len(self._heap) >= self._compact_at:
                # Most watches finish long before their deadline; drop them in one pass now
                # and then, or the heap would hold every request of the last client_timeout_s.
                self._heap = [entry for entry in self._heap if not entry[2].finished]
                heapq.heapify(self._heap)
                self._compact_at = max(4096, 2 * len(self._heap))
            self._seq += 1
            # The thread sleeps until the earliest deadline: wake it only for an earlier one.
            wake = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, self._seq, watch))
            if wake:
                self._cond.notify()
        return watch

    def run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][2].finished):
                    _, _, watch = heapq.heappop(self._heap)
                    if not watch.finished:
                        watch.expired = True
                        with contextlib.suppress(OSError):
                            # The plain socket's method: SSLSocket.shutdown would also drop
                            # TLS, and the answer would go out unencrypted.
                            socket.socket.shutdown(watch.sock, socket.SHUT_RD)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()


# Longest a maintenance step retries while it holds the writer (see `_maintenance_loop`).
MAINTENANCE_STEP_DEADLINE_S = 5.0


class Collector:
    """Run with `start()` / `stop()` or as a context manager. Ports 0 pick free ports."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.stats = Stats()
        self.limits = Limits(
            max_attributes=config.max_attributes,
            max_value_length=config.max_attribute_length,
            max_key_length=config.max_attribute_key_length,
            max_items_per_request=config.max_items_per_request,
            redact_patterns=tuple(config.redact),
        )
        self.pool: FlattenPool | None = None
        self._token = config.bearer_token()
        secrets.register(self._token)
        for spec in (config.lake, config.data_path):
            if spec:
                secrets.register_connection_string(spec)
        self._admission = threading.BoundedSemaphore(config.max_concurrent_requests)
        self.receiving = ByteBudget(config.max_receiving_bytes)
        self.deadlines = Deadlines()
        self._closing = False
        self._stopped = False
        self._maintenance_stop = threading.Event()
        # Set when `compact_after_commits` commits, or `compact_after_small_commits` small ones,
        # were made since the last compaction (or to stop): wakes the maintenance thread
        # before its interval is up.
        self._compaction_due = threading.Event()
        self._commits_since_compaction = 0
        self._spans_since_compaction = 0
        self.grpc_port = 0
        self.http_port = 0
        self._con: Any = None
        self._single: contextlib.ExitStack | None = None
        self.writer: GroupCommitWriter | None = None
        self._grpc: grpc.Server | None = None
        self._http: _HTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Collector:
        cfg = self.config
        self.location = lake.LakeLocation.parse(cfg.lake, cfg.data_path)
        self._single = contextlib.ExitStack()
        self._single.enter_context(lake.single_writer(self.location))
        try:
            self._con = lake.connect(self.location, create=True, memory_limit=cfg.memory_limit)
            # DuckDB keeps what it reads from data files (compaction reads a run's worth each
            # time) until memory_limit; the collector rarely reads a file twice (the soak: +60
            # MiB of cache each compaction).
            self._con.execute("SET enable_external_file_cache = false")
        except Exception as exc:
            self._single.close()
            # The error quotes the connection string; the chain would too: neither is kept.
            raise lake.LakeError(secrets.scrub(str(exc))) from None
        except BaseException:
            self._single.close()
            raise
        self.writer = GroupCommitWriter(
            self._con.cursor(),
            self.stats,
            batch_rows=cfg.batch_rows,
            batch_delay_s=cfg.batch_delay_ms / 1000,
            queue_rows=cfg.queue_rows,
            queue_bytes=cfg.queue_bytes,
            commit_deadline_s=cfg.commit_deadline_s,
            dedup_keys=cfg.dedup_keys,
            shared=self.location.is_postgres,
        )
        self.writer.on_commit = self._count_commit
        self.writer.start()
        try:
            self.pool = FlattenPool(
                self.limits, self.config.conversation_attribute, self.config.workers
            )
            self._spawn(self.deadlines.run, "spanscore-deadlines")
            self._start_grpc()
            self._start_http()
        except Exception:
            self.stop(timeout=5)
            raise
        if cfg.maintenance_interval_s > 0:
            self._spawn(self._maintenance_loop, "spanscore-maintenance")
        for warning in cfg.warnings():
            log.warning(warning)
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
        self._compaction_due.set()
        self.deadlines.close()
        if self.pool is not None:
            self.pool.close()
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        if self._con is not None:
            self._con.close()
        if self._single is not None:
            self._single.close()
        log.info("stopped", extra={"drained": drained, **self.stats.snapshot()["counters"]})  # type: ignore[dict-item]
        return drained

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _count_commit(self, spans: int) -> None:
        """The writer committed `spans` spans (its thread): past `compact_after_commits`
        commits, or `compact_after_small_commits` small ones, wake maintenance."""
        self._commits_since_compaction += 1
        self._spans_since_compaction += spans
        commits = self._commits_since_compaction
        due = self.config.compact_after_commits
        small_due = self.config.compact_after_small_commits
        if (due and commits >= due) or (
            small_due
            and commits >= small_due
            and self._spans_since_compaction < commits * SMALL_COMMIT_SPANS
        ):
            self._compaction_due.set()

    def _maintenance_loop(self) -> None:
        """Maintenance every `maintenance_interval_s`; between two, compaction alone whenever
        `compact_after_commits` commits, or `compact_after_small_commits` small ones, were made
        since the last (a busy lake then never holds more small files than that, whatever the
        interval)."""
        con = self._con.cursor()
        interval = self.config.maintenance_interval_s
        next_full = time.monotonic() + interval
        while True:
            self._compaction_due.wait(max(0.0, next_full - time.monotonic()))
            if self._maintenance_stop.is_set():
                return
            full = time.monotonic() >= next_full
            self._compaction_due.clear()
            self._commits_since_compaction = self._spans_since_compaction = 0
            if full:
                next_full = time.monotonic() + interval
            try:
                started = time.monotonic()
                # Several collectors on one lake: one of them at a time compacts and expires.
                with lake.elected(self.location, "maintenance") as leader:
                    if not leader:
                        self.stats.add("maintenance_skipped")
                        log.debug("maintenance: another process is running it")
                        continue
                    done = lake.maintain(
                        con,
                        expire_older_than_s=self.config.snapshot_retention_s,
                        delete_older_than_s=self.config.snapshot_retention_s,
                        exclusive=self.writer.paused if self.writer is not None else None,
                        # Exports wait while a step holds the writer: a step that another
                        # process keeps failing gives up soon and runs again next time.
                        step_deadline_s=MAINTENANCE_STEP_DEADLINE_S,
                        store_settled_after_s=(
                            self.config.store_settled_after_s
                            if self.config.store_trajectories
                            else None
                        ),
                        # a first run over a large lake goes on next time
                        store_deadline_s=max(self.config.maintenance_interval_s / 2, 1.0),
                        compact_only=not full,
                    )
                self.stats.add("maintenance_runs" if full else "compactions")
                for counted in ("span_files_sorted", "log_files_sorted", "records_resolved"):
                    self.stats.add(counted, done.get(counted, 0))
                log.info(
                    "maintenance" if full else "compaction",
                    extra={
                        **done,
                        "seconds": round(time.monotonic() - started, 3),
                        # What DuckDB holds (bounded by memory_limit), to tell it from the rest.
                        "duckdb_memory_mib": {
                            tag: size >> 20 for tag, size in lake.memory_in_use(con).items()
                        },
                    },
                )
            except Exception as exc:  # maintenance must never stop ingestion
                self.stats.add("maintenance_failed")
                log.warning("maintenance failed: %s", secrets.describe_error(exc))

    # --- the shared export path ---------------------------------------------------------------

    def health(self, detailed: bool = False) -> dict[str, Any]:
        """Up or down; `detailed` adds the last lake error (scrubbed of credentials), which
        only authenticated callers see: even scrubbed, it names hosts and databases."""
        ok = not self._closing and self.writer is not None and self.writer.healthy
        doc: dict[str, Any] = {
            "status": "ok" if ok else ("stopping" if self._closing else "degraded")
        }
        if detailed:
            doc["last_error"] = self.writer.last_error if self.writer else None
        return doc

    def status(self) -> dict[str, Any]:
        snapshot = self.stats.snapshot()
        snapshot["gauges"]["receiving_bytes"] = self.receiving.used  # type: ignore[index]
        return {**self.health(detailed=True), **snapshot}

    def authenticated(self, header: str | None) -> bool:
        """A token is configured and `header` carries it (stricter than `authorized`)."""
        return self._token is not None and self.authorized(header)

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token.encode())

    def admit(self) -> Outcome | None:
        """Take one of the `max_concurrent_requests` decoding slots, or say why not.

        A slot is taken once the body has arrived (HTTP bodies are received under
        `max_receiving_bytes` and `client_timeout_s` instead), so a slow client never holds
        one. Release with `release()`.
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
        self, shape: otlp._Shape, body: Body, as_json: bool, admitted: bool = False
    ) -> Outcome:
        """Decode, flatten, queue and wait for the commit. Never raises.

        With `admitted`, the caller already holds a slot from `admit()`; it is released here
        once the body is decoded. The body is let go then too, before the wait for the commit.
        """
        signal = "spans" if shape is otlp.TRACES else "logs"
        if not admitted:
            refusal = self.admit()
            if refusal is not None:
                return refusal
        assert self.pool is not None
        assert self.writer is not None
        data = body.take()
        try:
            try:
                flat = self.pool.run(signal, data, as_json)
            except otlp.BadRequest as exc:
                self.stats.add("refused_bad_request")
                return Outcome(code_pb2.INVALID_ARGUMENT, str(exc))
            except Exception as exc:  # a bug must answer the client, not kill the handler
                log.exception("could not decode an export")
                self.stats.add("refused_internal")
                return Outcome(code_pb2.INTERNAL, f"could not read the request: {exc}")
        finally:
            del data
            body.close()
            self.release()
        rejected = flat.rejected
        problems = flat.problems
        if flat.unexpected:
            # A shape no rule foresaw: the item is rejected, and the operator hears of it.
            self.stats.add(f"{signal}_unreadable", len(flat.unexpected))
            log.warning(
                "rejected %d %s that could not be read, first: %s",
                len(flat.unexpected),
                signal,
                flat.unexpected[0],
            )
        self.stats.add(f"{signal}_received", flat.rows + rejected)
        self.stats.add(f"{signal}_rejected", rejected)
        self.stats.add(f"{signal}_truncated", flat.truncated)
        if signal == "spans" and flat.rows:
            self.stats.add("spans_without_conversation_id", _trace_stood_in(flat.batch))
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
                # The lake's own error names hosts and databases: it goes to the log and
                # /status, not to clients.
                return Outcome(
                    code_pb2.UNAVAILABLE,
                    "the lake did not accept the commit; retry (the collector's log says why)",
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
        def export(request: Body, context: grpc.ServicerContext) -> bytes:
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

        # Wrapped, so that the bytes can be let go once decoded (see Body).
        return grpc.unary_unary_rpc_method_handler(export, request_deserializer=Body)

    # --- HTTP ---------------------------------------------------------------------------------

    def _start_http(self) -> None:
        cfg = self.config
        server = _HTTPServer((cfg.host, cfg.http_port), _make_handler(self))
        server.client_timeout_s = cfg.client_timeout_s
        server.deadlines = self.deadlines
        if cfg.tls_cert is not None and cfg.tls_key is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key))
            server.tls = context
        self._http = server
        self.http_port = server.server_address[1]
        self._spawn(server.serve_forever, "spanscore-http")


_MISTAKES_LOGGED: set[str] = set()


def _trace_stood_in(batch: pa.RecordBatch) -> int:
    """Spans that carried no conversation id of their own (the trace id stood in): an agent
    that never sets one is stored as one conversation per trace."""
    same = pc.equal(batch.column("conversation_id"), batch.column("trace_id"))
    return int(pc.sum(same).as_py() or 0)


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
        self.tls: ssl.SSLContext | None = None
        self.client_timeout_s = 30.0
        self.deadlines: Deadlines | None = None  # the collector's; needed for TLS
        super().__init__(address, handler)

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


def _make_handler(collector: Collector) -> type[http.server.BaseHTTPRequestHandler]:
    limit = collector.config.max_request_bytes
    client_timeout_s = collector.config.client_timeout_s
    routes = {"/v1/traces": otlp.TRACES, "/v1/logs": otlp.LOGS}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "spanscore"
        sys_version = ""
        timeout = 60  # seconds a connection may sit idle between requests
        body_read = False
        watch: Deadlines.Watch | None = None

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("http %s", format % args)

        def parse_request(self) -> bool:
            if getattr(self, "raw_requestline", b"").startswith(b"PRI * HTTP/2"):
                _endpoint_mistake(
                    "grpc-to-http-port",
                    f"an OTLP/gRPC exporter is sending to the OTLP/HTTP port "
                    f"{collector.http_port}: point it at the gRPC port {collector.grpc_port}, "
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
                health = collector.health(
                    detailed=collector.authenticated(self.headers.get("Authorization"))
                )
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
                collector.stats.add("refused_too_large")
                self._error(
                    413,
                    code_pb2.INVALID_ARGUMENT,
                    f"request body of {length} bytes is over the limit of {limit} bytes",
                    as_json,
                )
                return None
            self.body_read = True
            body = Body(budget=collector.receiving)
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
                    collector.stats.add("refused_receive_budget")
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
                        collector.stats.add("refused_client_too_slow")
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
            body = Body(budget=collector.receiving)
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    if self.watch is not None and self.watch.expired:
                        collector.stats.add("refused_client_too_slow")
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
                    collector.stats.add("refused_too_large")
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
            self.watch: Deadlines.Watch | None = collector.deadlines.watch(
                self.connection, client_timeout_s
            )
            try:
                with self.server.requests:  # type: ignore[attr-defined]
                    self._post()
            finally:
                if self.watch.finish():
                    self.close_connection = True  # its read side is shut

        def _post(self) -> None:
            path = self.path.split("?", 1)[0]
            content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            as_json = content_type == _JSON
            shape = routes.get(path)
            if shape is None:
                self.close_connection = True
                _endpoint_mistake(path, _endpoint_fix(path, collector.http_port))
                self._error(
                    404, code_pb2.NOT_FOUND, f"no OTLP endpoint at {otlp.clip(path)}", as_json
                )
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
                    f"unsupported Content-Type {otlp.clip(content_type or '(none)')!r}: "
                    f"send {_PROTOBUF} or {_JSON}",
                    as_json,
                )
                return
            encoding = self.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity", "gzip"):
                collector.stats.add("refused_bad_request")
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
                self._decode_and_answer(shape, body, as_json, encoding == "gzip")
            finally:
                body.close()

        def _decode_and_answer(
            self, shape: otlp._Shape, body: Body, as_json: bool, gzipped: bool
        ) -> None:
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
            if gzipped:  # inside the slot: inflating takes up to `limit` bytes more
                compressed = body.take()
                body.close()  # its receive budget: the compressed bytes go with this frame
                try:
                    body = Body(otlp.gunzip(compressed, limit))
                except otlp.BadRequest as exc:
                    collector.release()
                    too_large = isinstance(exc, otlp.TooLarge)
                    collector.stats.add("refused_too_large" if too_large else "refused_bad_request")
                    self._error(
                        413 if too_large else 400, code_pb2.INVALID_ARGUMENT, str(exc), as_json
                    )
                    return
                del compressed  # a request waiting for its commit holds rows, not bytes
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
