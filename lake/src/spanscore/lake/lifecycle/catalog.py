"""The one module that edits DuckLake's own catalog tables (`ducklake_table_column_stats`,
`ducklake_file_column_stats`, `ducklake_data_file`, `ducklake_column`), and compacts an
embedded lake's SQLite catalog: after an erasure, a deleted value must not survive as a column
bound or in the catalog's free pages. `tests/lake/test_catalog_tables.py` fails loudly when a
DuckLake upgrade changes the tables and columns named here (`CATALOG_COLUMNS`)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import orjson

from spanscore.lake.connection import (
    commits_since,
    current_snapshot,
    metadata_catalog,
    postgres_metadata_schema,
)
from spanscore.lake.lifecycle.common import Step
from spanscore.lake.location import ALIAS, log, sql_string
from spanscore.lake.snapshots import (
    lake_settings,
)

# The catalog tables and columns this module reads or writes: checked against the DuckLake in
# use by the tests, so that an upgrade that renames one fails there, not silently here.
CATALOG_COLUMNS: dict[str, tuple[str, ...]] = {
    "ducklake_table_column_stats": ("table_id", "column_id", "min_value", "max_value"),
    "ducklake_file_column_stats": (
        "data_file_id",
        "table_id",
        "column_id",
        "min_value",
        "max_value",
    ),
    "ducklake_data_file": ("data_file_id", "end_snapshot"),
    "ducklake_column": ("table_id", "column_id", "end_snapshot", "column_type"),
    "ducklake_snapshot_changes": ("snapshot_id", "author"),
}


# A table's text columns' bounds, set again from the files it has now: DuckLake widens them
# with each insert and never narrows them, so a deleted value could stay as a bound.
TABLE_TEXT_BOUNDS = """
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
    again from the files left (`TABLE_TEXT_BOUNDS`, `reset_bounds`), then, on an embedded
    lake, VACUUM and an emptied write-ahead log (deleted catalog rows, the column statistics of
    deleted files, stay in its free pages until then); a PostgreSQL catalog's statistics tables
    are vacuumed. Retried while another process holds the catalog; False when that took longer
    than `deadline_s`, or PostgreSQL refused."""
    catalog_type, _ = lake_settings(con)
    if catalog_type == "postgres":
        return reset_bounds(
            con, step, erase_ids, lambda: run_in_postgres(con, postgres_bounds)
        ) and run_in_postgres(con, postgres_vacuum, in_transaction=False)
    if catalog_type != "sqlite":
        return True  # no catalog of ours to compact
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = ?", [ALIAS]
    ).fetchone()
    if row is None or not row[0]:
        return False
    path = str(row[0]).removeprefix("sqlite:")

    def reset_sqlite_bounds() -> bool:
        in_sqlite(path, "BEGIN IMMEDIATE", TABLE_TEXT_BOUNDS.format(m=""), "COMMIT")
        return True

    def compact() -> list[tuple[Any, ...]]:
        in_sqlite(path, "VACUUM")
        # A reader on an older page set makes the checkpoint stop short, without an error:
        # the old pages would then stay in the database file.
        busy, logged, copied = in_sqlite(path, "PRAGMA wal_checkpoint(TRUNCATE)")
        if busy or logged != copied:
            raise sqlite3.OperationalError("the catalog's write-ahead log is in use")
        return []

    deadline = time.monotonic() + deadline_s
    bounds_reset = False
    while True:
        try:
            if not bounds_reset:  # SQLite refusing the reset raises, and is retried here
                bounds_reset = reset_bounds(con, step, erase_ids, reset_sqlite_bounds)
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
SQLITE_STATEMENTS = """
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


def in_sqlite(path: str, *statements: str) -> list[Any]:
    """Run `statements` on the SQLite database at `path` in a child process (why:
    `SQLITE_STATEMENTS`); the last one's first row. sqlite3.OperationalError when SQLite
    refused (busy, locked), with its message."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", SQLITE_STATEMENTS, path, *statements],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise sqlite3.OperationalError(done.stderr.strip() or f"exit code {done.returncode}")
    row: list[Any] = orjson.loads(done.stdout)
    return row


def reset_bounds(
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
    shared = lake_settings(con)[0] == "postgres"
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


def postgres_bounds(schema: str) -> list[str]:
    """The statement that sets a PostgreSQL catalog's text bounds again (`TABLE_TEXT_BOUNDS`,
    run by PostgreSQL itself)."""
    return [TABLE_TEXT_BOUNDS.format(m=schema + ".")]


def postgres_vacuum(schema: str) -> list[str]:
    """The statements that vacuum a PostgreSQL catalog's tables of statistics, so that the
    dead rows holding deleted values go too (VACUUM runs outside a transaction)."""
    return [
        f"VACUUM {schema}.{t}"
        for t in ("ducklake_table_column_stats", "ducklake_file_column_stats")
    ]


def run_in_postgres(
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
