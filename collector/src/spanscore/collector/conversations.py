"""Stored conversation identity: what the writer applies at each commit.

A span without a conversation id of its own is stored with its trace id standing in, and
belongs to the conversation another span of its trace carries (`schema.RESOLVE_CONVERSATIONS`).
OpenTelemetry exports a trace's children before its root, and an agent often sets the id on the
root (or on an HTTP server span) only: the writer therefore remembers, per recent trace, the
conversation it knows and whether it stored spans without one. A commit then

- gives the export's own spans the conversation of their trace, known from the export or from
  an earlier commit, before they are stored;
- resolves, in the same transaction, spans of the trace stored earlier without one, when the
  export brings the trace's id (`resolving`).

A log record about a span is stored with its span's conversation (`schema.RESOLVE_RECORDS`):
the one its span has in the same commit, else the id the record carries, else its trace's as
far as the writer knows, else the trace id, which the records' trace then resolves as it
resolves spans. A record whose span, coming in a later commit, has another conversation than
the one the record was given waits for maintenance.

What the writer cannot see (a trace split between collectors behind a round-robin balancer,
spans older than its memory) is resolved by maintenance.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from spanscore.lake import schema


def incoming_conversations(spans: pa.Table) -> list[tuple[str, str | None, bool]]:
    """(trace id, the conversation its spans carry or None, whether some span lacks one) of
    each trace of the incoming spans: `schema.KNOWN_CONVERSATIONS`, by Arrow on the export
    (a DuckDB query per commit held the writer's GIL for longer than its commit's rows)."""
    trace_ids, conversation_ids = spans.column("trace_id"), spans.column("conversation_id")
    lacking = pc.equal(conversation_ids, trace_ids)  # the trace id stood in
    traces = pa.table(
        {
            "trace_id": trace_ids,
            "own": pc.if_else(lacking, pa.scalar(None, pa.string()), conversation_ids),
            "lacking": lacking,
        }
    ).group_by("trace_id", use_threads=False)
    found = traces.aggregate([("own", schema.KNOWN_CONVERSATION_AGGREGATE), ("lacking", "any")])
    return list(
        zip(
            found.column("trace_id").to_pylist(),
            found.column(f"own_{schema.KNOWN_CONVERSATION_AGGREGATE}").to_pylist(),
            found.column("lacking_any").to_pylist(),
            strict=True,
        )
    )


@dataclass
class _Trace:
    conversation_id: str | None  # None: no span of the trace carried one yet
    unresolved_since: dt.datetime | None  # first commit that stored spans without one
    records_since: dt.datetime | None = None  # ... log records without one


@dataclass
class Resolution:
    """What one commit does about conversations: the export with its spans and log records
    resolved, and the traces whose earlier spans and records to resolve in the lake (with the
    oldest commit that may hold them)."""

    spans: pa.Table | None
    logs: pa.Table | None
    resolving: pa.Table | None
    since: dt.datetime | None  # of the spans to resolve (None: none)
    records_since: dt.datetime | None  # of the records to resolve (None: none)
    remember: list[tuple[str, _Trace]]


class TraceConversations:
    """The conversation of the most recent `capacity` traces this writer stored."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._traces: dict[str, _Trace] = {}

    def __len__(self) -> int:
        return len(self._traces)

    def seed(self, rows: list[tuple[str, str | None, dt.datetime | None]]) -> None:
        """Remember (trace id, conversation id or None, first unresolved ingest time)."""
        for trace_id, conversation_id, since in rows:
            self._remember(trace_id, _Trace(conversation_id, since))

    def seed_records(self, rows: list[tuple[str, dt.datetime]]) -> None:
        """Remember (trace id, first ingest time) of traces whose log records were stored
        without a conversation."""
        for trace_id, since in rows:
            trace = self._traces.get(trace_id) or _Trace(None, None)
            self._remember(trace_id, _Trace(trace.conversation_id, trace.unresolved_since, since))

    def _remember(self, trace_id: str, trace: _Trace) -> None:
        self._traces.pop(trace_id, None)  # most recent last
        self._traces[trace_id] = trace
        while len(self._traces) > self.capacity:
            del self._traces[next(iter(self._traces))]

    def resolve(
        self, spans: pa.Table | None, logs: pa.Table | None, now: dt.datetime
    ) -> Resolution:
        """Resolve the incoming spans and log records; what else the commit must resolve.
        Remembered by `committed`, once the commit succeeded."""
        remembering = self.capacity > 0 and spans is not None and spans.num_rows
        rows = incoming_conversations(spans) if remembering else []
        remember: dict[str, _Trace] = {}
        rewrite: dict[str, str] = {}
        resolving: list[tuple[str, str]] = []
        since: dt.datetime | None = None
        records_since: dt.datetime | None = None
        for trace_id, incoming, unresolved in rows:
            before = self._traces.get(trace_id)
            known = before.conversation_id if before is not None else None
            conversation = max(filter(None, (known, incoming)), default=None)
            if unresolved and conversation is not None:
                rewrite[trace_id] = conversation
            stored_unresolved = before.unresolved_since if before is not None else None
            records_unresolved = before.records_since if before is not None else None
            if conversation is not None and (stored_unresolved or records_unresolved):
                resolving.append((trace_id, conversation))
                since = _earliest(since, stored_unresolved)
                records_since = _earliest(records_since, records_unresolved)
                stored_unresolved = records_unresolved = None
            elif conversation is None and unresolved and stored_unresolved is None:
                stored_unresolved = now
            remember[trace_id] = _Trace(conversation, stored_unresolved, records_unresolved)
        if rewrite:
            assert spans is not None
            spans = _rewrite(spans, rewrite)
        if logs is not None and logs.num_rows:
            logs = self._records(logs, spans, remember, now)
        table = (
            pa.table(
                {
                    "trace_id": [t for t, _ in resolving],
                    "conversation_id": [c for _, c in resolving],
                }
            )
            if resolving
            else None
        )
        return Resolution(spans, logs, table, since, records_since, list(remember.items()))

    def _records(
        self, logs: pa.Table, spans: pa.Table | None, remember: dict[str, _Trace], now: dt.datetime
    ) -> pa.Table:
        """The log records with their span's conversation (`spans`, resolved), else the id
        they carry, else their trace's as known after this commit, else their trace id;
        `remember` is told of traces whose records it stands in for."""
        of_span: dict[tuple[str, str], str] = {}
        if spans is not None and spans.num_rows:
            columns = (
                spans.column(c).to_pylist() for c in ("trace_id", "span_id", "conversation_id")
            )
            of_span = {(t, s): c for t, s, c in zip(*columns, strict=True)}
        traces = logs.column("trace_id").to_pylist()
        span_ids = logs.column("span_id").to_pylist()
        given = logs.column("conversation_id").to_pylist()
        resolved: list[str | None] = []
        for trace_id, span_id, own in zip(traces, span_ids, given, strict=True):
            if trace_id is None or span_id is None:
                resolved.append(own)  # about no span: the id it carries
                continue
            trace = remember.get(trace_id) or self._traces.get(trace_id) or _Trace(None, None)
            conversation = of_span.get((trace_id, span_id)) or own or trace.conversation_id
            if conversation is None or conversation == trace_id:
                conversation = trace_id  # standing in until the trace's id comes
                if trace.records_since is None:
                    remember[trace_id] = _Trace(trace.conversation_id, trace.unresolved_since, now)
            resolved.append(conversation)
        index = logs.schema.get_field_index("conversation_id")
        return logs.set_column(index, logs.schema.field(index), pa.array(resolved, pa.string()))

    def committed(self, resolution: Resolution) -> None:
        for trace_id, trace in resolution.remember:
            self._remember(trace_id, trace)


