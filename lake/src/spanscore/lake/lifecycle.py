"""The data's lifecycle: retention (rows past `retention_days` deleted by maintenance) and
erasure (`spanscore erase`), each in two phases.

1. The rows leave the lake's current data in one transaction: a reader sees a conversation
   whole or not at all, and a process killed meanwhile leaves the lake as it was.
2. They leave the disk: the data files holding them are rewritten without them
   (`ducklake_rewrite_data_files`), the snapshots that still reference the old files are
   expired, the old files deleted, and an embedded lake's SQLite catalog compacted (`VACUUM`:
   its free pages still hold the column statistics of the deleted files).

Each phase is recorded in the `erasures` table (who, when, how many rows; never which). A row
whose second phase did not end (killed, or deferred while an evaluation runs: a run never loses
the snapshot it pinned, nor the files it reads) stays `erased` until the next erase or
maintenance finishes it (`finish_erasures`).
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from spanscore.lake.connection import (
    commits_since,
    current_snapshot,
    metadata_catalog,
    postgres_metadata_schema,
)
from spanscore.lake.location import ALIAS, log, sql_string
from spanscore.lake.retry import retrying
from spanscore.lake.schema.tables import CONVERSATION_CONTENT, quote_identifier
from spanscore.lake.snapshots import (
    _delete_old_files,
    _evaluation_running,
    _expirable_snapshots,
    _lake_settings,
)

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

_IDS = "temp.main.spanscore_erase_ids"
_SELECTED = f"(SELECT conversation_id FROM {_IDS})"
# Traces of the selected conversations: their other spans (and records) go too.
_TRACES = f"(SELECT trace_id FROM {ALIAS}.spans WHERE conversation_id IN {_SELECTED})"


def requested_by() -> str:
    """Who asks, for the audit table: the OS user and host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class Selection:
    """The conversations an erase would remove, and what of theirs it would delete."""

    conversations: list[str]
    unknown: list[str] = field(default_factory=list)  # asked for by id, not in the lake
    spans: int = 0
    log_records: int = 0
    scores: int = 0
    derived: dict[str, int] = field(default_factory=dict)  # CONVERSATION_CONTENT rows by table

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversations": len(self.conversations),
            "unknown": self.unknown,
            "spans": self.spans,
            "log_records": self.log_records,
            "scores": self.scores,
            "derived_rows": self.derived,
        }


def select_conversations(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str] = (),
    where: str | None = None,
) -> Selection:
    """The conversations given by id (`unknown`: those in no table of the lake) or matched by
    a `where` over the `conversations` view, with the rows an erase would delete. Leaves them
    in a temporary table for `erase`."""
    if where is not None:
        rows = con.execute(
            f"SELECT DISTINCT conversation_id FROM {ALIAS}.conversations WHERE {where}"
        ).fetchall()
        found = sorted(str(r[0]) for r in rows if r[0] is not None)
        unknown: list[str] = []
    else:
        asked = list(dict.fromkeys(ids))
        _keep_ids(con, asked)
        sources = ["spans", "logs", "scores", *CONVERSATION_CONTENT]
        union = " UNION ".join(
            f"SELECT conversation_id FROM {ALIAS}.{quote_identifier(t)} "
            f"WHERE conversation_id IN {_SELECTED}"
            for t in sources
        )
        known = {str(r[0]) for r in con.execute(union).fetchall()}
        found = [i for i in asked if i in known]
        unknown = [i for i in asked if i not in known]
    _keep_ids(con, found)
    counts = con.execute(
        f"""SELECT
            (SELECT count(*) FROM {ALIAS}.spans
                WHERE conversation_id IN {_SELECTED} OR trace_id IN {_TRACES}),
            (SELECT count(*) FROM {ALIAS}.logs
                WHERE conversation_id IN {_SELECTED} OR trace_id IN {_TRACES}),
            (SELECT count(*) FROM {ALIAS}.scores WHERE conversation_id IN {_SELECTED})"""
    ).fetchone()
    assert counts is not None
    derived = {
        table: int(
            con.execute(
                f"SELECT count(*) FROM {ALIAS}.{quote_identifier(table)} "
                f"WHERE conversation_id IN {_SELECTED}"
            ).fetchone()[0]  # type: ignore[index]
        )
        for table in CONVERSATION_CONTENT
    }
    return Selection(found, unknown, int(counts[0]), int(counts[1]), int(counts[2]), derived)


def _keep_ids(con: duckdb.DuckDBPyConnection, ids: list[str]) -> None:
    con.register("spanscore_erase_input", pa.table({"conversation_id": pa.array(ids, pa.string())}))
    try:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE spanscore_erase_ids AS "
            "SELECT * FROM spanscore_erase_input"
        )
    finally:
        con.unregister("spanscore_erase_input")


