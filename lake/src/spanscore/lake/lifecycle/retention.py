"""Retention: rows past `retention_days` (and scores past `score_retention_days`) deleted by
maintenance, in the same two phases as an erasure; and the oldest data the lake keeps."""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from typing import Any

import duckdb

from spanscore.lake.connection import (
    metadata_catalog,
)
from spanscore.lake.lifecycle.catalog import scrub_catalog
from spanscore.lake.lifecycle.common import (
    AGED_CONTENT,
    RAW_TIMES,
    REWRITTEN_TABLES,
    SELECTED,
    SELECTED_IDS,
    Step,
    record_erasure,
)
from spanscore.lake.location import ALIAS, sql_string
from spanscore.lake.schema.tables import CONVERSATION_CONTENT, quote_identifier


def apply_retention(
    con: duckdb.DuckDBPyConnection,
    step: Step,
    *,
    retention_days: float | None,
    score_retention_days: float | None,
) -> dict[str, int]:
    """Delete the rows past retention, in one transaction: spans and log records older than
    `retention_days` (by their start, their time); of the conversations they belonged to,
    the rows of `CONVERSATION_CONTENT` and the scores' explanation and details (which may
    quote them); judge answers, simulated turns, labels, queued items and score explanations
    and details older than that, whatever conversation they name (`AGED_CONTENT`); and scores
    and finished
    `eval_runs` older than `score_retention_days`. The files holding them are
    rewritten at once; they leave the disk with the snapshots maintenance expires
    (`finish_retention`). The cutoff moves by whole hours, so that later passes in the hour
    find nothing (and commit nothing). Recorded in `erasures` when it deleted anything."""
    done = {"retention_rows_deleted": 0}
    if retention_days is None and score_retention_days is None:
        return done
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)

    def cutoff(days: float) -> str:
        return f"'{(now - dt.timedelta(days=days)).isoformat()}'::TIMESTAMPTZ"

    raw = cutoff(retention_days) if retention_days is not None else None
    if raw is not None:
        # The conversations retention reaches (read before the transaction, which writes
        # only the lake).
        con.execute(
            "CREATE OR REPLACE TEMP TABLE spanscore_erase_ids AS "
            + " UNION ".join(
                f"SELECT conversation_id FROM {ALIAS}.{table} "
                f"WHERE {column} < {raw} AND conversation_id IS NOT NULL"
                for table, column in RAW_TIMES.items()
            )
        )
    counts: dict[str, int] = {}

    def transaction() -> list[tuple[Any, ...]]:
        counts.clear()
        con.execute("BEGIN")

        def delete(key: str, sql: str) -> None:
            row = con.execute(sql).fetchone()
            counts[key] = counts.get(key, 0) + int(row[0] if row else 0)

        if raw is not None:
            for table, column in RAW_TIMES.items():
                delete(table, f"DELETE FROM {ALIAS}.{table} WHERE {column} < {raw}")
            for table in CONVERSATION_CONTENT:
                delete(
                    table,
                    f"DELETE FROM {ALIAS}.{quote_identifier(table)} "
                    f"WHERE conversation_id IN {SELECTED}",
                )
            # And by their own age, whatever conversation they name: what was made of a
            # conversation is never younger than it, and some conversations have no span
            # here to age them (a simulated one whose agent sends its spans elsewhere, answers
            # stored before the cache named the conversation that asked).
            for table, column in AGED_CONTENT.items():
                delete(table, f"DELETE FROM {ALIAS}.{table} WHERE {column} < {raw}")
            delete(
                "scores_cleared",
                f"UPDATE {ALIAS}.scores SET explanation = NULL, details = NULL "
                f"WHERE (conversation_id IN {SELECTED} OR created_at < {raw}) "
                "AND (explanation IS NOT NULL OR details IS NOT NULL)",
            )
        if score_retention_days is not None:
            kept = cutoff(score_retention_days)
            delete("scores", f"DELETE FROM {ALIAS}.scores WHERE created_at < {kept}")
            delete(
                "eval_runs",
                f"DELETE FROM {ALIAS}.eval_runs WHERE started_at < {kept} AND status <> 'running'",
            )
        if any(counts.values()):
            # Files numbered from here on hold none of the rows deleted now.
            [(first_new,)] = con.execute(
                f"SELECT next_file_id FROM {metadata_catalog(con)}.ducklake_snapshot "
                "ORDER BY snapshot_id DESC LIMIT 1"
            ).fetchall()
            conversations = (
                con.execute(f"SELECT count(*) FROM {SELECTED_IDS}").fetchall()[0][0] if raw else 0
            )
            record_erasure(
                con,
                uuid.uuid4().hex,
                reason="retention",
                selection_kind="retention",
                who="maintenance@" + socket.gethostname(),
                started=dt.datetime.now(dt.UTC),
                conversations=int(conversations),
                spans=counts.get("spans", 0),
                log_records=counts.get("logs", 0),
                scores=counts.get("scores_cleared", 0) + counts.get("scores", 0),
                derived={t: counts.get(t, 0) for t in CONVERSATION_CONTENT},
                details={"first_new_file": int(first_new)},
            )
            con.execute("COMMIT")
        else:
            con.execute("ROLLBACK")  # nothing past retention: no commit
        return []

    step(transaction, "apply retention")
    done["retention_rows_deleted"] = sum(counts.values())
    if done["retention_rows_deleted"]:
        for table in REWRITTEN_TABLES:
            step(
                f"CALL ducklake_rewrite_data_files({sql_string(ALIAS)}, {sql_string(table)}, "
                "delete_threshold => 0)",
                "rewrite files",
            )
    return done


