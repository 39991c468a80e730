"""Stored trajectories: the builder's rows, kept by maintenance so a rebuild need not redo them.

Applying the conversation rules (`schema.trajectory_rows_sql`) is most of what rebuilding a
trajectory costs, and a conversation's rows change only when its spans do. So maintenance
stores each settled conversation's rows in `trajectory_steps`, with the fingerprint of the
spans and log records they were built from (`schema.fingerprints_sql`) and the version of the
rules (`schema.trajectory.STORED_RULES`). A reader (`spanscore.evaluation.trajectory_rows`)
computes the fingerprints of the conversations it reads and uses stored rows only where both
still match, applying the rules to the rest: stored rows are never staler than the spans, only
absent.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Sequence

import duckdb
import pyarrow as pa

from spanscore.lake import schema
from spanscore.lake.location import ALIAS
from spanscore.lake.retry import retrying

# How long a conversation has had no new span before maintenance stores its rows: a
# conversation still being written would be stored again every run.
SETTLED_AFTER_S = 300.0
# Spans whose conversations one transaction stores: each is its own DuckLake commit, so a
# first run over a large lake makes progress that survives its interruption.
STEP_SPANS = 200_000


def store_trajectories(
    con: duckdb.DuckDBPyConnection,
    *,
    settled_after_s: float = SETTLED_AFTER_S,
    step_spans: int = STEP_SPANS,
    step_deadline_s: float = 60.0,
    deadline_s: float | None = None,
) -> dict[str, int]:
    """Store the rows of the settled conversations whose stored rows are missing or stale, and
    delete those of conversations without spans. Each step of about `step_spans` spans is one
    transaction (rows deleted and stored together, so a reader sees a conversation's old rows
    or its new ones); a step that conflicts is retried up to `step_deadline_s`. Work left when
    `deadline_s` has passed (after the first step) waits for the next run.

    Returns `conversations_stored`, `conversations_unstored` (deleted with their spans),
    `store_steps`, `conversations_left` and `store_ms`."""
    started = time.monotonic()
    cur = con.cursor()  # its own session: `USE` and the registered ids stay here
    try:
        cur.execute(f"USE {ALIAS}")
        settled = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=settled_after_s)
        stale: list[tuple[str, int]] = cur.execute(schema.stale_stored_sql(), [settled]).fetchall()
        done = {
            "conversations_stored": 0,
            "conversations_unstored": 0,
            "store_steps": 0,
            "conversations_left": 0,
        }
        left = len(stale)
        for step in by_spans(stale, step_spans):
            # At least one step a run, so that every run makes progress.
            late = deadline_s is not None and time.monotonic() - started > deadline_s
            if late and done["store_steps"]:
                done["conversations_left"] = left
                break
            left -= len(step)
            retrying(
                lambda step=step: _store(cur, [c for c, _ in step]),  # type: ignore[misc]
                con=cur,
                deadline_s=step_deadline_s,
                what="store trajectories",
            )
            done["store_steps"] += 1
            done["conversations_stored"] += sum(1 for _, spans in step if spans)
            done["conversations_unstored"] += sum(1 for _, spans in step if not spans)
        done["store_ms"] = round((time.monotonic() - started) * 1000)
        return done
    finally:
        with contextlib.suppress(duckdb.Error):
            cur.unregister("spanscore_store")
        cur.close()


def by_spans(
    counts: Sequence[tuple[str, int]], spans_each: int, *, first_spans: int | None = None
) -> list[list[tuple[str, int]]]:
    """(conversation id, spans) pairs in their order, cut where a part reaches `spans_each`
    spans; given `first_spans`, the first part is cut there and each next one at twice the
    one before, up to `spans_each`."""
    parts: list[list[tuple[str, int]]] = []
    part: list[tuple[str, int]] = []
    spans = 0
    limit = spans_each if first_spans is None else min(first_spans, spans_each)
    for item in counts:
        part.append(item)
        spans += item[1]
        if spans >= limit:
            parts.append(part)
            part, spans, limit = [], 0, min(limit * 2, spans_each)
    if part:
        parts.append(part)
    return parts


def _store(cur: duckdb.DuckDBPyConnection, ids: list[str]) -> None:
    cur.register("spanscore_store", pa.table({"conversation_id": ids}))
    rows = schema.trajectory_rows_sql(
        "chosen AS (SELECT conversation_id FROM spanscore_store), ",
        schema.chosen_ids("chosen", "s."),
        schema.CONVERSATION_ATTRIBUTES,
        placed=True,
    )
    spans = schema.chosen_ids("spanscore_store", "s.")
    bounds = {"first": min(ids), "last": max(ids)}
    cur.execute("BEGIN")
    cur.execute(f"DELETE FROM trajectory_steps {schema.chosen_ids('spanscore_store')}", bounds)
    cur.execute(schema.store_rows_sql(rows, schema.fingerprints_sql(spans)), bounds)
    cur.execute("COMMIT")
