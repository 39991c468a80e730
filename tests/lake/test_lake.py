"""The lake: locations, extensions, schema versions, concurrent writers, PostgreSQL catalog."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from spanscore import lake
from spanscore.evaluation import load_trajectories
from spanscore.evaluation.trajectory.rows import stored_current
from spanscore.lake import LakeError, LakeLocation, LakeVersionError, connect, schema

from ..support.postgres import postgres_available


def test_embedded_lake_layout_and_tables(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert {"spans", "logs", "eval_runs", "scores", "tool_calls", "conversations"} <= tables
    assert (lake_dir / "catalog.sqlite").exists()
    assert lake.schema_version(con) == schema.SCHEMA_VERSION
    con.close()
    # WAL: readers and the writer do not block each other across processes.
    import sqlite3

    mode = sqlite3.connect(lake_dir / "catalog.sqlite").execute("PRAGMA journal_mode").fetchone()
    assert mode == ("wal",)


def test_readers_pinned_to_a_snapshot_keep_no_file_bytes_and_interactive_readers_do(
    lake_dir: Path,
) -> None:
    # An evaluation's readers (pinned to a snapshot) read each file of their window once:
    # DuckDB's cache of file bytes only grew with the window. `spanscore sql` reads the same
    # files again and again, and keeps them.
    con = connect(lake_dir, create=True)
    con.execute(
        "INSERT INTO spans (trace_id, span_id, name, attributes) "
        "SELECT md5(i::VARCHAR), left(md5(i::VARCHAR), 16), 'chat', to_json(repeat('x', 200)) "
        "FROM range(20000) t(i)"
    )
    snapshot = lake.current_snapshot(con)
    con.close()

    def cached_bytes(reader: duckdb.DuckDBPyConnection) -> int:
        reader.execute("SELECT sum(length(attributes)) FROM spans").fetchall()
        [(cached,)] = reader.execute(
            "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
            "WHERE tag = 'EXTERNAL_FILE_CACHE'"
        ).fetchall()
        reader.close()
        return int(cached)

    assert cached_bytes(connect(lake_dir, snapshot=snapshot)) == 0
    assert cached_bytes(connect(lake_dir, read_only=True)) > 0


def test_extensions_load_signed_from_the_pinned_wheels(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    assert con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone() == (False,)
    rows = con.execute(
        "SELECT extension_name, install_path FROM duckdb_extensions() WHERE loaded"
    ).fetchall()
    paths = dict(rows)
    for name in ("ducklake", "sqlite_scanner"):
        assert name in paths


@pytest.mark.parametrize(
    ("spec", "catalog", "data_path", "schema_name"),
    [
        ("postgresql://u:pw@h:5432/db", "postgres:postgresql://u:pw@h:5432/db", None, None),
        (
            "postgresql://u@h/db?data_path=s3://b/x/&lake_schema=team&sslmode=require",
            "postgres:postgresql://u@h/db?sslmode=require",
            "s3://b/x/",
            "team",
        ),
        ("postgres:dbname=db host=h", "postgres:dbname=db host=h", None, None),
    ],
    ids=["uri", "uri-with-our-params", "libpq-keywords"],
)
def test_postgres_locations(
    spec: str,
    catalog: str,
    data_path: str | None,
    schema_name: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPANSCORE_DATA_PATH", raising=False)
    loc = LakeLocation.parse(spec)
    assert (loc.catalog, loc.data_path, loc.metadata_schema) == (catalog, data_path, schema_name)
    assert "pw" not in loc.describe()


def test_missing_lake_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match=r"no lake at .*spanscore serve"):
        connect(tmp_path / "nowhere")
    with pytest.raises(LakeError, match="no lake given"):
        LakeLocation.parse("")


def test_newer_lake_fails_with_a_clear_message(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    con.execute("INSERT INTO spanscore_schema VALUES (99, now(), 'future')")
    con.close()
    with pytest.raises(LakeVersionError, match=r"schema version 99.*newer spanscore"):
        connect(lake_dir)


def test_older_lake_is_migrated_and_keeps_its_data(
    lake_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = connect(lake_dir, create=True)
    con.execute(
        "INSERT INTO scores (run_id, conversation_id, metric, value) VALUES ('r1', 'c1', 'm', 1)"
    )
    con.close()
    # A future version that adds a column: opening today's lake migrates it.
    future = schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(schema, "SCHEMA_VERSION", future)
    monkeypatch.setitem(
        schema.MIGRATIONS, future, ["ALTER TABLE scores ADD COLUMN IF NOT EXISTS weight DOUBLE"]
    )
    with pytest.raises(LakeError, match=rf"schema version {future - 1}.*needs {future}"):
        connect(lake_dir, read_only=True)
    con = connect(lake_dir)
    assert lake.schema_version(con) == future
    assert con.execute("SELECT run_id, value, weight FROM scores").fetchall() == [("r1", 1.0, None)]
    con.close()


def test_a_version_7_lake_stores_its_conversations_resolved(lake_dir: Path) -> None:
    # Before version 8 the views resolved a child span's conversation from its trace at every
    # query; version 8 stores it: migrating resolves the spans already there, once.
    con = connect(lake_dir, create=True)
    con.execute("DELETE FROM spanscore_schema")
    con.execute("INSERT INTO spanscore_schema VALUES (7, now(), '0.7.0')")
    for span_id, conversation in (("c", "t1"), ("r", "sess-1"), ("x", "t2")):
        trace = "t2" if span_id == "x" else "t1"
        con.execute(
            "INSERT INTO spans (trace_id, span_id, name, conversation_id) VALUES (?, ?, 'n', ?)",
            [trace, span_id, conversation],
        )
    con.close()
    con = connect(lake_dir)
    assert lake.schema_version(con) == schema.SCHEMA_VERSION
    assert con.execute(
        "SELECT span_id, conversation_id FROM spans ORDER BY span_id"
    ).fetchall() == [
        ("c", "sess-1"),
        ("r", "sess-1"),
        ("x", "t2"),
    ]
    con.close()


def test_a_version_10_lake_stores_its_log_records_with_their_spans_conversation(
    lake_dir: Path,
) -> None:
    # Before version 11 a record kept the id it carried (if any), and the views joined it to
    # its span on the trace and span ids alone; now on the conversation too, so migrating
    # gives the records already there their span's, once.
    con = connect(lake_dir, create=True)
    con.execute("DELETE FROM spanscore_schema")
    con.execute("INSERT INTO spanscore_schema VALUES (10, now(), '0.10.0')")
    con.execute("INSERT INTO spans (trace_id, span_id, name, conversation_id) VALUES "
                "('t1', 'a', 'chat', 'sess-1')")  # fmt: skip
    for i, (trace_id, span_id, conversation) in enumerate(
        [("t1", "a", None), ("t1", "a", "its-own"), (None, None, "about-no-span")]
    ):
        con.execute(
            "INSERT INTO logs (time_unix_nano, trace_id, span_id, conversation_id) "
            "VALUES (?, ?, ?, ?)",
            [i, trace_id, span_id, conversation],
        )
    con.close()
    con = connect(lake_dir)
    assert lake.schema_version(con) == schema.SCHEMA_VERSION
    assert con.execute("SELECT conversation_id FROM logs ORDER BY time_unix_nano").fetchall() == [
        ("sess-1",),
        ("sess-1",),
        ("about-no-span",),
    ]
    con.close()


def _inlining(con: duckdb.DuckDBPyConnection) -> str | None:
    rows = con.execute(
        "SELECT value FROM ducklake_options('lake') WHERE option_name = 'data_inlining_row_limit'"
    ).fetchall()
    return rows[0][0] if rows else None


def test_small_commits_are_written_to_files_not_inlined(
    lake_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inlined rows can be missed by a query that runs while maintenance flushes them (see
    # test_readers_see_every_conversation_while_maintenance_runs): a lake, new or migrated
    # from version 9, inlines nothing.
    con = connect(lake_dir, create=True)
    assert _inlining(con) == "0"
    con.execute("INSERT INTO spans (trace_id, span_id, name) VALUES ('t', 's', 'one span')")
    assert con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'spans')").fetchall() == [
        (1,)
    ]
    con.close()
    with monkeypatch.context() as version_9:
        version_9.setattr(schema, "SCHEMA_VERSION", 9)
        con = connect(lake_dir.with_name("v9"), create=True)
        assert _inlining(con) is None  # DuckLake's default: up to 10 rows inlined
        con.close()
    con = connect(lake_dir.with_name("v9"))
    assert lake.schema_version(con) == schema.SCHEMA_VERSION
    assert _inlining(con) == "0"
    con.close()


def test_compaction_sorts_an_embedded_lakes_spans_and_records_and_keeps_every_one(
    lake_dir: Path,
) -> None:
    # One conversation's spans then lie in a row group or two, not strewn over every row group
    # of every file (docs/conversations.md, "Reading one conversation fast"). The spans are
    # rewritten, not moved by DuckLake's sorted merge, which renumbered row ids (498 of 500
    # rows of this lake) and made readers miss conversations while it ran
    # (test_readers_see_every_conversation_while_maintenance_runs).
    con = connect(lake_dir, create=True)
    for commit in range(5):
        con.execute(
            """INSERT INTO spans (trace_id, span_id, name, conversation_id, start_time_unix_nano,
                                  ingest_time)
            SELECT 't', ($first + range)::VARCHAR, 'n', md5(($first + range)::VARCHAR),
                   $first + range, now()
            FROM range(100)""",
            {"first": commit * 100},
        )
        # and a log record about each span (stored with its span's conversation)
        con.execute(
            """INSERT INTO logs (trace_id, span_id, conversation_id, time_unix_nano, ingest_time)
            SELECT 't', ($first + range)::VARCHAR, md5(($first + range)::VARCHAR),
                   $first + range, now()
            FROM range(100)""",
            {"first": commit * 100},
        )
    columns = "trace_id, span_id, name, conversation_id, start_time_unix_nano, ingest_time"
    before = con.execute(f"SELECT {columns} FROM spans ORDER BY span_id").fetchall()
    records = "SELECT trace_id, span_id, conversation_id, time_unix_nano FROM logs ORDER BY 2"
    records_before = con.execute(records).fetchall()
    done = lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)
    assert (done["span_files_sorted"], done["log_files_sorted"], done["files_merged"]) == (
        5,
        5,
        0,
    ), done
    assert con.execute(f"SELECT {columns} FROM spans ORDER BY span_id").fetchall() == before
    assert con.execute(records).fetchall() == records_before
    for table in ("spans", "logs"):
        [(path,)] = con.execute(
            f"SELECT data_file FROM ducklake_list_files('lake', '{table}')"
        ).fetchall()
        in_file = [r[0] for r in con.execute(f"SELECT conversation_id FROM '{path}'").fetchall()]
        assert in_file == sorted(in_file), table
    options = con.execute(
        "SELECT scope_entry, value FROM ducklake_options('lake') "
        "WHERE option_name = 'parquet_row_group_size' ORDER BY 1"
    ).fetchall()
    size = str(lake.maintenance.SORTED_ROW_GROUP_SPANS)
    assert options == [("main.logs", size), ("main.spans", size)]
    # A shared lake's other collectors cannot be held off: DuckLake's merge compacts there.
    for commit in range(2):
        con.execute(
            "INSERT INTO spans (trace_id, span_id, name, conversation_id) VALUES ('t', ?, 'n', ?)",
            [f"late-{commit}", f"c-{commit}"],
        )
    merged = lake.maintain(con, sort_spans=False)
    # the two new files and the sorted one, still under the size compaction leaves alone
    assert (merged["span_files_sorted"], merged["files_merged"]) == (0, 3), merged
    assert con.execute("SELECT count(*) FROM spans").fetchone() == (502,)
    con.close()


def test_a_new_lakes_commits_are_written_in_small_row_groups_before_any_maintenance(
    lake_dir: Path,
) -> None:
    # Issue 43: a lake of large commits before its first maintenance was written in DuckDB's
    # row groups of 122,880 rows, and one conversation read that many of each wide column
    # for each of its spans; the first maintenance set smaller ones only for later writes.
    con = connect(lake_dir, create=True)
    con.execute(
        """INSERT INTO spans (trace_id, span_id, name, conversation_id)
        SELECT 't', range::VARCHAR, 'n', md5(range::VARCHAR) FROM range(40000)"""
    )
    [(path,)] = con.execute("SELECT data_file FROM ducklake_list_files('lake', 'spans')").fetchall()
    row_groups = [
        int(r[0])
        for r in con.execute(
            "SELECT row_group_num_rows FROM parquet_metadata(?) "
            "WHERE path_in_schema = 'conversation_id'",
            [path],
        ).fetchall()
    ]
    assert max(row_groups) == lake.maintenance.SORTED_ROW_GROUP_SPANS, row_groups
    assert sum(row_groups) == 40000
    con.close()


def test_compactions_first_stage_leaves_sorted_files_its_second_stage_merges_again(
    lake_dir: Path,
) -> None:
    # Issue 43: between two compactions, a point query opened every small commit's file.
    # The first stage (the collector runs it every `compact_after_small_commits` small
    # commits) rewrites them sorted, in small row groups, into files under the size the
    # regular compaction merges: compacting sooner once left files later compactions never
    # merged again, which is why it was off.
    con = connect(lake_dir, create=True)
    commits, per_commit = 6, 3000
    for commit in range(commits):
        con.execute(
            """INSERT INTO spans (trace_id, span_id, name, conversation_id, start_time_unix_nano,
                                  ingest_time)
            SELECT 't', ($first + range)::VARCHAR, 'n', md5(($first + range)::VARCHAR),
                   $first + range, now()
            FROM range($n)""",
            {"first": commit * per_commit, "n": per_commit},
        )
    columns = "trace_id, span_id, name, conversation_id, start_time_unix_nano, ingest_time"
    before = con.execute(f"SELECT {columns} FROM spans ORDER BY span_id").fetchall()

    def span_files() -> list[tuple[str, int]]:
        return [
            (str(path), int(size))
            for path, size in con.execute(
                "SELECT data_file, data_file_size_bytes FROM ducklake_list_files('lake', 'spans')"
            ).fetchall()
        ]

    done = lake.maintain(con, compact_only=True, early=True)
    assert done["early_files_sorted"] == commits, done
    assert "span_files_sorted" not in done or done["span_files_sorted"] == 0, done
    [(path, size)] = span_files()
    assert size < lake.maintenance.MERGE_BELOW_BYTES  # so that the second stage takes it
    in_file = [r[0] for r in con.execute(f"SELECT conversation_id FROM '{path}'").fetchall()]
    assert in_file == sorted(in_file)
    row_groups = [
        int(r[0])
        for r in con.execute(
            "SELECT row_group_num_rows FROM parquet_metadata(?) "
            "WHERE path_in_schema = 'conversation_id'",
            [path],
        ).fetchall()
    ]
    early = lake.maintenance.EARLY_ROW_GROUP_SPANS
    assert len(row_groups) > 1, row_groups
    assert max(row_groups) == early, row_groups
    # The small row groups were for that file only: the option every other write reads is
    # the one it was.
    [(option,)] = con.execute(
        "SELECT value FROM ducklake_options('lake') "
        "WHERE option_name = 'parquet_row_group_size' AND scope_entry = 'main.spans'"
    ).fetchall()
    assert option == str(lake.maintenance.SORTED_ROW_GROUP_SPANS)
    assert con.execute(f"SELECT {columns} FROM spans ORDER BY span_id").fetchall() == before
    # The second stage merges the first stage's file with the commits since.
    con.execute(
        "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
        "VALUES ('t', 'late', 'n', 'c')"
    )
    done = lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)
    assert done["span_files_sorted"] == 2, done
    assert len(span_files()) == 1
    assert con.execute("SELECT count(*) FROM spans").fetchone() == (commits * per_commit + 1,)
    con.close()


def test_repaired_views_read_log_records_when_the_lake_has_some_about_spans(
    lake_dir: Path,
) -> None:
    """Views made again (missing, replaced, another version's) read log records exactly when
    some log record says something about a span (the collector's writer keeps that so from
    then on: tests/lake/test_conversation_rules.py)."""
    from spanscore.lake.migrate import has_views, view_marks

    def views_after_repair() -> dict[str, str]:
        con = connect(lake_dir, create=True)
        con.execute("COMMENT ON VIEW tool_calls IS 'made by another version'")
        con.close()
        con = connect(lake_dir)
        try:
            marks = view_marks(con)
        finally:
            con.close()
        for views in (schema.VIEWS, schema.VIEWS_WITHOUT_LOG_RECORDS):
            if has_views(marks, views):
                return views
        raise AssertionError(f"views of neither kind: {marks}")

    assert views_after_repair() is schema.VIEWS_WITHOUT_LOG_RECORDS
    con = connect(lake_dir)
    con.execute("INSERT INTO logs (trace_id, span_id, body) VALUES ('t', 's', '\"plain\"')")
    con.close()
    assert views_after_repair() is schema.VIEWS_WITHOUT_LOG_RECORDS
    con = connect(lake_dir)
    con.execute("INSERT INTO logs (trace_id, span_id, user_message) VALUES ('t', 's', 'hi')")
    con.close()
    assert views_after_repair() is schema.VIEWS


def test_a_version_1_lake_gains_the_message_columns(lake_dir: Path) -> None:
    # Rebuild what spanscore 0.1's first schema looked like: spans without the columns of v2.
    con = connect(lake_dir, create=True)
    for column in ("tool_calls_requested", "tool_results", "response_text"):
        con.execute(f"ALTER TABLE spans DROP COLUMN {column}")
    con.execute("DELETE FROM spanscore_schema")
    con.execute("INSERT INTO spanscore_schema VALUES (1, now(), '0.1.0')")
    con.execute("INSERT INTO spans (trace_id, span_id, name) VALUES ('t', 's', 'old span')")
    con.close()
    con = connect(lake_dir)
    assert lake.schema_version(con) == schema.SCHEMA_VERSION
    assert con.execute(
        "SELECT name, tool_calls_requested, tool_results, response_text FROM spans"
    ).fetchall() == [("old span", None, None, None)]


def test_not_a_spanscore_lake(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    con.execute("DROP TABLE spanscore_schema")
    con.execute("CREATE TABLE strangers (a INT)")
    con.close()
    with pytest.raises(LakeVersionError, match="not a spanscore lake"):
        connect(lake_dir)


def test_query_yields_dicts_with_bound_parameters(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    rows = list(lake.query(con, "SELECT ? AS a, ?::INT AS b", ["x'; DROP TABLE spans; --", 2]))
    assert rows == [{"a": "x'; DROP TABLE spans; --", "b": 2}]
    assert list(lake.query(con, "CREATE TEMP TABLE t (a INT)")) == []


def _writer(args: tuple[str, str, int]) -> int:
    lake_path, table, n = args
    con = connect(lake_path)
    for i in range(n):
        lake.retrying(
            lambda i=i: con.execute(f"INSERT INTO {table} (run_id) VALUES (?)", [f"{table}-{i}"]),
            con=con,
        )
    con.close()
    return n


def test_concurrent_writer_processes_retry_instead_of_failing(lake_dir: Path) -> None:
    connect(lake_dir, create=True).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        done = pool.map(
            _writer,
            [
                (str(lake_dir), "scores", 40),
                (str(lake_dir), "eval_runs", 40),
                (str(lake_dir), "scores", 40),
            ],
        )
    assert done == [40, 40, 40]
    con = connect(lake_dir)
    assert con.execute("SELECT count(*) FROM scores").fetchone() == (80,)
    assert con.execute("SELECT count(*) FROM eval_runs").fetchone() == (40,)


def _busy_writer(args: tuple[str, str]) -> str:
    """Single-row commits back to back, until the slow writer is done (or 600 commits)."""
    lake_path, done_flag = args
    con = connect(lake_path)
    for i in range(600):
        if Path(done_flag).exists():
            con.close()
            return f"stopped after {i} commits: the slow writer was done"
        lake.retrying(
            lambda i=i: con.execute("INSERT INTO scores (run_id) VALUES (?)", [f"busy-{i}"]),
            con=con,
        )
    con.close()
    return "ran out of commits: the slow writer never got its turn"


def _slow_writer(args: tuple[str, str]) -> int:
    """Five transactions that each take a while between BEGIN and COMMIT, as the collector's
    group commit does (it writes its Parquet file first)."""
    lake_path, done_flag = args
    con = connect(lake_path)
    while not con.execute("SELECT count(*) FROM scores WHERE run_id LIKE 'busy-%'").fetchone()[0]:
        time.sleep(0.05)  # the busy writer is under way

    def transaction(i: int) -> None:
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO eval_runs (run_id) VALUES (?)", [f"slow-{i}"])
        time.sleep(0.2)
        con.execute("COMMIT")

    for i in range(5):
        lake.retrying(lambda i=i: transaction(i), con=con, deadline_s=120)
    Path(done_flag).touch()
    con.close()
    return 5


def test_a_long_transaction_gets_its_turn_beside_a_busy_writer(
    lake_dir: Path, tmp_path: Path
) -> None:
    # SQLite refuses a commit whose snapshot another commit outdated, at once: without turns,
    # a writer committing back to back starved a transaction that stays open a while (the
    # collector's group commit) for as long as it went on.
    connect(lake_dir, create=True).close()
    flag = str(tmp_path / "slow-done")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        busy = pool.apply_async(_busy_writer, [(str(lake_dir), flag)])
        slow = pool.apply_async(_slow_writer, [(str(lake_dir), flag)])
        assert slow.get(timeout=300) == 5
        assert busy.get(timeout=300).endswith("the slow writer was done")
    con = connect(lake_dir)
    assert con.execute("SELECT count(*) FROM eval_runs").fetchone() == (5,)


def test_a_writer_holding_the_turn_too_long_is_named(lake_dir: Path) -> None:
    connect(lake_dir, create=True).close()
    with lake.commit_turn(lake_dir, deadline_s=1):  # another process's long transaction
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            message = pool.apply(_write_with_a_short_deadline, [str(lake_dir)])
    assert message.startswith("another process has been writing to the lake")
    assert str(lake_dir) in message


def _write_with_a_short_deadline(lake_path: str) -> str:
    con = connect(lake_path)
    try:
        lake.retrying(
            lambda: con.execute("INSERT INTO scores (run_id) VALUES ('x')"), con=con, deadline_s=1
        )
    except LakeError as exc:
        return str(exc)
    finally:
        con.close()
    return "written"


def test_maintenance_compacts_small_files(lake_dir: Path) -> None:
    con = connect(lake_dir, create=True)
    for i in range(30):
        con.execute(
            "INSERT INTO scores (run_id, metric) SELECT 'r', 'm' || range FROM range(?)", [20 + i]
        )

    def files() -> int:
        row = con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'scores')").fetchone()
        return int(row[0]) if row else 0

    before = files()
    done = lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)
    after = files()
    assert after < before
    assert done["files_merged"] >= 2
    assert done["files_created"] >= 1
    assert con.execute("SELECT count(*) FROM scores").fetchone() == (
        sum(20 + i for i in range(30)),
    )


def test_commits_since_lists_the_others_commits_and_notices_expired_ones(lake_dir: Path) -> None:
    """What a shared-lake writer learns at each commit: the snapshots others committed since it
    last looked, never its own; None once some of them were expired before it looked."""
    con = connect(lake_dir, create=True)
    start = lake.current_snapshot(con)
    for author in ("me", "me", "other", "me", "other"):
        con.execute("BEGIN")
        con.execute(f"CALL lake.set_commit_message('{author}', 'spans')")
        con.execute("INSERT INTO scores (run_id, metric) VALUES ('r', 'm')")
        con.execute("COMMIT")
    assert lake.commits_since(con, start, not_by="me") == [start + 3, start + 5]
    assert lake.commits_since(con, start, not_by="other") == [start + 1, start + 2, start + 4]
    assert lake.commits_since(con, start + 3, not_by="me") == [start + 5]
    assert lake.commits_since(con, lake.current_snapshot(con), not_by="me") == []

    lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)
    current = lake.current_snapshot(con)
    assert lake.commits_since(con, start, not_by="me") is None  # start + 1 .. were expired
    assert lake.commits_since(con, current - 1, not_by="me") == [current]  # not by "me"
    assert lake.commits_since(con, current, not_by="me") == []


def _age_snapshots(con: duckdb.DuckDBPyConnection, taken: dict[int, float]) -> None:
    """Give snapshots the times they would have had (seconds since the epoch): thinning goes
    by their age, and a test cannot wait for it."""
    for snapshot, at in taken.items():
        con.execute(
            "UPDATE __ducklake_metadata_lake.ducklake_snapshot SET snapshot_time = "
            "make_timestamptz(?::BIGINT * 1000000) WHERE snapshot_id = ?",
            [round(at), snapshot],
        )


def _commit_spans(con: duckdb.DuckDBPyConnection, first: int, n: int) -> int:
    con.execute(
        """INSERT INTO spans (trace_id, span_id, name, conversation_id, start_time_unix_nano,
                              ingest_time)
        SELECT 't', ($first + range)::VARCHAR, 'n', 'c' || (($first + range) % 7), range, now()
        FROM range($n)""",
        {"first": first, "n": n},
    )
    return lake.current_snapshot(con)


def test_thinning_keeps_the_newest_snapshot_of_each_interval_and_what_runs_pinned(
    lake_dir: Path,
) -> None:
    """Snapshots a minute old are kept one a minute, ten minutes old one per ten minutes (the
    newest of each, on the clock's intervals); younger ones, the latest and whatever a running
    evaluation pinned (and newer) are kept; time travel still reads a kept snapshot."""
    con = connect(lake_dir, create=True)
    created = lake.current_snapshot(con)
    now = time.time()
    ten = (now - 3000) // 600 * 600  # a ten-minute boundary about an hour ago
    minute = (now - 300) // 60 * 60  # a minute boundary about 5 minutes ago
    at = {
        "a": ten + 10,  # thinned: b is newer in its ten minutes
        "b": ten + 500,
        "c": ten + 700,  # the next ten minutes
        "d": minute + 5,  # thinned: e is newer in its minute
        "e": minute + 50,
        "f": minute + 65,  # the next minute
        "g": now - 10,  # younger than an interval
        "h": now - 5,  # the latest
    }
    snapshot = {name: _commit_spans(con, i * 10, 10) for i, name in enumerate(at)}
    # The lake's own first snapshots, an hour and a half ago: one kept of them all.
    _age_snapshots(con, {s: ten - 1200 + s for s in range(created + 1)})
    _age_snapshots(con, {snapshot[name]: t for name, t in at.items()})

    thinned = lake.snapshots.thinned_snapshots(con, 60.0)
    assert thinned == [*range(created), snapshot["a"], snapshot["d"]]

    # A running evaluation pinned e: e and every newer snapshot stay, whatever their age.
    con.execute(
        "INSERT INTO eval_runs (run_id, status, started_at, details) "
        "VALUES ('r', 'running', now(), ?)",
        [f'{{"snapshot": {snapshot["e"]}}}'],
    )
    pinned = lake.current_snapshot(con)
    _age_snapshots(con, {pinned: now - 2})
    assert lake.snapshots.thinned_snapshots(con, 60.0) == [
        *range(created),
        snapshot["a"],
        snapshot["d"],
    ]
    # e, then f, are no longer their minute's newest: neither is thinned while e is pinned.
    _age_snapshots(con, {snapshot["f"]: minute + 55, snapshot["g"]: minute + 58})
    pinned_now = lake.snapshots.thinned_snapshots(con, 60.0)
    assert snapshot["e"] not in pinned_now
    assert snapshot["f"] not in pinned_now
    con.execute("UPDATE eval_runs SET status = 'succeeded'")

    done = lake.maintain(con, compact_only=True, snapshot_interval_s=60.0)
    assert done["snapshots_thinned"] == created + 4, done  # a, d, and now e and f
    kept = {
        int(r[0])
        for r in con.execute("SELECT snapshot_id FROM ducklake_snapshots('lake')").fetchall()
    }
    assert {snapshot[n] for n in "bcgh"} <= kept
    assert not {snapshot[n] for n in "adef"} & kept
    # Time travel finds the lake as it was at a kept snapshot, every span committed by then.
    [(count,)] = con.execute(
        f"SELECT count(*) FROM spans AT (VERSION => {snapshot['c']})"
    ).fetchall()
    assert count == 30
    # Without an interval, nothing is thinned.
    assert "snapshots_thinned" not in lake.maintain(con, compact_only=True)


def test_thinned_snapshots_take_the_files_they_alone_saw_out_of_the_catalog(
    lake_dir: Path,
) -> None:
    """Each commit's small file stays in the catalog, which every query reads, as long as a
    snapshot sees it: after compaction's first stage merged them, the snapshots between are
    thinned and the commits' files leave the catalog; every span is still read."""
    con = connect(lake_dir, create=True)
    commits = [_commit_spans(con, i * 100, 100) for i in range(20)]
    lake.maintain(con, compact_only=True, early=True)
    ids = [
        int(r[0])
        for r in con.execute("SELECT snapshot_id FROM ducklake_snapshots('lake')").fetchall()
    ]
    # All in one ten-minute interval an hour ago, the merge last: it alone is kept.
    old = (time.time() - 3600) // 600 * 600
    _age_snapshots(con, {s: old + i for i, s in enumerate(ids)})

    def catalog_files() -> int:
        [(n,)] = con.execute(
            "SELECT count(*) FROM __ducklake_metadata_lake.ducklake_data_file d "
            "JOIN __ducklake_metadata_lake.ducklake_table t USING (table_id) "
            "WHERE t.table_name = 'spans' AND t.end_snapshot IS NULL"
        ).fetchall()
        return int(n)

    assert catalog_files() == len(commits) + 1  # the commits' files and the merged one
    before = con.execute("SELECT * FROM spans ORDER BY span_id").fetchall()
    done = lake.maintain(con, compact_only=True, early=True, snapshot_interval_s=60.0)
    assert done["snapshots_thinned"] >= len(commits), done
    assert catalog_files() == 1
    assert con.execute("SELECT * FROM spans ORDER BY span_id").fetchall() == before
    # The files the catalog let go of are deleted as files compaction replaced are: later.
    [(scheduled,)] = con.execute(
        "SELECT count(*) FROM __ducklake_metadata_lake.ducklake_files_scheduled_for_deletion"
    ).fetchall()
    assert scheduled == len(commits)


@pytest.fixture
def postgres_lake(tmp_path: Path) -> Iterator[str]:
    reason = postgres_available()
    if reason:
        pytest.skip(reason)
    schema_name = "spanscore_test_" + uuid.uuid4().hex[:10]
    yield (
        f"postgresql://postgres@127.0.0.1:5432/test?lake_schema={schema_name}"
        f"&data_path={tmp_path / 'pgdata'}/"
    )
    con = duckdb.connect()
    lake.load_extension(con, "postgres_scanner")
    con.execute("ATTACH 'postgresql://postgres@127.0.0.1:5432/test' AS pg (TYPE postgres)")
    con.execute(f"CALL postgres_execute('pg', 'DROP SCHEMA IF EXISTS {schema_name} CASCADE')")


@pytest.mark.postgres
def test_postgres_catalog_round_trip(postgres_lake: str, make_collector: object) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    collector = make_collector(lake=postgres_lake)  # type: ignore[operator]
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True)
        )
    )
    tracer = provider.get_tracer("t")
    for i in range(5):
        with tracer.start_as_current_span(
            "execute_tool t",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": f"t{i}",
                "gen_ai.conversation.id": "pg-conv",
            },
        ):
            pass
    assert provider.force_flush(10_000)
    provider.shutdown()
    # Another client (no data_path: it comes from the catalog) sees the spans.
    reader = connect(postgres_lake.split("&data_path=")[0])
    assert reader.execute("SELECT count(*), min(conversation_id) FROM tool_calls").fetchone() == (
        5,
        "pg-conv",
    )
    # Maintenance stores its trajectory there too, and a load reads it back the same.
    rules = [t.model_dump() for t in load_trajectories(reader, stored=False)]
    done = lake.maintain(reader.cursor(), store_settled_after_s=0)
    assert done["conversations_stored"] == 1
    assert stored_current(reader, ["pg-conv"]) == ["pg-conv"]
    assert [t.model_dump() for t in load_trajectories(reader)] == rules


