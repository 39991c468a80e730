"""Snapshots and files as DuckLake keeps them: which snapshots may be expired (never one a running
evaluation pinned), and deleting the files expiry and compaction replaced."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable
from typing import Any

import duckdb

from spanscore.lake.connection import is_remote, metadata_catalog
from spanscore.lake.location import ALIAS, sql_string


def delete_old_files(
    con: duckdb.DuckDBPyConnection,
    older_than_s: float,
    run: Callable[[str], list[tuple[Any, ...]]],
    *,
    everything: bool = False,
) -> list[str]:
    """Delete the data files compaction and expiry replaced more than `older_than_s` ago (a
    reader that listed them before may still be reading them); returns their paths.

    DuckLake's `ducklake_cleanup_old_files` does this right on a PostgreSQL catalog. On the
    embedded lake's SQLite catalog it compares `older_than` with each file's `schedule_start`
    as text (`2026-11-24 10:15...` against `2026-11-24T09:15...`), so every file scheduled on
    the same day as `older_than`, even hours after it, is deleted at once. There, the times
    are compared here, and the files deleted here: DuckLake's table of files scheduled for
    deletion is part of its specification, and deleting a file and then its row, as DuckLake
    does, is safe to repeat after a crash. Data files on object storage (a SQLite catalog with
    an S3 data path), which only DuckLake can delete, are given to it with a cutoff its text
    comparison cannot get wrong: the end of the day two days before `older_than`, so they
    are deleted up to two days later than the retention asks.

    `everything`: every file scheduled, however recently (an erasure's old files)."""
    catalog_type, data_path = lake_settings(con)
    if everything and (catalog_type != "sqlite" or is_remote(data_path)):
        return [
            str(r[0])
            for r in run(f"CALL ducklake_cleanup_old_files('{ALIAS}', cleanup_all => true)")
        ]
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=older_than_s)
    if catalog_type != "sqlite":
        return [
            str(r[0])
            for r in run(
                f"CALL ducklake_cleanup_old_files('{ALIAS}', "
                f"older_than => now() - INTERVAL {int(older_than_s)} SECOND)"
            )
        ]
    if is_remote(data_path):
        # Two days back: `schedule_start` may be written in a local time zone.
        day = cutoff.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
        return [
            str(r[0])
            for r in run(
                f"CALL ducklake_cleanup_old_files('{ALIAS}', "
                f"older_than => '{(day - dt.timedelta(microseconds=1)).isoformat()}'::TIMESTAMPTZ)"
            )
        ]
    scheduled = f"{metadata_catalog(con)}.ducklake_files_scheduled_for_deletion"
    # Read whole and compared here: a filter on `schedule_start` reaches SQLite as text.
    due = [
        (int(file_id), str(path) if not relative else data_path + str(path))
        for file_id, path, relative, scheduled_at in con.execute(
            f"SELECT data_file_id, path, path_is_relative, schedule_start FROM {scheduled}"
        ).fetchall()
        if everything or _catalog_time(scheduled_at) < cutoff
    ]
    if not due:
        return []
    for _, path in due:
        with contextlib.suppress(FileNotFoundError):  # deleted before a crash, not its row
            os.remove(path)
    ids = ", ".join(str(file_id) for file_id, _ in due)
    run(f"DELETE FROM {scheduled} WHERE data_file_id IN ({ids})")
    return [path for _, path in due]


