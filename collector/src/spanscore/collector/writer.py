"""Group commit: many exports, one lake transaction, each export answered after its commit.

Handlers flatten their request into Arrow batches and `submit` them; one writer thread takes
everything queued (up to `batch_rows`, or whatever arrived within `batch_delay_s` of the oldest
item), appends it to `spans` and `logs` in one DuckLake transaction, then wakes every handler in
the group with the outcome. Submitting never blocks: over `queue_rows` queued (plus the group
being committed) it raises `QueueFull` and the handler answers with OTLP's retryable throttling
code. Span ids committed recently are remembered, so an export retried after a lost
acknowledgement (a timeout, a crash between commit and answer) is not stored twice.

Acknowledged means committed: DuckLake has written the Parquet files and the catalog transaction
that references them, so a killed collector loses nothing it has answered with success.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from spanscore.lake import retrying, schema

from .flatten import LOGS_SCHEMA, SPANS_SCHEMA
from .stats import Stats

log = logging.getLogger("spanscore.collector.writer")


class QueueFull(Exception):
    """The write queue is full; retry after `retry_after_s`."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"the collector's write queue is full; retry in {retry_after_s:.0f}s")
        self.retry_after_s = retry_after_s


class WriterClosed(Exception):
    """The collector is shutting down and takes no new data."""


@dataclass(eq=False)
class Pending:
    """One export's rows, waiting for the commit that stores them."""

    spans: pa.RecordBatch | None = None
    logs: pa.RecordBatch | None = None
    seq: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def rows(self) -> int:
        return (self.spans.num_rows if self.spans is not None else 0) + (
            self.logs.num_rows if self.logs is not None else 0
        )


def _insert_sql(table: str, columns: tuple[schema.Column, ...], source: str) -> str:
    names = ", ".join(schema.quote_identifier(c.name) for c in columns)
    select = ", ".join(
        "now()" if c.name == "ingest_time" else schema.quote_identifier(c.name) for c in columns
    )
    return f"INSERT INTO lake.{table} ({names}) SELECT {select} FROM {source}"


_SPANS_SOURCE = """(
    SELECT * FROM incoming_spans
    WHERE hash(trace_id, span_id) NOT IN (SELECT h FROM recent_span_keys)
    QUALIFY row_number() OVER (PARTITION BY trace_id, span_id) = 1
)"""
INSERT_SPANS = _insert_sql("spans", schema.SPANS, _SPANS_SOURCE)
INSERT_LOGS = _insert_sql("logs", schema.LOGS, "incoming_logs")