@pytest.mark.postgres
def test_an_evaluation_run_on_a_postgres_catalog(postgres_lake: str) -> None:
    """The nightly run on a lake whose catalog is PostgreSQL: the snapshot is pinned there too,
    the workers score, the scores land in the lake."""
    from spanscore.evaluation import load_suite
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate
    from spanscore.examples.synthetic import build_lake

    build_lake(postgres_lake, 300)
    suite = load_suite(
        {
            "name": "pg",
            "metrics": [{"type": "tool_calls", "mode": "contains", "expected": ["get_order"]}],
        }
    )
    result = evaluate(postgres_lake, suite, RunOptions(settle_s=0, workers=2, batch_size=100))
    assert (result.status, result.scored, result.error_count) == ("succeeded", 300, 0)
    reader = connect(postgres_lake.split("&data_path=")[0])
    assert reader.execute(
        "SELECT count(*), count(*) FILTER (WHERE passed) FROM scores WHERE run_id = ?",
        [result.run_id],
    ).fetchone() == (300, 300)
    again = evaluate(postgres_lake, suite, RunOptions(settle_s=0, workers=1))
    assert (again.candidates, again.scored) == (0, 0)  # the window starts where the last ended


def test_ctrl_c_during_a_duckdb_query_is_recognised_as_an_interrupt() -> None:
    """SIGINT while DuckDB runs a query reaches Python as DuckDB's own error, caused by the
    KeyboardInterrupt (CI saw `evaluate` exit 1 instead of 130 that way)."""
    import threading

    import duckdb

    from spanscore.lake import is_interrupt

    def query_cut_short() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ctrl_c:
            raise RuntimeError("Query interrupted") from ctrl_c

    with pytest.raises(RuntimeError) as cut_short:
        query_cut_short()
    assert is_interrupt(cut_short.value)
    assert not is_interrupt(RuntimeError("Query interrupted"))
    assert not is_interrupt(ValueError("bad"))
    con = duckdb.connect()
    stopper = threading.Timer(0.2, con.interrupt)
    stopper.start()
    try:
        with pytest.raises(duckdb.InterruptException) as raised:
            con.execute("SELECT count(*) FROM range(10000000000) a, range(1000) b").fetchall()
        assert is_interrupt(raised.value)
    finally:
        stopper.cancel()
        con.close()
