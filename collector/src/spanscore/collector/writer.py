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
    enqueued: float = 0.0
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


INSERT_SPANS = _insert_sql("spans", schema.SPANS, "incoming_spans")
INSERT_LOGS = _insert_sql("logs", schema.LOGS, "incoming_logs")


class GroupCommitWriter:
    """The collector's single lake writer. `submit` from any thread; `shutdown` drains."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        stats: Stats,
        *,
        batch_rows: int = 20_000,
        batch_delay_s: float = 0.02,
        queue_rows: int = 100_000,
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
        # Span-id hashes of recent commits (a set for lookups, a deque of lists for eviction).
        self._recent: set[int] = set()
        self._recent_order: deque[list[int]] = deque()
        self._recent_total = 0
        self._last_commit_s = 0.1
        self.healthy = True
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="spanscore-writer", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._seed_recent_keys()
        self._thread.start()

    def _seed_recent_keys(self) -> None:
        """Remember the span ids of the newest commits, so a retry after a crash is no duplicate."""
        if self.dedup_keys <= 0:
            return
        rows = self._con.execute(
            f"""SELECT hash(trace_id, span_id) FROM lake.spans
            WHERE ingest_time >= (SELECT max(ingest_time) FROM lake.spans) - INTERVAL 10 MINUTE
            ORDER BY ingest_time DESC LIMIT {int(self.dedup_keys)}"""
        ).fetchall()
        self._remember([r[0] for r in reversed(rows)])
        log.info("writer ready", extra={"seeded_span_keys": len(rows)})

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
            pending.enqueued = time.monotonic()
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
            oldest = self._queue[0].enqueued
            # Group commit: let the group grow until its oldest member has waited
            # `batch_delay_s` (time spent waiting for the previous commit counts), or it is full.
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
        received_spans = span_table.num_rows if span_table is not None else 0
        keys: list[int] = []
        if span_table is not None:
            span_table, keys = self._drop_duplicates(span_table)

        def transaction() -> None:
            con.execute("BEGIN")
            if span_table is not None and span_table.num_rows:
                con.register("incoming_spans", span_table)
                con.execute(INSERT_SPANS)
            if log_table is not None:
                con.register("incoming_logs", log_table)
                con.execute(INSERT_LOGS)
            con.execute("COMMIT")

        try:
            retrying(transaction, con=con, deadline_s=self.commit_deadline_s, what="group commit")
        finally:
            for name in ("incoming_spans", "incoming_logs"):
                with contextlib.suppress(duckdb.Error):
                    con.unregister(name)
        # Committed: from here on nothing may fail the group, or its exporters would retry and
        # store the spans twice.
        self._remember(keys)
        elapsed = time.monotonic() - started
        self._last_commit_s = elapsed
        self.healthy = True
        stored_spans = span_table.num_rows if span_table is not None else 0
        self.stats.add("commits")
        self.stats.add("spans_stored", stored_spans)
        self.stats.add("spans_duplicate", received_spans - stored_spans)
        self.stats.add("logs_stored", log_table.num_rows if log_table is not None else 0)
        self.stats.gauge("last_commit_s", round(elapsed, 4))
        self.stats.gauge("last_commit_rows", sum(p.rows for p in group))
        self.stats.gauge("last_commit_exports", len(group))

    def _drop_duplicates(self, table: pa.Table) -> tuple[pa.Table, list[int]]:
        """Remove spans committed recently or repeated within the group; their hash keys."""
        if self.dedup_keys <= 0:
            return table, []
        self._con.register("incoming_keys", table.select(["trace_id", "span_id"]))
        try:
            hashes: list[int] = (
                self._con.execute("SELECT hash(trace_id, span_id) FROM incoming_keys")
                .to_arrow_table()
                .column(0)
                .to_pylist()
            )
        finally:
            self._con.unregister("incoming_keys")
        recent = self._recent
        if recent.isdisjoint(hashes) and len(set(hashes)) == len(hashes):
            return table, hashes  # the usual case: nothing to drop
        seen: set[int] = set()
        keep: list[bool] = []
        for h in hashes:
            keep.append(h not in recent and h not in seen)
            seen.add(h)
        kept = [h for h, k in zip(hashes, keep, strict=True) if k]
        return table.filter(pa.array(keep)), kept

    def _remember(self, keys: list[int]) -> None:
        if not keys or self.dedup_keys <= 0:
            return
        self._recent.update(keys)
        self._recent_order.append(keys)
        self._recent_total += len(keys)
        while self._recent_total > self.dedup_keys and len(self._recent_order) > 1:
            oldest = self._recent_order.popleft()
            self._recent_total -= len(oldest)
            self._recent.difference_update(oldest)
