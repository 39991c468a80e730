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


def _incoming(spans: pa.Table) -> list[tuple[str, str | None, bool]]:
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


@dataclass
class Resolution:
    """What one commit does about conversations: the export with its spans resolved, and the
    traces whose earlier spans to resolve in the lake (with the oldest commit that may hold
    them)."""

    spans: pa.Table
    resolving: pa.Table | None
    since: dt.datetime | None
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

    def _remember(self, trace_id: str, trace: _Trace) -> None:
        self._traces.pop(trace_id, None)  # most recent last
        self._traces[trace_id] = trace
        while len(self._traces) > self.capacity:
            del self._traces[next(iter(self._traces))]

    def resolve(self, spans: pa.Table, now: dt.datetime) -> Resolution:
        """Resolve the incoming spans; what else the commit must resolve. Remembered by
        `committed`, once the commit succeeded."""
        rows = _incoming(spans)
        remember: list[tuple[str, _Trace]] = []
        rewrite: dict[str, str] = {}
        resolving: list[tuple[str, str]] = []
        since: dt.datetime | None = None
        for trace_id, incoming, unresolved in rows:
            before = self._traces.get(trace_id)
            known = before.conversation_id if before is not None else None
            conversation = max(filter(None, (known, incoming)), default=None)
            if unresolved and conversation is not None:
                rewrite[trace_id] = conversation
            stored_unresolved = before.unresolved_since if before is not None else None
            if conversation is not None and stored_unresolved is not None:
                resolving.append((trace_id, conversation))
                since = stored_unresolved if since is None else min(since, stored_unresolved)
                stored_unresolved = None
            elif conversation is None and unresolved and stored_unresolved is None:
                stored_unresolved = now
            remember.append((trace_id, _Trace(conversation, stored_unresolved)))
        if rewrite:
            spans = _rewrite(spans, rewrite)
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
        return Resolution(spans, table, since, remember)

    def committed(self, resolution: Resolution) -> None:
        for trace_id, trace in resolution.remember:
            self._remember(trace_id, trace)


def _rewrite(spans: pa.Table, conversations: dict[str, str]) -> pa.Table:
    """The spans with each one that carries only its trace id given its trace's conversation."""
    traces = spans.column("trace_id").to_pylist()
    current = spans.column("conversation_id").to_pylist()
    resolved = [
        conversations.get(t, c) if c == t else c for t, c in zip(traces, current, strict=True)
    ]
    index = spans.schema.get_field_index("conversation_id")
    return spans.set_column(index, spans.schema.field(index), pa.array(resolved, pa.string()))


def resolve_in_lake(
    con: duckdb.DuckDBPyConnection, resolving: pa.Table, since: dt.datetime | None
) -> None:
    """Within the caller's transaction: the spans of `resolving`'s traces stored without a
    conversation take the one given. `since` (the oldest commit that may hold such spans)
    lets DuckLake skip older data files."""
    con.register("resolving_conversations", resolving)
    try:
        con.execute(
            schema.RESOLVE_CONVERSATIONS.format(
                spans="lake.spans",
                known="resolving_conversations",
                also=" AND s.ingest_time >= ?" if since is not None else "",
            ),
            [since] if since is not None else [],
        )
    finally:
        con.unregister("resolving_conversations")
