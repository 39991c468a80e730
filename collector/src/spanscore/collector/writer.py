"""Group commit: many exports, one lake transaction, each export answered after its commit.

Handlers flatten their request into Arrow batches and `submit` them; one writer thread takes
everything queued (up to `batch_rows`, or whatever arrived within `batch_delay_s` of the oldest
item), appends it to `spans` and `logs` in one DuckLake transaction, then wakes every handler in
the group with the outcome. Submitting never blocks: over `queue_rows` rows or `queue_bytes`
bytes queued (plus the group being committed) it raises `QueueFull` and the handler answers
with OTLP's retryable throttling code. The identities of recently committed spans (trace and
span id) and log records (trace, span, times, event name and body) are remembered, so an
export retried after a lost acknowledgement (a timeout, a crash between commit and answer) is
not stored twice.

Lake maintenance (flushing inlined rows, compaction, snapshot expiry, file cleanup) runs
through `paused()`: the writer finishes its commit in progress and waits while such a step runs.
Under steady ingest a maintenance transaction that raced the writer conflicted with a commit
every few milliseconds and, retried from the start each time, never completed; files,
snapshots and the collector's memory then grew without bound.

Acknowledged means committed: DuckLake has written the Parquet files and the catalog transaction
that references them, so a killed collector loses nothing it has answered with success.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from spanscore.lake import (
    commits_since,
    current_snapshot,
    include_log_records_in_views,
    is_interrupt,
    retrying,
    schema,
)

from . import identity
from .conversations import Resolution, TraceConversations, resolve_in_lake
from .flatten import LOGS_SCHEMA, SPANS_SCHEMA
from .secrets import describe_error
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

    @property
    def nbytes(self) -> int:
        return (self.spans.nbytes if self.spans is not None else 0) + (
            self.logs.nbytes if self.logs is not None else 0
        )


def _insert_sql(table: str, columns: tuple[schema.Column, ...], source: str) -> str:
    names = ", ".join(schema.quote_identifier(c.name) for c in columns)
    select = ", ".join(
        "now()" if c.name == "ingest_time" else schema.quote_identifier(c.name) for c in columns
    )
    return f"INSERT INTO lake.{table} ({names}) SELECT {select} FROM {source}"


# Recent traces whose conversation the writer remembers (docs/conversations.md, rule 2).
CONVERSATION_TRACES = 200_000

INSERT_SPANS = _insert_sql("spans", schema.SPANS, "incoming_spans")
INSERT_LOGS = _insert_sql("logs", schema.LOGS, "incoming_logs")
# Whether some of a commit's log records say something about a span's model call.
CARRY_CONTENT = f"SELECT EXISTS (SELECT 1 FROM incoming_logs WHERE {schema.LOG_RECORD_CONTENT})"


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Ascending ids as (first, last) ranges of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] + 1 == i:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


class RecentKeys:
    """The identity hashes of the newest committed rows, at most `capacity`, oldest forgotten
    first (a commit's keys are forgotten together)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._keys: set[int] = set()
        self._order: deque[list[int]] = deque()
        self._total = 0

    def __contains__(self, key: int) -> bool:
        return key in self._keys

    def isdisjoint(self, keys: list[int]) -> bool:
        return self._keys.isdisjoint(keys)

    def remember(self, keys: list[int]) -> None:
        if not keys or self.capacity <= 0:
            return
        self._keys.update(keys)
        self._order.append(keys)
        self._total += len(keys)
        while self._total > self.capacity and len(self._order) > 1:
            oldest = self._order.popleft()
            self._total -= len(oldest)
            self._keys.difference_update(oldest)


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
        queue_bytes: int = 256 * 1024 * 1024,
        commit_deadline_s: float = 30.0,
        dedup_keys: int = 1_000_000,
        shared: bool = False,
        conversation_traces: int = CONVERSATION_TRACES,
    ) -> None:
        if batch_rows <= 0 or queue_rows <= 0 or batch_delay_s < 0:
            raise ValueError("batch_rows and queue_rows must be positive, batch_delay_s >= 0")
        self._con = con
        self.stats = stats
        self.batch_rows = batch_rows
        self.batch_delay_s = batch_delay_s
        self.queue_rows = queue_rows
        self.queue_bytes = queue_bytes
        self.commit_deadline_s = commit_deadline_s
        self.dedup_keys = dedup_keys
        # Other collectors write the same lake: a retry may reach us after another collector
        # committed the export and died before answering. The span ids the others commit are
        # remembered too, read from their commits since the last look (`_learn_others_spans`);
        # this writer's commits carry `author` so that it can tell them from theirs.
        self.shared = shared
        self.author = f"spanscore-collector {uuid.uuid4().hex[:12]}"
        self._others = RecentKeys(dedup_keys if shared else 0)
        self._others_seen: int | None = None  # the snapshot up to which `_others` was read
        self._queue: deque[Pending] = deque()
        self._queued_rows = 0
        self._inflight_rows = 0
        self._queued_bytes = 0
        self._inflight_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._submitted_seq = 0
        self._finished_seq = 0
        self._recent = {"spans": RecentKeys(dedup_keys), "logs": RecentKeys(dedup_keys)}
        self._conversations = TraceConversations(conversation_traces)
        # Whether the lake's views read log records (they do once one says something about a
        # span: `spanscore.lake.include_log_records_in_views`).
        self._views_read_log_records = False
        # Called after each commit (the collector counts them towards its next compaction).
        self.on_commit: Callable[[int], None] | None = None  # given the spans stored
        self._last_commit_s = 0.1
        self._pause_requests = 0
        self._paused = False
        self._exited = False
        self.healthy = True
        self.last_error: str | None = None  # scrubbed of credentials
        self._thread = threading.Thread(target=self._run, name="spanscore-writer", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._seed_recent_keys()
        self._thread.start()

    def _newest_keys(self, table: identity.Kind) -> list[int]:
        """The identities of the lake's rows of its last 10 minutes (at most `dedup_keys`),
        oldest first, as commits remember them."""
        columns = ", ".join(identity.IDENTITY[table])
        newest = self._con.execute(
            f"""SELECT {columns} FROM lake.{table}
            WHERE ingest_time >= (SELECT max(ingest_time) FROM lake.{table})
                - INTERVAL 10 MINUTE
            ORDER BY ingest_time DESC LIMIT {int(self.dedup_keys)}"""
        ).to_arrow_reader(65_536)
        keys = identity.keys_of_batches(newest, table)
        keys.reverse()
        return keys

    def _seed_recent_keys(self) -> None:
        """Remember the newest committed rows, so a retry after a crash is no duplicate."""
        if self.dedup_keys <= 0:
            return
        if self.shared:  # before the seeding read: what is committed meanwhile is read later
            self._others_seen = current_snapshot(self._con)
        seeded = {}
        for table in ("spans", "logs"):
            keys = self._newest_keys(table)
            self._recent[table].remember(keys)
            seeded[f"seeded_{table}_keys"] = len(keys)
        self._seed_conversations()
        seeded["seeded_traces"] = len(self._conversations)
        log.info("writer ready", extra=seeded)

    def _seed_conversations(self) -> None:
        """Remember the conversations of the newest traces, so that a root exported after a
        restart still resolves the children stored before it."""
        if self._conversations.capacity <= 0:
            return
        rows = self._con.execute(
            f"""SELECT trace_id,
                max(conversation_id) FILTER (WHERE conversation_id <> trace_id),
                min(ingest_time) FILTER (WHERE conversation_id = trace_id)
            FROM lake.spans
            WHERE ingest_time >= (SELECT max(ingest_time) FROM lake.spans) - INTERVAL 10 MINUTE
            GROUP BY trace_id ORDER BY max(ingest_time)
            LIMIT {int(self._conversations.capacity)}"""
        ).fetchall()
        self._conversations.seed(rows)
        # and of the log records stored without one (`schema.RESOLVE_RECORDS`)
        records = self._con.execute(
            f"""SELECT trace_id, min(ingest_time) FROM lake.logs
            WHERE conversation_id = trace_id AND span_id IS NOT NULL
                AND ingest_time >= (SELECT max(ingest_time) FROM lake.logs) - INTERVAL 10 MINUTE
            GROUP BY trace_id ORDER BY min(ingest_time)
            LIMIT {int(self._conversations.capacity)}"""
        ).fetchall()
        self._conversations.seed_records(records)

    def submit(self, pending: Pending) -> Pending:
        """Queue an export's rows; never blocks. Raises QueueFull or WriterClosed."""
        rows = pending.rows
        nbytes = pending.nbytes
        with self._cond:
            if self._closing:
                raise WriterClosed("the collector is shutting down")
            # Rows and bytes both: 148 rows of large attributes once took 1.4 GiB.
            in_memory = self._queued_rows + self._inflight_rows
            in_memory_bytes = self._queued_bytes + self._inflight_bytes
            if in_memory and (
                in_memory + rows > self.queue_rows + self.batch_rows
                or in_memory_bytes + nbytes > self.queue_bytes
            ):
                raise QueueFull(max(1.0, round(self._last_commit_s * 2)))
            self._submitted_seq += 1
            pending.seq = self._submitted_seq
            pending.enqueued = time.monotonic()
            self._queue.append(pending)
            self._queued_rows += rows
            self._queued_bytes += nbytes
            self.stats.gauge("queue_rows", self._queued_rows)
            self.stats.gauge("queue_bytes", self._queued_bytes)
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

    @contextlib.contextmanager
    def paused(self, timeout: float = 60.0) -> Iterator[None]:
        """Hold the writer between two commits for the block (maintenance needs the catalog to
        itself). Exports go on queueing meanwhile, within the queue's bounds. Raises
        TimeoutError when the commit in progress does not end within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._pause_requests += 1
            self._cond.notify_all()
            try:
                while not self._paused and not self._exited:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"the writer did not pause within {timeout:.0f}s")
                    self._cond.wait(remaining)
            except BaseException:
                self._pause_requests -= 1
                self._cond.notify_all()
                raise
        try:
            yield
        finally:
            with self._cond:
                self._pause_requests -= 1
                self._cond.notify_all()

    # --- the writer thread --------------------------------------------------------------------

    def _wait_while_paused(self) -> None:
        """Between commits: stand still while someone holds `paused()`. Called with the
        condition held."""
        if not self._pause_requests:
            return
        self._paused = True
        self._cond.notify_all()
        while self._pause_requests:
            self._cond.wait()
        self._paused = False

    def _take_group(self) -> list[Pending] | None:
        with self._cond:
            self._wait_while_paused()
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
                self._wait_while_paused()
            oldest = self._queue[0].enqueued
            # Group commit: let the group grow until its oldest member has waited
            # `batch_delay_s` (time spent waiting for the previous commit counts), or it is full.
            while self._queued_rows < self.batch_rows and not self._closing:
                remaining = oldest + self.batch_delay_s - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            group: list[Pending] = []
            rows = nbytes = 0
            while self._queue and (not group or rows + self._queue[0].rows <= self.batch_rows):
                item = self._queue.popleft()
                group.append(item)
                rows += item.rows
                nbytes += item.nbytes
            self._queued_rows -= rows
            self._inflight_rows = rows
            self._queued_bytes -= nbytes
            self._inflight_bytes = nbytes
            self.stats.gauge("queue_rows", self._queued_rows)
            self.stats.gauge("queue_bytes", self._queued_bytes)
            return group

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                with self._cond:  # a `paused()` waiting for us need not wait any longer
                    self._exited = True
                    self._cond.notify_all()
                return
            try:
                self._commit(group)
            except BaseException as exc:  # the thread must survive anything a commit raises
                self.healthy = False
                self.last_error = describe_error(exc)
                self.stats.add("commits_failed")
                self.stats.add("rows_failed", sum(p.rows for p in group))
                log.error("commit failed, exports answered as retryable: %s", self.last_error)
                for p in group:
                    p.error = exc
            finally:
                with self._cond:
                    self._inflight_rows = 0
                    self._inflight_bytes = 0
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
        received_logs = log_table.num_rows if log_table is not None else 0
        span_keys: list[int] = []
        log_keys: list[int] = []
        if span_table is not None:
            span_table, span_keys = self._drop_duplicates(span_table, "spans")
        if log_table is not None:
            log_table, log_keys = self._drop_duplicates(log_table, "logs")
        resolution: Resolution | None = None
        if (span_table is not None and span_table.num_rows) or (
            log_table is not None and log_table.num_rows
        ):
            # Ingest times of this commit are later than this (the margin covers retries).
            floor = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
            resolution = self._conversations.resolve(span_table, log_table, floor)
            span_table, log_table = resolution.spans, resolution.logs

        log_content = False

        def transaction() -> None:
            nonlocal log_content
            con.execute("BEGIN")
            if self.shared:  # which commits are this writer's (`_learn_others_spans`)
                con.execute("CALL lake.set_commit_message(?, 'spans')", [self.author])
            if span_table is not None and span_table.num_rows:
                con.register("incoming_spans", span_table)
                con.execute(INSERT_SPANS)
            if resolution is not None:
                resolve_in_lake(con, resolution)
            if log_table is not None and log_table.num_rows:
                con.register("incoming_logs", log_table)
                con.execute(INSERT_LOGS)
                if not self._views_read_log_records:
                    found = con.execute(CARRY_CONTENT).fetchone()
                    log_content = bool(found and found[0])
            if log_content and include_log_records_in_views(con):
                log.info("the first log records about spans: the lake's views now read them")
            con.execute("COMMIT")

        try:
            retrying(transaction, con=con, deadline_s=self.commit_deadline_s, what="group commit")
        finally:
            for name in ("incoming_spans", "incoming_logs"):
                with contextlib.suppress(duckdb.Error):
                    con.unregister(name)
        # Committed: from here on nothing may fail the group, or its exporters would retry and
        # store the spans twice.
        self._recent["spans"].remember(span_keys)
        if resolution is not None:
            self._conversations.committed(resolution)
            if resolution.resolving is not None:
                self.stats.add("traces_resolved", resolution.resolving.num_rows)
        self._recent["logs"].remember(log_keys)
        self._views_read_log_records |= log_content
        elapsed = time.monotonic() - started
        self._last_commit_s = elapsed
        self.healthy = True
        stored_spans = span_table.num_rows if span_table is not None else 0
        self.stats.add("commits")
        self.stats.add("spans_stored", stored_spans)
        self.stats.add("spans_duplicate", received_spans - stored_spans)
        stored_logs = log_table.num_rows if log_table is not None else 0
        self.stats.add("logs_stored", stored_logs)
        self.stats.add("logs_duplicate", received_logs - stored_logs)
        self.stats.observe("commit_s", elapsed)
        self.stats.gauge("last_commit_s", round(elapsed, 4))
        self.stats.gauge("last_commit_rows", sum(p.rows for p in group))
        self.stats.gauge("last_commit_exports", len(group))
        if self.on_commit is not None:
            self.on_commit(stored_spans)

    def _drop_duplicates(self, table: pa.Table, name: identity.Kind) -> tuple[pa.Table, list[int]]:
        """Remove rows committed recently or repeated within the group; the kept rows' keys."""
        if self.dedup_keys <= 0:
            return table, []
        hashes = identity.keys(table, name)
        recent = self._recent[name]
        present = [h for h in hashes if h is not None]
        # On a shared lake another collector may have committed a retried export already.
        others = self._others
        if self.shared and name == "spans":
            self._learn_others_spans()
        if (
            recent.isdisjoint(present)
            and others.isdisjoint(present)
            and len(set(present)) == len(present)
        ):
            return table, present  # the usual case: nothing to drop
        seen: set[int] = set()
        keep: list[bool] = []
        for h in hashes:
            keep.append(h is None or (h not in recent and h not in others and h not in seen))
            if h is not None:
                seen.add(h)
        kept = [h for h, k in zip(hashes, keep, strict=True) if k and h is not None]
        return table.filter(pa.array(keep)), kept

    def _learn_others_spans(self) -> None:
        """Remember the span ids other processes committed since the last look, read from
        their commits alone (DuckLake's change feed). Looking the incoming ids up among the
        lake's spans of the last 10 minutes instead read every file of those 10 minutes at each
        commit: with no compaction, 1 s per commit after 50 commits, 3 s after 150, on a
        loopback object store."""
        after = self._others_seen
        if after is None:
            return
        con = self._con
        try:
            commits = commits_since(con, after, not_by=self.author)
            if commits is None:
                raise LookupError(f"snapshots after {after} were expired before they were read")
            columns = ", ".join(identity.IDENTITY["spans"])
            for first, last in _runs(commits):
                inserted = con.execute(
                    f"SELECT {columns} FROM ducklake_table_insertions("
                    f"'lake', 'main', 'spans', {first}, {last})"
                ).to_arrow_reader(65_536)
                self._others.remember(identity.keys_of_batches(inserted, "spans"))
            if commits:
                self._others_seen = commits[-1]
        except (duckdb.Error, LookupError) as exc:
            if isinstance(exc, duckdb.Error) and is_interrupt(exc):
                raise
            # Expired before they were read (an idle collector, a short retention): the
            # lake's spans of the last 10 minutes instead, once.
            log.info("other collectors' commits: %s; reading the lake's recent spans", exc)
            self.stats.add("others_read_from_recent_spans")
            self._others_seen = current_snapshot(con)
            self._others.remember(self._newest_keys("spans"))
