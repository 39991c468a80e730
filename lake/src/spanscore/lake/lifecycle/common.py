"""What erasure and retention share: the maintenance step they run in, the raw tables and
the times that age them, the conversations selected (a temporary table), and the audit row."""

from __future__ import annotations

import datetime as dt
import getpass
import socket
from collections.abc import Callable
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from spanscore.lake.location import ALIAS
from spanscore.lake.schema.tables import CONVERSATION_CONTENT

# A step of maintenance: runs a statement (or a function making one transaction), retried on
# conflict, while the collector's writer is held off; returns its rows.
Step = Callable[[str | Callable[[], list[tuple[Any, ...]]], str], list[tuple[Any, ...]]]

# The raw tables and the time that ages their rows.
RAW_TIMES = {"spans": "start_time", "logs": "time"}
# Tables of `CONVERSATION_CONTENT` that retention also ages by a time of their own.
AGED_CONTENT = {
    "judge_cache": "created_at",
    "simulated_turns": "sent_at",
    "labels": "created_at",
    "review_queue_items": "added_at",
}

SELECTED_IDS = "temp.main.spanscore_erase_ids"
SELECTED = f"(SELECT conversation_id FROM {SELECTED_IDS})"
# Traces of the selected conversations: their other spans (and records) go too.
SELECTED_TRACES = f"(SELECT trace_id FROM {ALIAS}.spans WHERE conversation_id IN {SELECTED})"


def requested_by() -> str:
    """Who asks, for the audit table: the OS user and host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def keep_ids(con: duckdb.DuckDBPyConnection, ids: list[str]) -> None:
    con.register("spanscore_erase_input", pa.table({"conversation_id": pa.array(ids, pa.string())}))
    try:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE spanscore_erase_ids AS "
            "SELECT * FROM spanscore_erase_input"
        )
    finally:
        con.unregister("spanscore_erase_input")


def record_erasure(
    con: duckdb.DuckDBPyConnection,
    erase_id: str,
    *,
    reason: str,
    selection_kind: str,
    who: str,
    started: dt.datetime,
    conversations: int,
    spans: int,
    log_records: int,
    scores: int,
    derived: dict[str, int],
    details: dict[str, Any] | None = None,
) -> None:
    con.execute(
        f"INSERT INTO {ALIAS}.erasures (erase_id, reason, requested_by, selection, started_at, "
        "status, conversations, spans, log_records, scores_cleared, derived_rows, details) "
        "VALUES (?, ?, ?, ?, ?, 'erased', ?, ?, ?, ?, ?, ?)",
        [
            erase_id,
            reason,
            who,
            selection_kind,
            started,
            conversations,
            spans,
            log_records,
            scores,
            sum(derived.values()),
            orjson.dumps({"derived_rows": derived, **(details or {})}).decode(),
        ],
    )


# The tables whose files an erasure or a retention pass rewrites.
REWRITTEN_TABLES = ["spans", "logs", "scores", "eval_runs", *CONVERSATION_CONTENT]