def erase(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    *,
    selection_kind: str,
    who: str | None = None,
    deadline_s: float = 120.0,
) -> str:
    """Phase 1 for the conversations of `selection` (`select_conversations` on this
    connection, just before): in one transaction, delete their spans and log records and
    those of their traces, clear their scores' explanation and details, delete their rows of
    every `CONVERSATION_CONTENT` table, and record the erasure. Returns its id."""
    erase_id = uuid.uuid4().hex
    started = dt.datetime.now(dt.UTC)

    def transaction() -> None:
        con.execute("BEGIN")
        # Records first: the spans' delete removes what finds their traces.
        for table in ("logs", "spans"):
            con.execute(
                f"DELETE FROM {ALIAS}.{table} "
                f"WHERE conversation_id IN {_SELECTED} OR trace_id IN {_TRACES}"
            )
        con.execute(
            f"UPDATE {ALIAS}.scores SET explanation = NULL, details = NULL "
            f"WHERE conversation_id IN {_SELECTED} "
            "AND (explanation IS NOT NULL OR details IS NOT NULL)"
        )
        for table in CONVERSATION_CONTENT:
            con.execute(
                f"DELETE FROM {ALIAS}.{quote_identifier(table)} "
                f"WHERE conversation_id IN {_SELECTED}"
            )
        _record(
            con,
            erase_id,
            reason="erase",
            selection_kind=selection_kind,
            who=who or requested_by(),
            started=started,
            conversations=len(selection.conversations),
            spans=selection.spans,
            log_records=selection.log_records,
            scores=selection.scores,
            derived=selection.derived,
        )
        con.execute("COMMIT")

    retrying(transaction, con=con, deadline_s=deadline_s, what="erase")
    return erase_id


