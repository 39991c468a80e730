"""The collector's lifecycle: `Collector` starts, wires and stops its parts.

The parts, each in its own module: admission (the token and the limits a client meets),
the flattening pool, the group-commit writer, the shared export path (ingest), the gRPC and
HTTP front ends over it (the gRPC port's own listener, `grpc_port`, in front of grpcio unless
`grpc_listener` is `grpcio`), and lake maintenance.

`start()` takes the lake's single-writer lock, connects, starts the writer and the pool, then
opens the front ends (ports 0 pick free ports: read `grpc_port` / `http_port`), and the
maintenance thread when `maintenance_interval_s` > 0. A failure while starting stops what was
started.

`stop(timeout)` stops taking exports (new ones are refused as retryable), then commits and
answers every export already queued, waits for the requests in progress, and closes, all
within `timeout`; it returns whether everything queued was committed, and is idempotent.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from spanscore import lake

from . import secrets
from .admission import Admission
from .config import CollectorConfig
from .flatten import Limits
from .grpc_front import start_grpc
from .grpc_port import GrpcPort, private_address
from .http_front import OTLPHTTPServer, start_http
from .ingest import Ingest
from .maintenance import Maintenance
from .pool import FlattenPool
from .stats import Stats
from .writer import GroupCommitWriter

log = logging.getLogger("spanscore.collector")

# How often /status and /metrics measure the lake's size, at most (one catalog query).
LAKE_SIZE_EVERY_S = 10.0


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
        self.admission = Admission(
            self._token, config.max_concurrent_requests, config.max_receiving_bytes, self.stats
        )
        self._closing = False
        self._stopped = False
        self.grpc_port = 0
        self.http_port = 0
        self._con: Any = None
        self._single: contextlib.ExitStack | None = None
        self.writer: GroupCommitWriter | None = None
        self.ingest: Ingest | None = None
        self.maintenance: Maintenance | None = None
        self._size_lock = threading.Lock()
        self._size: dict[str, dict[str, int]] = {}
        self._size_at = -LAKE_SIZE_EVERY_S
        self._size_failed = False
        self._grpc: grpc.Server | None = None
        self._grpc_port: GrpcPort | None = None
        self._remove_private: Callable[[], None] | None = None
        self._http: OTLPHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> Collector:
        cfg = self.config
        self.location = lake.LakeLocation.parse(cfg.lake, cfg.data_path)
        self._single = contextlib.ExitStack()
        record_holder = self._single.enter_context(lake.single_writer(self.location))
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
            lake.side_cursor(self._con),
            self.stats,
            batch_rows=cfg.batch_rows,
            batch_delay_s=cfg.batch_delay_ms / 1000,
            queue_rows=cfg.queue_rows,
            queue_bytes=cfg.queue_bytes,
            commit_deadline_s=cfg.commit_deadline_s,
            dedup_keys=cfg.dedup_keys,
            shared=self.location.is_postgres,
        )
        self.maintenance = Maintenance(cfg, self.location, self._con, self.writer, self.stats)
        self.writer.on_commit = self.maintenance.count_commit
        self.writer.start()
        try:
            self.pool = FlattenPool(
                self.limits, self.config.conversation_attribute, self.config.workers
            )
            self.ingest = Ingest(
                self.admission, self.pool, self.writer, self.stats, cfg.commit_deadline_s
            )
            self.admission.open()
            self._spawn(self.admission.deadlines.run, "spanscore-deadlines")
            if cfg.grpc_listener == "collector":
                private, self._remove_private = private_address()
                self._grpc, _ = start_grpc(cfg, self.admission, self.stats, self.ingest, private)
                self._grpc_port = GrpcPort(cfg.host, cfg.grpc_port, private, self.stats)
                self.grpc_port = self._grpc_port.port
            else:
                self._grpc, self.grpc_port = start_grpc(
                    cfg, self.admission, self.stats, self.ingest
                )
            self._http = start_http(
                cfg,
                self.admission,
                self.stats,
                self.ingest,
                health=self.health,
                status_report=self.status,
                grpc_port=self.grpc_port,
            )
            self.http_port = self._http.port
            self._spawn(self._http.serve_forever, "spanscore-http")
            # Where it listens, for a process that finds the lake held (`simulate` sends there).
            record_holder(http=self.http_url(), auth="yes" if self._token else "no")
            if self._grpc_port is not None:
                self._grpc_port.start(self.http_port)
        except Exception:
            self.stop(timeout=5)
            raise
        if cfg.maintenance_interval_s > 0:
            self._spawn(self.maintenance.run, "spanscore-maintenance")
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

    def http_url(self) -> str:
        """The URL this host reaches the OTLP/HTTP port at (a wildcard address is loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(
            self.config.host, self.config.host
        )
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if self.config.tls_cert is not None else "http"
        return f"{scheme}://{host}:{self.http_port}"

    def __enter__(self) -> Collector:
        # `with start_collector(...)`: already started; a second start would leak the first.
        return self if self.writer is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop taking exports, commit and answer every queued one, close. Idempotent."""
        if self._stopped:
            return True
        self._stopped = True
        self._closing = True
        self.admission.close()
        deadline = time.monotonic() + timeout
        if self._grpc_port is not None:
            self._grpc_port.close()  # no new connections; those open carry the grace period
        grpc_done = self._grpc.stop(grace=timeout) if self._grpc is not None else None
        if self._http is not None:
            self._http.shutdown()  # stops accepting; in-flight handlers go on
        drained = (
            self.writer.shutdown(max(0.1, deadline - time.monotonic())) if self.writer else True
        )
        if grpc_done is not None:
            grpc_done.wait(max(0.1, deadline - time.monotonic()))
        if self._grpc_port is not None:
            self._grpc_port.shutdown(max(0.1, deadline - time.monotonic()))
        if self._remove_private is not None:
            self._remove_private()
        if self._http is not None:
            self._http.requests.wait_idle(max(0.1, deadline - time.monotonic()))
            self._http.server_close()
        if self.maintenance is not None:
            self.maintenance.stop()
        self.admission.deadlines.close()
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
        snapshot["gauges"]["receiving_bytes"] = self.admission.receiving.used  # type: ignore[index]
        data = self.maintenance.data_kept() if self.maintenance is not None else {}
        return {**self.health(detailed=True), **snapshot, "data": data, "lake": self.lake_size()}

    def lake_size(self) -> dict[str, dict[str, int]]:
        """The lake's size per table (`spanscore.lake.data_size`), measured at most every
        `LAKE_SIZE_EVERY_S`: a scrape costs one catalog query at most, and a burst of them
        none. Empty until it could be measured (a catalog that fails is logged, once)."""
        with self._size_lock:
            if self._con is None or time.monotonic() < self._size_at + LAKE_SIZE_EVERY_S:
                return self._size
            self._size_at = time.monotonic()
            try:
                cursor = self._con.cursor()
                try:
                    self._size = lake.data_size(cursor)
                finally:
                    cursor.close()
            except Exception as exc:  # /status and /metrics answer without it
                if not self._size_failed:
                    log.warning("could not measure the lake: %s", secrets.describe_error(exc))
                self._size_failed = True
            return self._size