def _earliest(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _rewrite(spans: pa.Table, conversations: dict[str, str]) -> pa.Table:
    """The spans with each one that carries only its trace id given its trace's conversation."""
    traces = spans.column("trace_id").to_pylist()
    current = spans.column("conversation_id").to_pylist()
    resolved = [
        conversations.get(t, c) if c == t else c for t, c in zip(traces, current, strict=True)
    ]
    index = spans.schema.get_field_index("conversation_id")
    return spans.set_column(index, spans.schema.field(index), pa.array(resolved, pa.string()))


def resolve_in_lake(con: duckdb.DuckDBPyConnection, resolution: Resolution) -> None:
    """Within the caller's transaction: the spans and log records of the resolving traces
    stored without a conversation take the one given. The oldest commits that may hold them
    (`since`, `records_since`) let DuckLake skip older data files."""
    if resolution.resolving is None:
        return
    con.register("resolving_conversations", resolution.resolving)
    try:
        for table, since in (("spans", resolution.since), ("logs", resolution.records_since)):
            if since is not None:
                con.execute(
                    schema.RESOLVE_CONVERSATIONS.format(
                        spans=f"lake.{table}",
                        known="resolving_conversations",
                        also=" AND s.ingest_time >= ?",
                    ),
                    [since],
                )
    finally:
        con.unregister("resolving_conversations")