def _record(
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


# The tables erasure and retention delete from: their files are rewritten without the rows.
def _affected_tables() -> list[str]:
    return ["spans", "logs", "scores", "eval_runs", *CONVERSATION_CONTENT]


def pending_erasures(con: duckdb.DuckDBPyConnection, reason: str | None = None) -> list[str]:
    """Ids of the erasures whose rows may still be on disk (status `erased`)."""
    rows = con.execute(
        f"SELECT erase_id FROM {ALIAS}.erasures WHERE status = 'erased'"
        + (" AND reason = ?" if reason else "")
        + " ORDER BY started_at",
        [reason] if reason else [],
    ).fetchall()
    return [str(r[0]) for r in rows]


def finish_erasures(
    con: duckdb.DuckDBPyConnection,
    step: Step,
    *,
    reason: str | None = "erase",
) -> dict[str, int]:
    """Phase 2 of every pending erasure (of `reason`): rewrite the affected tables' files
    without deleted rows, expire every snapshot but the latest, delete the files no snapshot
    references, compact a SQLite catalog, and mark them `purged`. Deferred (`purge_deferred`)
    while an evaluation runs: it reads the snapshot it pinned, and the files of it; or, with
    `catalog_busy` too, while another process kept the catalog from being compacted."""
    pending = pending_erasures(con, reason)
    done = {"erasures_finished": 0, "purge_deferred": 0}
    if not pending:
        return done
    if _evaluation_running(con):
        done["purge_deferred"] = 1
        return done
    done |= purge(con, step)
    if done["purge_deferred"]:  # an evaluation started while the files were rewritten
        return done
    done["catalog_scrubbed"] = int(scrub_catalog(con, step, pending))
    if not done["catalog_scrubbed"]:
        # Its old values are still in the catalog: another process holds it open.
        done["purge_deferred"] = done["catalog_busy"] = 1
        return done
    ids = ", ".join(sql_string(i) for i in pending)
    details = orjson.dumps(
        {k: done[k] for k in ("files_rewritten", "snapshots_expired", "files_deleted")}
    ).decode()
    step(
        f"UPDATE {ALIAS}.erasures SET status = 'purged', finished_at = now(), "
        f"details = json_merge_patch(coalesce(details, '{{}}'), {sql_string(details)}) "
        f"WHERE erase_id IN ({ids})",
        "record erasures",
    )
    done["erasures_finished"] = len(pending)
    return done


def purge(con: duckdb.DuckDBPyConnection, step: Step) -> dict[str, int]:
    """Deleted rows off the data files: the files holding them rewritten, every snapshot but
    the latest expired, unreferenced files deleted (the catalog is the caller's:
    `scrub_catalog`). An evaluation that
    started while the files were rewritten defers the rest (`purge_deferred`): it reads the
    snapshot it pinned, and the files of it; and a snapshot a running evaluation pinned is
    never expired, however late it registered."""
    done = {
        "files_rewritten": 0,
        "snapshots_expired": 0,
        "files_deleted": 0,
        "purge_deferred": 0,
    }
    for table in _affected_tables():
        rows = step(
            f"CALL ducklake_rewrite_data_files({sql_string(ALIAS)}, {sql_string(table)}, "
            "delete_threshold => 0)",
            "rewrite files",
        )
        done["files_rewritten"] += sum(int(r[2] or 0) for r in rows)
    if _evaluation_running(con):
        done["purge_deferred"] = 1
        return done
    older = _expirable_snapshots(con, 0.0)
    if older:
        expired = step(
            f"CALL ducklake_expire_snapshots({sql_string(ALIAS)}, versions => {older})",
            "expire snapshots",
        )
        done["snapshots_expired"] = len(expired)
    done["files_deleted"] = len(
        _delete_old_files(con, 0.0, lambda sql: step(sql, "delete old files"), everything=True)
    )
    return done


# A table's text columns' bounds, set again from the files it has now: DuckLake widens them
# with each insert and never narrows them, so a deleted value could stay as a bound.
_TABLE_TEXT_BOUNDS = """
UPDATE {m}ducklake_table_column_stats AS s SET
    min_value = (
        SELECT min(f.min_value) FROM {m}ducklake_file_column_stats f
        JOIN {m}ducklake_data_file d ON d.data_file_id = f.data_file_id AND d.end_snapshot IS NULL
        WHERE f.table_id = s.table_id AND f.column_id = s.column_id),
    max_value = (
        SELECT max(f.max_value) FROM {m}ducklake_file_column_stats f
        JOIN {m}ducklake_data_file d ON d.data_file_id = f.data_file_id AND d.end_snapshot IS NULL
        WHERE f.table_id = s.table_id AND f.column_id = s.column_id)
WHERE EXISTS (
    SELECT 1 FROM {m}ducklake_column c
    WHERE c.table_id = s.table_id AND c.column_id = s.column_id
        AND c.end_snapshot IS NULL AND c.column_type IN ('varchar', 'json'))
"""


def scrub_catalog(
    con: duckdb.DuckDBPyConnection, step: Step, erase_ids: Sequence[str], deadline_s: float = 60.0
) -> bool:
    """The catalog without the values of deleted rows: the text columns' table-wide bounds set
    again from the files left (`_TABLE_TEXT_BOUNDS`, `_reset_bounds`), then, on an embedded
    lake, VACUUM and an emptied write-ahead log (deleted catalog rows, the column statistics of
    deleted files, stay in its free pages until then); a PostgreSQL catalog's statistics tables
    are vacuumed. Retried while another process holds the catalog; False when that took longer
    than `deadline_s`, or PostgreSQL refused."""
    catalog_type, _ = _lake_settings(con)
    if catalog_type == "postgres":
        return _reset_bounds(
            con, step, erase_ids, lambda: _run_in_postgres(con, _postgres_bounds)
        ) and _run_in_postgres(con, _postgres_vacuum, in_transaction=False)
    if catalog_type != "sqlite":
        return True  # no catalog of ours to compact
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = ?", [ALIAS]
    ).fetchone()
    if row is None or not row[0]:
        return False
    path = str(row[0]).removeprefix("sqlite:")

    def reset_sqlite_bounds() -> bool:
        _in_sqlite(path, "BEGIN IMMEDIATE", _TABLE_TEXT_BOUNDS.format(m=""), "COMMIT")
        return True

    def compact() -> list[tuple[Any, ...]]:
        _in_sqlite(path, "VACUUM")
        # A reader on an older page set makes the checkpoint stop short, without an error:
        # the old pages would then stay in the database file.
        busy, logged, copied = _in_sqlite(path, "PRAGMA wal_checkpoint(TRUNCATE)")
        if busy or logged != copied:
            raise sqlite3.OperationalError("the catalog's write-ahead log is in use")
        return []

    deadline = time.monotonic() + deadline_s
    bounds_reset = False
    while True:
        try:
            if not bounds_reset:  # SQLite refusing the reset raises, and is retried here
                bounds_reset = _reset_bounds(con, step, erase_ids, reset_sqlite_bounds)
            # In a step, as every writer commits: in the commit turn, and (in a collector's
            # maintenance) with its writer paused, so that no commit reads the catalog between.
            step(compact, "compact catalog")
            return True
        except sqlite3.OperationalError as exc:
            if time.monotonic() > deadline:
                log.warning("could not scrub the lake's catalog: %s", exc)
                return False
            time.sleep(0.2)


# Runs statements on a SQLite catalog in a process of its own: this process's DuckDB opened
# the same file with its own SQLite library, and POSIX locks are the process's, so closing a
# second library's connection here would drop DuckDB's locks, and a checkpoint would then
# rewrite pages under its readers (a reader found a snapshot id of type text after VACUUM).
_SQLITE_STATEMENTS = """
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=5.0, isolation_level=None)
try:
    row = None
    for statement in sys.argv[2:]:
        row = con.execute(statement).fetchone()
    print(json.dumps(list(row) if row else []))
except sqlite3.OperationalError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3)
finally:
    con.close()
"""


