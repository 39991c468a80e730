"""Maintenance: what the collector's leader runs in the background. It expires old snapshots,
deletes files no snapshot needs, merges and sorts the small files that commits leave, and
stores settled conversations' trajectory rows (`stored`). Each step has a deadline and is
retried on a conflict; a failed step costs readers time, never data."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import duckdb

from spanscore.lake import schema
from spanscore.lake.lifecycle import (
    apply_retention,
    finish_erasures,
    finish_retention,
    pending_erasures,
)
from spanscore.lake.location import ALIAS, log, sql_string
from spanscore.lake.migrate import ROW_GROUP_SPANS, has_views, view_marks
from spanscore.lake.retry import is_interrupt, retrying
from spanscore.lake.snapshots import (
    delete_old_files,
    evaluation_running,
    expirable_snapshots,
    lake_settings,
    thinned_snapshots,
)

# Compaction leaves alone files of this size or more: the collector's commits write small
# files, and a merged file past this size is done (a run then rewrites at most this much of
# older data, whatever the lake's size).
MERGE_BELOW_BYTES = 4 << 20


# Compaction writes files of about this size (the lake's `target_file_size`), one at a time:
# each merge step, and so each pause of the collector's writer, rewrites at most this much.
# Past MERGE_BELOW_BYTES, so that a merged file is not merged again. At 32 MiB a file holds one
# row group of about 100,000 spans, where a conversation usually has several spans: DuckDB then
# writes `conversation_id` with a dictionary, and so with a bloom filter, and a query for one
# conversation skips the files without it (bench/query.py; at 16 MiB, half the files had none,
# at 8 MiB none did).
MERGED_FILE_BYTES = 32 << 20


# Files in the data path that no snapshot knows are deleted once this old, whatever the
# retention: a transaction in flight (another collector's commit, an evaluation writing its
# scores) has written its files and not yet their rows, so until it commits they look
# orphaned too. No transaction lasts this long; a crashed one's files cost a day's space.
ORPHANS_KEPT_S = 24 * 3600.0


def maintain(
    con: duckdb.DuckDBPyConnection,
    *,
    expire_older_than_s: float = 3600.0,
    delete_older_than_s: float = 3600.0,
    exclusive: Callable[[], contextlib.AbstractContextManager[object]] | None = None,
    step_deadline_s: float = 60.0,
    merge_below_bytes: int = MERGE_BELOW_BYTES,
    merged_file_bytes: int = MERGED_FILE_BYTES,
    store_settled_after_s: float | None = None,
    store_deadline_s: float | None = None,
    sort_spans: bool | None = None,
    compact_only: bool = False,
    early: bool = False,
    orphans_kept_s: float = ORPHANS_KEPT_S,
    retention_days: float | None = None,
    score_retention_days: float | None = None,
    snapshot_interval_s: float | None = None,
) -> dict[str, int]:
    """Compact small data files, expire old snapshots and delete files nobody can read any more;
    given `store_settled_after_s`, first store the trajectories of the conversations without a
    new span for that long (`stored.store_trajectories`, for at most `store_deadline_s`).

    `sort_spans` (by default, on an embedded lake) compacts `spans` and `logs` by rewriting
    their small files in order of conversation and time (`_sort_small_files`), in row groups
    of `SORTED_ROW_GROUP_SPANS`, so that one conversation is read from a row group or two
    instead of every row group its rows are strewn over (`span_files_sorted`,
    `log_files_sorted`, `sort_steps`). The rewrite deletes and inserts, which conflicts with
    any insert committed meanwhile: on an embedded lake the one collector is held off
    (`exclusive`), on a shared lake other collectors could not be, and DuckLake's merge (which
    conflicts with no insert, and keeps rows as they are) compacts them like the other tables.

    `compact_only`: compaction alone, which a busy collector runs between two whole runs
    (its `compact_after_commits`), so that queries never open more small files than that.

    `early` (with `compact_only`): the first stage of a two-stage compaction, which a collector
    runs after a few small commits (its `compact_after_small_commits`): on a lake whose spans
    are sorted, the small files commits left (under `EARLY_INPUT_BELOW_BYTES`) are rewritten
    sorted, in row groups of `EARLY_ROW_GROUP_SPANS`, into files under `EARLY_FILE_BYTES`
    (`early_files_sorted`, `early_steps`): below `merge_below_bytes`, so that the regular,
    second stage still merges them into files of `merged_file_bytes`. Between two regular
    compactions a point query then opens a file per a dozen commits instead of one per
    commit, and skips all but a row group or two of each. On a lake whose spans are not
    sorted (a shared lake), nothing: DuckLake's merge of so few files would leave files past
    `merge_below_bytes` that no later compaction merges.

    Compaction merges only files smaller than `merge_below_bytes`: without that bound, the
    file the last run made was merged again with the new ones every time, so each run
    rewrote everything written so far and held the writer longer and longer (the soak: 2 s
    after 2 minutes, 10 s after 9). And it writes one file of about `merged_file_bytes` per
    step: merging a run's worth of small files in one step held the writer for seconds (the
    soak: 1.5 to 4 s each minute at 2,000 spans/s, 470 files into one), a step per merged
    file holds it a fraction of that each time, and lets it commit in between.

    Safe while others write: each step is its own DuckLake transaction and is retried on
    conflict. Each step conflicts with commits made while it runs, though, and a writer that
    commits every few milliseconds made them fail again and again (compaction included: run
    beside such a writer, files and snapshots still grew): `exclusive`, when given, is entered
    around each step to hold such a writer off (the collector passes its writer's `paused`),
    so that the step completes and the writer resumes between steps. A step still
    failing after `step_deadline_s` (another process holds the catalog) raises: the caller
    tries again later rather than hold its writer any longer.

    Snapshots a running evaluation pinned (and newer ones) are not expired, however old: the
    run reads its window at that snapshot, in every worker, for as long as it runs; and no
    file is deleted while it runs (`deletion_deferred`: its queries may be reading files
    compaction just replaced).

    `retention_days`: spans, log records and what was made of them older than that are
    deleted, and older scores' explanations cleared; `score_retention_days`: scores and runs
    older than that are deleted (`lifecycle.apply_retention`). Their files are rewritten at
    once, and leave the disk with the snapshots expired after `expire_older_than_s` and the
    files deleted after `delete_older_than_s`. An erase whose files could not be deleted yet
    (an evaluation was running) is finished here (`lifecycle.finish_erasures`).

    `snapshot_interval_s` (an embedded lake's): after compaction, of the snapshots older than
    that, only the newest of each such interval is kept, and of those older than
    `snapshots.THIN_COARSER_AFTER` intervals, one per that many (`snapshots_thinned`); time
    travel within `expire_older_than_s` then finds the lake as it was at most an interval (or
    ten) earlier. A commit's small file leaves the catalog once no snapshot kept sees it,
    instead of with the last snapshot that did, after `expire_older_than_s`: DuckLake reads
    every such file's statistics from an embedded catalog at each query. A shared lake's
    snapshots are not thinned: its collectors read each other's commits from them.

    Returns what each step did: `spans_resolved` (spans given the conversation of their
    trace, `schema.RESOLVE_CONVERSATIONS`), `records_resolved` (log records given their
    span's, `schema.RESOLVE_RECORDS`), `rows_flushed` (inlined rows written to files),
    `files_merged` and `files_created` (compaction), `snapshots_thinned`, `snapshots_expired`,
    `files_deleted`
    (of expired snapshots) and `orphans_deleted` (files of transactions that never committed,
    once older than `orphans_kept_s`: younger ones may be a commit in flight's);
    what storing trajectories did (`conversations_stored`, ..., `store_failed`);
    and how long each kind of step took in all, in milliseconds (`merge_files_ms`, ...), with
    `merge_steps` and `longest_step_ms`: the longest the writer was held off at once; and
    `look_for_unresolved_ms`, what looking for spans and records to resolve took, without
    holding the writer.
    """
    done: dict[str, int] = {"longest_step_ms": 0}

    def step(sql: str | Callable[[], list[tuple[Any, ...]]], what: str) -> list[tuple[Any, ...]]:
        started = time.monotonic()
        run = sql if callable(sql) else lambda: con.execute(sql).fetchall()
        with exclusive() if exclusive is not None else contextlib.nullcontext():
            rows: list[tuple[Any, ...]] = retrying(
                run, con=con, deadline_s=step_deadline_s, what=what
            )
        # How long the step held the writer off: the pause it adds to ingest.
        took = round((time.monotonic() - started) * 1000)
        key = what.replace(" ", "_") + "_ms"
        done[key] = done.get(key, 0) + took
        done["longest_step_ms"] = max(done["longest_step_ms"], took)
        return rows

    def total(rows: list[tuple[Any, ...]], column: int) -> int:
        return sum(int(r[column] or 0) for r in rows)

    embedded = lake_settings(con)[0] == "sqlite"

    def thin() -> None:
        if not snapshot_interval_s or not embedded:
            return
        interval_s = snapshot_interval_s

        def expire_thinned() -> list[tuple[Any, ...]]:
            # Chosen under the step's turn: a commit or an evaluation's pin made meanwhile
            # counts, and a retried step chooses again.
            thinned = thinned_snapshots(con, interval_s)
            if thinned:
                con.execute(
                    f"CALL ducklake_expire_snapshots('{ALIAS}', versions => {thinned})"
                ).fetchall()
            return [(len(thinned),)]

        if not thinned_snapshots(con, interval_s):  # nothing to thin: no pause of the writer
            return
        [(thinned,)] = step(expire_thinned, "thin snapshots")
        done["snapshots_thinned"] = done.get("snapshots_thinned", 0) + thinned

    # Spans whose conversation no collector knew when it stored them (a trace split between
    # collectors, a root exported long after its children): looked for without holding the
    # writer, resolved with it held.
    spans = f"{ALIAS}.spans"  # a cursor does not inherit the connection's USE
    looking = time.monotonic()
    unresolved = (
        None
        if compact_only
        else con.execute(schema.UNRESOLVED_SPANS.format(spans=spans)).fetchone()
    )
    done["look_for_unresolved_ms"] = round((time.monotonic() - looking) * 1000)
    done["spans_resolved"] = 0
    if unresolved and unresolved[0]:
        resolve = schema.RESOLVE_ALL_CONVERSATIONS.format(spans=spans)
        done["spans_resolved"] = total(step(resolve, "resolve conversations"), 0)
    # Then log records stored before their span, or before their trace's conversation was
    # known, by a collector that did not see both: only in a lake whose views read records.
    done["records_resolved"] = 0
    if not compact_only and has_views(view_marks(con), schema.VIEWS):
        tables = {"logs": f"{ALIAS}.logs", "spans": spans}
        looking = time.monotonic()
        unresolved = con.execute(schema.UNRESOLVED_RECORDS.format(**tables)).fetchone()
        done["look_for_unresolved_ms"] += round((time.monotonic() - looking) * 1000)
        if unresolved and unresolved[0]:
            resolve = schema.RESOLVE_RECORDS.format(**tables)
            done["records_resolved"] = total(step(resolve, "resolve records"), 0)
    if not compact_only:
        done |= apply_retention(
            con,
            step,
            retention_days=retention_days,
            score_retention_days=score_retention_days,
        )
    # Before compaction, which then merges the files this writes. Not under `exclusive`: it
    # writes only `trajectory_steps`, so it does not conflict with the writer's commits. Its
    # failure costs readers time, never correctness, so compaction goes on without it.
    if store_settled_after_s is not None and not compact_only:
        from spanscore.lake.stored import store_trajectories

        try:
            done |= store_trajectories(
                con,
                settled_after_s=store_settled_after_s,
                step_deadline_s=step_deadline_s,
                deadline_s=store_deadline_s,
            )
        except duckdb.Error as exc:
            if is_interrupt(exc):
                raise
            done["store_failed"] = 1
            log.warning("storing trajectories failed (maintenance goes on): %s", exc)
    # flush: (schema, table, rows_flushed); merge: (schema, table, files_processed,
    # files_created); expire: one row per snapshot; cleanup and orphans: one row per file.
    flushed = step(f"CALL ducklake_flush_inlined_data('{ALIAS}')", "flush inlined data")
    done["rows_flushed"] = total(flushed, 2)
    sorting = sort_spans if sort_spans is not None else embedded

    def set_options() -> list[tuple[Any, ...]]:
        # what one compaction step writes
        _set_option(con, "target_file_size", merged_file_bytes, unit="B")
        if sorting:
            for table in SORTED_TABLES:
                _set_option(con, "parquet_row_group_size", SORTED_ROW_GROUP_SPANS, table=table)
        return []

    # A step like the others: setting an option is a commit, which a writer committing every
    # few milliseconds keeps from the SQLite catalog ("database is locked").
    step(set_options, "set options")
    if early and compact_only:
        done["early_files_sorted"] = done["early_steps"] = 0
        for table in SORTED_TABLES if sorting else ():
            while True:  # one step per early file, until fewer than two small files are left
                [(files,)] = step(
                    partial(
                        _sort_small_files,
                        con,
                        table,
                        EARLY_INPUT_BELOW_BYTES,
                        EARLY_FILE_BYTES,
                        row_group_rows=EARLY_ROW_GROUP_SPANS,
                    ),
                    f"early sort {table}",
                )
                done["early_steps"] += 1
                done["early_files_sorted"] += files
                if not files:
                    break
        thin()
        return done
    done["span_files_sorted"] = done["log_files_sorted"] = done["sort_steps"] = 0
    for table in SORTED_TABLES if sorting else ():
        while True:  # one step per merged file, until fewer than two small files are left
            [(files,)] = step(
                partial(_sort_small_files, con, table, merge_below_bytes, merged_file_bytes),
                f"sort {table}",
            )
            done["sort_steps"] += 1
            done[{"spans": "span_files_sorted", "logs": "log_files_sorted"}[table]] += files
            if not files:
                break
    done["files_merged"] = done["files_created"] = done["merge_steps"] = 0
    while True:  # one merged file per table and step; ends when a step finds nothing to merge
        merged = step(
            f"CALL ducklake_merge_adjacent_files('{ALIAS}', "
            f"max_file_size => {int(merge_below_bytes)}, max_compacted_files => 1)",
            "merge files",
        )
        done["merge_steps"] += 1
        done["files_merged"] += total(merged, 2)
        done["files_created"] += total(merged, 3)
        if total(merged, 2) == 0:
            break
    thin()
    if compact_only:
        return done
    expirable = expirable_snapshots(con, expire_older_than_s)
    done["snapshots_expired"] = (
        len(
            step(
                f"CALL ducklake_expire_snapshots('{ALIAS}', versions => {expirable})",
                "expire snapshots",
            )
        )
        if expirable
        else 0
    )
    # While an evaluation runs, no file is deleted: compaction points every snapshot at the
    # merged file at once, but a query that listed the old files before goes on reading them,
    # and a run's query may last longer than any retention (the soak: 72 s against a minute).
    done["deletion_deferred"] = int(evaluation_running(con))
    done["files_deleted"] = (
        0
        if done["deletion_deferred"]
        else len(
            delete_old_files(con, delete_older_than_s, lambda sql: step(sql, "delete old files"))
        )
    )
    done["orphans_deleted"] = len(
        step(
            f"CALL ducklake_delete_orphaned_files('{ALIAS}', "
            f"older_than => now() - INTERVAL {int(orphans_kept_s)} SECOND)",
            "delete orphaned files",
        )
    )
    # Erasures whose files an evaluation kept on disk, and retention passes whose old files
    # the expiry and cleanup above have deleted, are finished (after the run, if one runs).
    done["purge_deferred"] = 0
    if done["deletion_deferred"]:
        done["purge_deferred"] = int(bool(pending_erasures(con)))
    else:
        done |= finish_erasures(con, step)
        done |= finish_retention(con, step)
    return done


# Spans per row group of the files compaction sorts: one conversation then reads about this
# many spans of each wide column (bench/query.py). Log records too. A new lake's commits are
# written so from the start (`migrate.ROW_GROUP_SPANS`).
SORTED_ROW_GROUP_SPANS = ROW_GROUP_SPANS


# The first stage of compaction (`maintain(early=True)`) rewrites files under this size, the
# ones small commits leave (a commit of 1,000 spans, SMALL_COMMIT_SPANS, writes about 0.5 MiB),
# into files of at most EARLY_FILE_BYTES, in row groups of EARLY_ROW_GROUP_SPANS spans: under
# MERGE_BELOW_BYTES, so that the second stage merges them again into sorted files of
# MERGED_FILE_BYTES, and small row groups, so that a point query reads about that many
# conversation ids of each file (bench/query.py; with row groups of SORTED_ROW_GROUP_SPANS the
# id column alone took half as long again, docs/design/reading-one-conversation.md).
EARLY_INPUT_BELOW_BYTES = 1 << 20
EARLY_FILE_BYTES = 3 << 20
EARLY_ROW_GROUP_SPANS = 2_048


# The tables compaction sorts on an embedded lake, and their order: by conversation first, so
# that a filter on one prunes row groups (log records carry their span's, `RESOLVE_RECORDS`).
SORTED_TABLES = {
    "spans": "conversation_id, start_time_unix_nano, span_id",
    "logs": "conversation_id, time_unix_nano, span_id",
}


def _sort_small_files(
    con: duckdb.DuckDBPyConnection,
    table: str,
    below_bytes: int,
    up_to_bytes: int,
    *,
    row_group_rows: int | None = None,
) -> list[tuple[Any, ...]]:
    """One transaction: the oldest small files of `table` (under `below_bytes`, at least two,
    together about `up_to_bytes`) rewritten as one, their rows in `SORTED_TABLES` order.
    Returns [(files rewritten,)], 0 when fewer than two were small.

    `row_group_rows` (the early stage): the files chosen add up to at most `up_to_bytes`, and
    the new one is written in row groups of that many rows; the table's option is set for the
    rewrite and set back in the same transaction, so that no other write sees it.

    A rewrite, not DuckLake's sorted merge: that renumbered the rows it moved (row ids are
    what DuckLake's deletes name rows by), and readers missed conversations while it ran. Here
    the rows are deleted from the old files and inserted into the new one in one snapshot:
    a reader sees either, and a new row gets a new row id."""
    con.execute("BEGIN")
    # Oldest first: DuckLake names files by UUIDv7, which begins with the time it was made.
    small = con.execute(
        f"SELECT data_file, data_file_size_bytes FROM ducklake_list_files({sql_string(ALIAS)}, "
        f"{sql_string(table)}) WHERE data_file_size_bytes < ? ORDER BY data_file",
        [below_bytes],
    ).fetchall()
    chosen: list[str] = []
    size = 0
    for path, file_bytes in small:
        if row_group_rows is not None and size + int(file_bytes) > up_to_bytes:
            break
        chosen.append(str(path))
        size += int(file_bytes)
        if size >= up_to_bytes:
            break
    if len(chosen) < 2:
        con.execute("COMMIT")
        return [(0,)]
    files = ", ".join(sql_string(path) for path in chosen)
    rows = f"{ALIAS}.{table}"
    before = _option(con, "parquet_row_group_size", table) if row_group_rows else None
    if row_group_rows:
        _set_option(con, "parquet_row_group_size", row_group_rows, table=table)
    con.execute(
        f"INSERT INTO {rows} BY NAME SELECT * FROM {rows} WHERE filename IN ({files}) "
        f"ORDER BY {SORTED_TABLES[table]}"
    )
    if row_group_rows:
        _set_option(
            con, "parquet_row_group_size", int(before or SORTED_ROW_GROUP_SPANS), table=table
        )
    con.execute(f"DELETE FROM {rows} WHERE filename IN ({files})")
    con.execute("COMMIT")
    return [(len(chosen),)]


def _set_option(
    con: duckdb.DuckDBPyConnection, option: str, value: int, *, table: str = "", unit: str = ""
) -> None:
    """A DuckLake option of the lake, or of one `table`, given in `unit` and read back as a
    plain number (set only when it differs: options are kept in the catalog, and setting one
    is a commit)."""
    current = _option(con, option, table)
    if current is None or current != str(value):
        on_table = f", table_name => {sql_string(table)}" if table else ""
        con.execute(
            f"CALL {ALIAS}.set_option({sql_string(option)}, '{int(value)}{unit}'{on_table})"
        )


def _option(con: duckdb.DuckDBPyConnection, option: str, table: str = "") -> str | None:
    """A DuckLake option's value, of the lake or of one `table` (None: not set there)."""
    scope = f"scope_entry = 'main.{table}'" if table else "scope = 'GLOBAL'"
    row = con.execute(
        f"SELECT value FROM ducklake_options({sql_string(ALIAS)}) "
        f"WHERE option_name = ? AND {scope}",
        [option],
    ).fetchone()
    return None if row is None else str(row[0])