def lake_settings(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """The lake's catalog type (`sqlite`, `postgres`, ...) and data path."""
    row = con.execute(
        f"SELECT catalog_type, data_path FROM ducklake_settings({sql_string(ALIAS)})"
    ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _catalog_time(value: object) -> dt.datetime:
    """A time as the SQLite catalog holds it (`2026-11-24 10:15:00.123+00`), in UTC."""
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if moment.tzinfo is None:  # DuckDB writes an offset; without one, take it for UTC
        moment = moment.replace(tzinfo=dt.UTC)
    return moment


# A run still `running` after this long is taken for dead (killed before it could say so)
# and no longer holds snapshots back.
PINNED_SNAPSHOT_HOURS = 24


# The evaluations running now, as maintenance sees them.
_RUNNING_EVALUATIONS = f"""{ALIAS}.eval_runs
    WHERE status = 'running' AND started_at > now() - INTERVAL {PINNED_SNAPSHOT_HOURS} HOUR"""


# The snapshots maintenance may remove (`{snapshots}`: DuckLake's list of them): never the
# latest, and none a running evaluation pinned (`details.snapshot` of its `eval_runs` row),
# nor newer: it reads there in every worker for as long as it runs.
_REMOVABLE = f"""snapshot_id < (SELECT max(snapshot_id) FROM {{snapshots}})
    AND snapshot_id < coalesce((
        SELECT min(TRY_CAST(json_extract_string(details, '$.snapshot') AS BIGINT))
        FROM {_RUNNING_EVALUATIONS}), 9223372036854775807)"""


def expirable_snapshots(con: duckdb.DuckDBPyConnection, older_than_s: float) -> list[int]:
    """The snapshots to expire: older than `older_than_s`, never the latest, and older than
    any a running evaluation pinned (`details.snapshot` of its `eval_runs` row), which it reads
    in every worker for as long as it runs. (Ids, not `older_than =>`: DuckLake 1.5 expired
    snapshots newer than the time it was given.)"""
    snapshots = f"ducklake_snapshots({sql_string(ALIAS)})"
    row = con.execute(
        f"""SELECT list(snapshot_id ORDER BY snapshot_id) FROM {snapshots}
        WHERE snapshot_time < now() - INTERVAL {int(older_than_s)} SECOND
            AND {_REMOVABLE.format(snapshots=snapshots)}"""
    ).fetchone()
    return list(row[0]) if row and row[0] else []


# Snapshots older than this many thinning intervals are kept one per this many intervals.
THIN_COARSER_AFTER = 10


def thinned_snapshots(con: duckdb.DuckDBPyConnection, interval_s: float) -> list[int]:
    """The snapshots to expire so that time travel keeps one per `interval_s` (the newest of
    each interval of the clock) once they are that old, and one per `THIN_COARSER_AFTER`
    intervals once they are that many intervals old; never the latest, nor one a running
    evaluation pinned, nor newer (`expirable_snapshots`).

    DuckLake lists a table's files with a catalog query that reads every file's statistics
    still in any snapshot, and DuckDB's SQLite reader pushes no filter down: each commit's
    file stays in that read until every snapshot that saw it expires, hours after
    compaction replaced it. Kept one per interval, a snapshot sees the files of its moment,
    and the small files of the commits between two of them leave the catalog."""
    snapshots = f"ducklake_snapshots({sql_string(ALIAS)})"
    fine = float(interval_s)
    coarse = fine * THIN_COARSER_AFTER
    row = con.execute(
        f"""WITH aged AS (
            SELECT snapshot_id, epoch(snapshot_time) AS taken,
                   epoch(now()) - epoch(snapshot_time) AS age
            FROM {snapshots}
        ),
        bucketed AS (
            SELECT snapshot_id, age,
                   CASE WHEN age >= {coarse} THEN floor(taken / {coarse})
                        ELSE floor(taken / {fine}) END AS bucket,
                   age >= {coarse} AS is_coarse
            FROM aged WHERE age >= {fine}
        )
        SELECT list(snapshot_id ORDER BY snapshot_id) FROM (
            SELECT snapshot_id, snapshot_id <> max(snapshot_id) OVER (
                PARTITION BY is_coarse, bucket) AS superseded
            FROM bucketed
        )
        WHERE superseded AND {_REMOVABLE.format(snapshots=snapshots)}"""
    ).fetchone()
    return list(row[0]) if row and row[0] else []


def snapshot_exists(con: duckdb.DuckDBPyConnection, snapshot: int) -> bool:
    """Whether the lake still has this snapshot (expiry and thinning remove old ones)."""
    row = con.execute(
        f"SELECT count(*) FROM ducklake_snapshots({sql_string(ALIAS)}) WHERE snapshot_id = ?",
        [snapshot],
    ).fetchone()
    return bool(row and row[0])


def evaluation_running(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(f"SELECT count(*) FROM {_RUNNING_EVALUATIONS}").fetchone()
    return bool(row and row[0])


def running_evaluations(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The ids of the evaluations running now, as maintenance sees them (oldest first)."""
    rows = con.execute(f"SELECT run_id FROM {_RUNNING_EVALUATIONS} ORDER BY started_at").fetchall()
    return [str(r[0]) for r in rows]


def data_size(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, int]]:
    """The lake's size as its catalog records it, per table: `bytes` and `files` of the data
    and delete files the current snapshot reads, and `retained_bytes` of those only older
    snapshots still read (freed when they expire). One catalog query, no file listed, so it
    is the same for a local directory and object storage; files already scheduled for
    deletion are not counted."""
    metadata = metadata_catalog(con)
    rows = con.execute(
        f"""WITH files AS (
                SELECT table_id, end_snapshot, file_size_bytes FROM {metadata}.ducklake_data_file
                UNION ALL
                SELECT table_id, end_snapshot, file_size_bytes
                FROM {metadata}.ducklake_delete_file
            )
            SELECT t.table_name,
                   coalesce(sum(f.file_size_bytes) FILTER (WHERE f.end_snapshot IS NULL), 0),
                   count(*) FILTER (WHERE f.end_snapshot IS NULL),
                   coalesce(sum(f.file_size_bytes) FILTER (WHERE f.end_snapshot IS NOT NULL), 0)
            FROM {metadata}.ducklake_table t JOIN files f ON f.table_id = t.table_id
            WHERE t.end_snapshot IS NULL
            GROUP BY t.table_name ORDER BY t.table_name"""
    ).fetchall()
    return {
        str(name): {"bytes": int(size), "files": int(files), "retained_bytes": int(retained)}
        for name, size, files, retained in rows
    }