def _in_sqlite(path: str, *statements: str) -> list[Any]:
    """Run `statements` on the SQLite database at `path` in a child process (why:
    `_SQLITE_STATEMENTS`); the last one's first row. sqlite3.OperationalError when SQLite
    refused (busy, locked), with its message."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _SQLITE_STATEMENTS, path, *statements],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise sqlite3.OperationalError(done.stderr.strip() or f"exit code {done.returncode}")
    row: list[Any] = orjson.loads(done.stdout)
    return row


def _reset_bounds(
    con: duckdb.DuckDBPyConnection,
    step: Step,
    erase_ids: Sequence[str],
    reset: Callable[[], bool],
    tries: int = 5,
) -> bool:
    """`reset` the catalog's bounds, then at once move the lake's next file id on with a
    DuckLake write (on the `erasures` rows of `erase_ids`), in one step: on an embedded lake
    one commit turn, after the collector's writer paused, as every step.

    A process caches a table's bounds by that id, and a commit merges its new files into the
    bounds it cached: a collector that read the bounds before the reset would write the deleted
    value back with its next commit. After the move, its commit conflicts and reads them again.
    On a PostgreSQL catalog (no commit turn), a commit that still came between the reset and
    the move may have written one back: then both are done again, up to `tries` times.
    False when the reset failed, or commits kept coming between."""
    ids = ", ".join(sql_string(i) for i in erase_ids)
    author = f"spanscore-scrub-{uuid.uuid4().hex[:12]}"
    shared = _lake_settings(con)[0] == "postgres"
    for _ in range(tries):
        before = current_snapshot(con)

        def reset_and_move() -> list[tuple[Any, ...]]:
            if not reset():
                return [(False,)]
            con.execute("BEGIN TRANSACTION")
            if shared:  # (on a SQLite catalog, DuckLake then writes the snapshot's ids as text)
                con.execute(f"CALL {ALIAS}.set_commit_message(?, ?)", [author, "catalog scrubbed"])
            con.execute(
                f"UPDATE {ALIAS}.erasures SET details = json_merge_patch(coalesce(details, "
                f"'{{}}'), '{{\"catalog_bounds_reset\": true}}') WHERE erase_id IN ({ids})"
            )
            con.execute("COMMIT")
            return [(True,)]

        if not step(reset_and_move, "reset catalog bounds")[0][0]:
            return False
        if not shared:
            return True  # the commit turn let no commit come between
        mine = con.execute(
            f"SELECT max(snapshot_id) FROM {metadata_catalog(con)}.ducklake_snapshot_changes "
            "WHERE snapshot_id > ? AND author = ?",
            [before, author],
        ).fetchone()
        others = commits_since(con, before, not_by=author)
        ours = None if mine is None or mine[0] is None else int(mine[0])
        if ours is not None and others is not None and all(s > ours for s in others):
            return True
    return False


def _postgres_bounds(schema: str) -> list[str]:
    """The statement that sets a PostgreSQL catalog's text bounds again (`_TABLE_TEXT_BOUNDS`,
    run by PostgreSQL itself)."""
    return [_TABLE_TEXT_BOUNDS.format(m=schema + ".")]


def _postgres_vacuum(schema: str) -> list[str]:
    """The statements that vacuum a PostgreSQL catalog's tables of statistics, so that the
    dead rows holding deleted values go too (VACUUM runs outside a transaction)."""
    return [
        f"VACUUM {schema}.{t}"
        for t in ("ducklake_table_column_stats", "ducklake_file_column_stats")
    ]


def _run_in_postgres(
    con: duckdb.DuckDBPyConnection,
    statements: Callable[[str], list[str]],
    *,
    in_transaction: bool = True,
) -> bool:
    """Statements (made for the catalog's schema) run by PostgreSQL itself; False, and a
    warning, when it refused."""
    try:
        schema = postgres_metadata_schema(con)
        if schema is None:
            log.warning("could not scrub the lake's PostgreSQL catalog: its schema is unknown")
            return False
        for statement in statements(schema):
            con.execute(
                "CALL postgres_execute(?, ?, use_transaction := ?)",
                [f"__ducklake_metadata_{ALIAS}", statement, in_transaction],
            )
    except duckdb.Error as exc:
        log.warning("could not scrub the lake's PostgreSQL catalog: %s", exc)
        return False
    return True


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
                    f"WHERE conversation_id IN {_SELECTED}",
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
                f"WHERE (conversation_id IN {_SELECTED} OR created_at < {raw}) "
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
                con.execute(f"SELECT count(*) FROM {_IDS}").fetchall()[0][0] if raw else 0
            )
            _record(
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
        for table in _affected_tables():
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