def finish_retention(con: duckdb.DuckDBPyConnection, step: Step) -> dict[str, int]:
    """Retention passes whose rows maintenance's own expiry and cleanup have taken off the
    disk by now: no file older than the pass (`details.first_new_file`: DuckLake numbers
    files in order) is still referenced by a snapshot or waiting for deletion. The catalog is
    then compacted and the passes marked `purged`."""
    metadata = metadata_catalog(con)
    rows = con.execute(
        f"""SELECT erase_id, TRY_CAST(json_extract_string(details, '$.first_new_file') AS BIGINT)
            FROM {ALIAS}.erasures WHERE status = 'erased' AND reason = 'retention'"""
    ).fetchall()
    if not rows:
        return {"retention_finished": 0}
    row = con.execute(
        f"""SELECT least(
                (SELECT min(data_file_id) FROM {metadata}.ducklake_data_file
                    WHERE end_snapshot IS NOT NULL),
                (SELECT min(data_file_id) FROM {metadata}.ducklake_files_scheduled_for_deletion))"""
    ).fetchone()
    oldest_left = row[0] if row and row[0] is not None else None
    due = [
        str(erase_id)
        for erase_id, first_new in rows
        if first_new is not None and (oldest_left is None or oldest_left >= first_new)
    ]
    if not due or not scrub_catalog(con, step, due):
        return {"retention_finished": 0}
    ids = ", ".join(sql_string(i) for i in due)
    step(
        f"UPDATE {ALIAS}.erasures SET status = 'purged', finished_at = now() "
        f"WHERE erase_id IN ({ids})",
        "record erasures",
    )
    return {"retention_finished": len(due)}


def oldest_kept(con: duckdb.DuckDBPyConnection) -> dict[str, dt.datetime | None]:
    """The oldest row of each kind the lake keeps: spans, log records, scores, runs."""
    row = con.execute(
        f"""SELECT (SELECT min(start_time) FROM {ALIAS}.spans),
                   (SELECT min(time) FROM {ALIAS}.logs),
                   (SELECT min(created_at) FROM {ALIAS}.scores),
                   (SELECT min(started_at) FROM {ALIAS}.eval_runs)"""
    ).fetchall()  # not fetchone: a result left unread keeps a read of the catalog open
    keys = ("oldest_span", "oldest_log_record", "oldest_score", "oldest_run")
    return dict(zip(keys, row[0] if row else (None,) * 4, strict=True))