class GroupCommitWriter:
    """The collector's single lake writer. `submit` from any thread; `shutdown` drains."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        stats: Stats,
        *,
        batch_rows: int = 50_000,
        batch_delay_s: float = 0.25,
        queue_rows: int = 200_000,
        commit_deadline_s: float = 30.0,
        dedup_keys: int = 1_000_000,
    ) -> None:
        if batch_rows <= 0 or queue_rows <= 0 or batch_delay_s < 0:
            raise ValueError("batch_rows and queue_rows must be positive, batch_delay_s >= 0")
        self._con = con
        self.stats = stats
        self.batch_rows = batch_rows
        self.batch_delay_s = batch_delay_s
        self.queue_rows = queue_rows
        self.commit_deadline_s = commit_deadline_s
        self.dedup_keys = dedup_keys
        self._queue: deque[Pending] = deque()
        self._queued_rows = 0
        self._inflight_rows = 0
        self._cond = threading.Condition()
        self._closing = False
        self._submitted_seq = 0
        self._finished_seq = 0
        self._recent: deque[tuple[int, int]] = deque()  # (seq, keys) per committed group
        self._recent_total = 0
        self._last_commit_s = 0.1
        self.healthy = True
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="spanscore-writer", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._con.execute("CREATE OR REPLACE TEMP TABLE recent_span_keys (h UBIGINT, seq BIGINT)")
        self._seed_recent_keys()
        self._thread.start()

    def _seed_recent_keys(self) -> None:
        """Remember the span ids of the newest commits, so a retry after a crash is no duplicate."""
        if self.dedup_keys <= 0:
            return
        self._con.execute(
            f"""INSERT INTO recent_span_keys
            SELECT hash(trace_id, span_id), 0 FROM lake.spans
            WHERE ingest_time >= (SELECT max(ingest_time) FROM lake.spans) - INTERVAL 10 MINUTE
            ORDER BY ingest_time DESC LIMIT {int(self.dedup_keys)}"""
        )
        row = self._con.execute("SELECT count(*) FROM recent_span_keys").fetchone()
        seeded = int(row[0]) if row else 0
        if seeded:
            self._recent.append((0, seeded))
            self._recent_total = seeded
        log.info("writer ready", extra={"seeded_span_keys": seeded})

    def submit(self, pending: Pending) -> Pending:
        """Queue an export's rows; never blocks. Raises QueueFull or WriterClosed."""
        rows = pending.rows
        with self._cond:
            if self._closing:
                raise WriterClosed("the collector is shutting down")
            in_memory = self._queued_rows + self._inflight_rows
            if in_memory and in_memory + rows > self.queue_rows + self.batch_rows:
                raise QueueFull(max(1.0, round(self._last_commit_s * 2)))
            self._submitted_seq += 1
            pending.seq = self._submitted_seq
            self._queue.append(pending)
            self._queued_rows += rows
            self.stats.gauge("queue_rows", self._queued_rows)
            self._cond.notify_all()
        return pending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted before this call is committed (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._submitted_seq
            self._cond.notify_all()
            while self._finished_seq < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Refuse new data, commit everything queued, stop the thread. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        drained = not self._thread.is_alive()
        if not drained:
            log.error("writer did not drain its queue within %.1fs", timeout)
        return drained

    # --- the writer thread --------------------------------------------------------------------

    def _take_group(self) -> list[Pending] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            oldest = time.monotonic()
            # Group commit: let the group grow while its first member waits, unless it is full.
            while self._queued_rows < self.batch_rows and not self._closing:
                remaining = oldest + self.batch_delay_s - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            group: list[Pending] = []
            rows = 0
            while self._queue and (not group or rows + self._queue[0].rows <= self.batch_rows):
                item = self._queue.popleft()
                group.append(item)
                rows += item.rows
            self._queued_rows -= rows
            self._inflight_rows = rows
            self.stats.gauge("queue_rows", self._queued_rows)
            return group

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                return
            try:
                self._commit(group)
            except BaseException as exc:  # the thread must survive anything a commit raises
                self.healthy = False
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.stats.add("commits_failed")
                self.stats.add("rows_failed", sum(p.rows for p in group))
                log.error("commit failed, exports answered as retryable: %s", exc)
                for p in group:
                    p.error = exc
            finally:
                with self._cond:
                    self._inflight_rows = 0
                    self._finished_seq = max(self._finished_seq, group[-1].seq)
                    self._cond.notify_all()
                for p in group:
                    p.done.set()

    def _commit(self, group: list[Pending]) -> None:
        con = self._con
        spans = [p.spans for p in group if p.spans is not None and p.spans.num_rows]
        logs = [p.logs for p in group if p.logs is not None and p.logs.num_rows]
        span_table = pa.Table.from_batches(spans, schema=SPANS_SCHEMA) if spans else None
        log_table = pa.Table.from_batches(logs, schema=LOGS_SCHEMA) if logs else None
        started = time.monotonic()
        stored_spans = 0

        def transaction() -> int:
            stored = 0
            con.execute("BEGIN")
            if span_table is not None:
                con.register("incoming_spans", span_table)
                row = con.execute(INSERT_SPANS).fetchone()
                stored = int(row[0]) if row else 0
            if log_table is not None:
                con.register("incoming_logs", log_table)
                con.execute(INSERT_LOGS)
            con.execute("COMMIT")
            return stored

        try:
            stored_spans = retrying(
                transaction, con=con, deadline_s=self.commit_deadline_s, what="group commit"
            )
            if span_table is not None and self.dedup_keys > 0:
                self._remember(span_table, group[-1].seq)
        finally:
            for name in ("incoming_spans", "incoming_logs"):
                with contextlib.suppress(duckdb.Error):
                    con.unregister(name)
        elapsed = time.monotonic() - started
        self._last_commit_s = elapsed
        self.healthy = True
        received_spans = span_table.num_rows if span_table is not None else 0
        self.stats.add("commits")
        self.stats.add("spans_stored", stored_spans)
        self.stats.add("spans_duplicate", received_spans - stored_spans)
        self.stats.add("logs_stored", log_table.num_rows if log_table is not None else 0)
        self.stats.gauge("last_commit_s", round(elapsed, 4))
        self.stats.gauge("last_commit_rows", sum(p.rows for p in group))
        self.stats.gauge("last_commit_exports", len(group))

    def _remember(self, span_table: pa.Table, seq: int) -> None:
        con = self._con
        con.register("committed_spans", span_table)
        try:
            con.execute(
                "INSERT INTO recent_span_keys "
                "SELECT hash(trace_id, span_id), ? FROM committed_spans",
                [seq],
            )
        finally:
            con.unregister("committed_spans")
        self._recent.append((seq, span_table.num_rows))
        self._recent_total += span_table.num_rows
        if self._recent_total > self.dedup_keys:
            cut = 0
            while self._recent and self._recent_total > self.dedup_keys:
                cut, n = self._recent.popleft()
                self._recent_total -= n
            con.execute("DELETE FROM recent_span_keys WHERE seq <= ?", [cut])
