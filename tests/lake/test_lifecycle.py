"""The data's lifecycle, proven on disk: a conversation erased (`spanscore erase`) or past
retention is gone from every file of the lake, not only from its queries.

The conversations carry a unique marker in the user's message, a tool's arguments and result,
and (through the judge, which quotes the user) a score's explanation and a judge-cache answer.
The lake writes its Parquet files uncompressed, so that a byte search of every file is
meaningful; each Parquet file is also read row by row, and the search first finds the marker
everywhere it was written, so that a search that could not see it fails.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spanscore import lake
from spanscore.collector import Collector
from spanscore.evaluation import load_suite, review
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM
from spanscore.lake import lifecycle, locks

from ..support.evaluation_runs import run, write_suite
from ..support.otlp_http import post_lookup_conversation
from ..support.polling import wait_for
from ..support.s3 import S3Server

CLI = [sys.executable, "-m", "spanscore.cli"]
NOW = dt.datetime.now(dt.UTC)
OLD = NOW - dt.timedelta(days=40)
MINUTES = dt.timedelta(minutes=4)
SUITE = {
    "name": "lifecycle",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["lookup"]},
        {"type": "judged", "name": "tone", "criteria": "Was the agent polite?"},
    ],
}


def _quoting_judge(request: LLMRequest) -> str:
    """A judge whose reasoning quotes the customer, as real judges' often do."""
    transcript = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
    said = re.findall(r"^USER: (.*)$", transcript, re.MULTILINE)
    return json.dumps({"reasoning": f"the customer wrote {said!r}", "score": 4})


def _uncompressed_lake(lake_dir: Path | str) -> None:
    """A lake whose Parquet files hold their values as written (see the module doc)."""
    con = lake.connect(str(lake_dir), create=True)
    try:
        con.execute(f"CALL {lake.ALIAS}.set_option('parquet_compression', 'uncompressed')")
    finally:
        con.close()


def _parquet_rows_with(data: bytes, marker: str) -> bool:
    con = duckdb.connect()
    try:
        path = f"/dev/shm/spanscore-{uuid.uuid4().hex}.parquet"
        Path(path).write_bytes(data)
        try:
            rows = con.execute(f"SELECT * FROM read_parquet('{path}')").fetchall()
        finally:
            os.remove(path)
    finally:
        con.close()
    return any(marker in repr(row) for row in rows)


def marker_hits(files: dict[str, bytes], marker: str) -> list[str]:
    """The files (by name) whose bytes hold the marker, or whose Parquet rows do."""
    found = []
    for name, data in files.items():
        if marker.encode() in data or (
            name.endswith(".parquet") and _parquet_rows_with(data, marker)
        ):
            found.append(name)
    return sorted(found)


def local_files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def _write_marked_lake(
    collector: Collector, lake_dir: Path | str, tmp_path: Path, *, marked_at: dt.datetime
) -> tuple[str, list[str]]:
    """Two kept conversations now, one marked at `marked_at`, scored by the quoting judge
    and stored by maintenance. Returns the marker and the kept conversations."""
    marker = f"MARK{uuid.uuid4().hex[:12]}ER"
    kept = ["kept-1", "kept-2"]
    for name in kept:
        post_lookup_conversation(collector, name, f"{name} street", NOW - dt.timedelta(minutes=5))
    post_lookup_conversation(collector, "marked", f"{marker} street", marked_at)
    with ScriptedLLM(_quoting_judge) as judge:
        result = run(
            lake_dir,  # type: ignore[arg-type]
            load_suite(write_suite(tmp_path, SUITE)),
            since=OLD - dt.timedelta(days=1),
            now=NOW,
            judge={"base_url": judge.base_url},
            judge_environ={"OPENAI_API_KEY": "test"},
        )
    assert (result.scored, result.error_count) == (3, 0), result
    con = lake.connect(str(lake_dir))
    try:
        # A reviewer's label quoting the conversation, and a review queue naming it.
        review.add_label(
            con, review.NewLabel(conversation_id="marked", comment=f"{marker} was wrong"), "ann"
        )
        review.build_queue(
            con, review.QueueSpec(name="all", filter=review.ConversationFilter()), "ann"
        )
        lake.maintain(con, store_settled_after_s=0, expire_older_than_s=0, delete_older_than_s=0)
    finally:
        con.close()
    return marker, kept


def _show(lake_dir: Path | str, conversation: str, env: dict[str, str] | None = None) -> str:
    shown = subprocess.run(
        [*CLI, "show", conversation, "--lake", str(lake_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return shown.stdout


def _counts(lake_dir: Path | str, conversations: list[str]) -> list[tuple[Any, ...]]:
    con = lake.connect(str(lake_dir))
    try:
        return con.execute(
            "SELECT conversation_id, span_count, tool_call_count FROM conversations "
            "WHERE conversation_id IN (SELECT unnest(?)) ORDER BY 1",
            [conversations],
        ).fetchall()
    finally:
        con.close()


def _erase(lake_dir: Path | str, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [*CLI, "erase", "--lake", str(lake_dir), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _assert_marked_everywhere(lake_dir: Path, marker: str) -> None:
    """The search sees the marker wherever it was written: in the raw tables, in what was made
    of them, in the scores, and in the catalog (its column statistics)."""
    before = marker_hits(local_files(lake_dir), marker)
    tables = {name.split("/")[2] for name in before if name.startswith("data/main/")}
    assert {"spans", "logs", "scores", "judge_cache", "trajectory_steps", "labels"} <= tables
    assert "catalog.sqlite" in before, before


@pytest.fixture
def marked_collector(lake_dir: Path, make_collector: Callable[..., Collector]) -> Collector:
    _uncompressed_lake(lake_dir)
    return make_collector(maintenance_interval_s=0)


@pytest.mark.slow
def test_an_erased_conversation_is_gone_from_every_file_while_the_collector_runs(
    marked_collector: Collector, lake_dir: Path, tmp_path: Path
) -> None:
    marker, kept = _write_marked_lake(
        marked_collector, lake_dir, tmp_path, marked_at=NOW - dt.timedelta(minutes=4)
    )
    _assert_marked_everywhere(lake_dir, marker)
    shown = {name: _show(lake_dir, name) for name in kept}
    counts = _counts(lake_dir, kept)

    erased = _erase(lake_dir, "marked", "--yes")
    assert erased.returncode == 0, erased.stdout + erased.stderr
    assert "conversations 1" in erased.stdout, erased.stdout

    assert marker_hits(local_files(lake_dir), marker) == []
    assert _counts(lake_dir, kept) == counts
    assert {name: _show(lake_dir, name) for name in kept} == shown
    # The collector goes on ingesting into the rewritten lake.
    post_lookup_conversation(marked_collector, "after", "later street", NOW)
    assert [r[0] for r in _counts(lake_dir, ["after"])] == ["after"]
    con = lake.connect(str(lake_dir))
    try:
        # The marked conversation's scores keep their values, not their explanations.
        scores = con.execute(
            "SELECT count(*), count(explanation), count(value) FROM scores "
            "WHERE conversation_id = 'marked'"
        ).fetchall()
        audit = con.execute(
            "SELECT reason, selection, status, conversations, spans > 0, log_records > 0, "
            "requested_by LIKE '%@%', finished_at IS NOT NULL FROM erasures"
        ).fetchall()
        # Its labels and its place in review queues go with it; the kept ones stay queued.
        reviewed = con.execute(
            "SELECT (SELECT count(*) FROM labels WHERE conversation_id = 'marked'), "
            "(SELECT count(*) FROM review_queue_items WHERE conversation_id = 'marked'), "
            "(SELECT count(*) FROM review_queue_items)"
        ).fetchone()
    finally:
        con.close()
    assert scores == [(2, 0, 2)]
    assert audit == [("erase", "ids", "purged", 1, True, True, True, True)]
    assert reviewed is not None
    assert reviewed[:2] == (0, 0)


@pytest.mark.slow
def test_rows_past_retention_are_gone_from_every_file(
    marked_collector: Collector, lake_dir: Path, tmp_path: Path
) -> None:
    marker, kept = _write_marked_lake(marked_collector, lake_dir, tmp_path, marked_at=OLD)
    _assert_marked_everywhere(lake_dir, marker)
    shown = {name: _show(lake_dir, name) for name in kept}
    counts = _counts(lake_dir, kept)
    con = lake.connect(str(lake_dir))
    try:
        oldest = lifecycle.oldest_kept(con)["oldest_span"]
        assert oldest is not None
        assert oldest < NOW - dt.timedelta(days=30)
        done = lake.maintain(con, retention_days=30, expire_older_than_s=0, delete_older_than_s=0)
        assert done["retention_rows_deleted"] > 0, done
        assert done["retention_finished"] == 1, done
        oldest = lifecycle.oldest_kept(con)["oldest_span"]
        assert oldest is not None
        assert oldest > NOW - dt.timedelta(days=1)
        # A second pass in the hour finds nothing more, and commits nothing.
        again = lake.maintain(con, retention_days=30)
        assert again["retention_rows_deleted"] == 0
        [(score_count,)] = con.execute("SELECT count(*) FROM scores").fetchall()
    finally:
        con.close()
    assert marker_hits(local_files(lake_dir), marker) == []
    assert _counts(lake_dir, kept) == counts
    assert {name: _show(lake_dir, name) for name in kept} == shown
    assert score_count == 6  # scores outlive the raw data (no score_retention_days)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("how", ["erase", "retention"])
def test_a_marked_conversation_is_gone_from_a_shared_lakes_bucket_and_catalog(
    how: str,
    shared_lake: str,
    postgres_database: str,
    s3_server: S3Server,
    make_collector: Callable[..., Collector],
    tmp_path: Path,
) -> None:
    """The same on a lake whose catalog is on PostgreSQL and whose data is in a bucket, after
    an erase and after retention; and the catalog's own rows (its column statistics) hold no
    marker either."""
    _uncompressed_lake(shared_lake)
    collector = make_collector(lake=shared_lake, maintenance_interval_s=0)
    marked_at = NOW - MINUTES if how == "erase" else OLD
    marker, kept = _write_marked_lake(collector, shared_lake, tmp_path, marked_at=marked_at)

    def bucket() -> dict[str, bytes]:
        return {key: s3_server.read(key) for key in s3_server.objects("lake/")}

    before = marker_hits(bucket(), marker)
    tables = {key.split("/")[2] for key in before}
    assert {"spans", "logs", "scores", "judge_cache", "trajectory_steps"} <= tables, before
    assert _catalog_tables_with(postgres_database, marker), "the catalog search sees nothing"
    shown = {name: _show(shared_lake, name) for name in kept}
    counts = _counts(shared_lake, kept)
    if how == "erase":
        erased = _erase(shared_lake, "marked", "--yes")
        assert erased.returncode == 0, erased.stdout + erased.stderr
    else:
        con = lake.connect(shared_lake)
        try:
            done = lake.maintain(
                con, retention_days=30, expire_older_than_s=0, delete_older_than_s=0
            )
            status = con.execute("SELECT reason, status FROM erasures").fetchall()
        finally:
            con.close()
        assert done["retention_rows_deleted"] > 0, done
        assert done["retention_finished"] == 1, done
        assert status == [("retention", "purged")]
    assert marker_hits(bucket(), marker) == []
    assert _counts(shared_lake, kept) == counts
    assert {name: _show(shared_lake, name) for name in kept} == shown
    assert _catalog_tables_with(postgres_database, marker) == []


def _catalog_tables_with(postgres_database: str, marker: str) -> list[str]:
    """The catalog's tables (on PostgreSQL) with a row whose text holds the marker."""
    import psycopg

    with psycopg.connect(postgres_database, autocommit=True) as catalog:
        tables = catalog.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_name LIKE 'ducklake%'"
        ).fetchall()
        assert tables
        return [
            name
            for schema, name in tables
            if catalog.execute(
                f'SELECT count(*) FROM "{schema}"."{name}" AS t WHERE t::text LIKE %s',
                [f"%{marker}%"],
            ).fetchone()
            != (0,)
        ]


@pytest.mark.slow
def test_an_erase_while_the_collector_ingests_loses_nothing_it_acknowledged(
    marked_collector: Collector, lake_dir: Path
) -> None:
    """Conversations keep arriving, and are acknowledged, while `spanscore erase` deletes,
    rewrites files, expires snapshots and deletes files: every one of them is stored whole,
    and the erased one is gone from every file."""
    marker = f"MARK{uuid.uuid4().hex[:12]}ER"
    post_lookup_conversation(marked_collector, "marked", f"{marker} street", NOW - MINUTES)
    post_lookup_conversation(marked_collector, "kept", "a street", NOW - MINUTES)
    kept = _counts(lake_dir, ["kept"])
    proc = subprocess.Popen(
        [*CLI, "erase", "--lake", str(lake_dir), "marked", "--yes"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    live: list[str] = []
    try:
        while proc.poll() is None or len(live) < 3:
            live.append(f"live-{len(live)}")
            post_lookup_conversation(marked_collector, live[-1], "another street", NOW)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 0, out + err
    assert marker_hits(local_files(lake_dir), marker) == []
    assert _counts(lake_dir, ["kept"]) == kept
    assert _counts(lake_dir, live) == sorted((name, 3, 1) for name in live)


def test_an_unknown_id_is_reported_and_nothing_is_touched(
    collector: Collector, lake_dir: Path
) -> None:
    post_lookup_conversation(collector, "known", "a street", NOW)
    files = local_files(lake_dir)
    erased = _erase(lake_dir, "known", "nope", "--yes")
    assert erased.returncode == 2, erased.stdout + erased.stderr
    assert "not in the lake: nope" in erased.stderr
    assert local_files(lake_dir).keys() == files.keys()
    assert [r[0] for r in _counts(lake_dir, ["known"])] == ["known"]


@pytest.mark.slow
def test_a_where_matching_everything_needs_yes_and_a_dry_run_erases_nothing(
    collector: Collector, lake_dir: Path
) -> None:
    for name in ("w-1", "w-2"):
        post_lookup_conversation(collector, name, "a street", NOW)
    dry = _erase(lake_dir, "--where", "conversation_id = 'w-1'", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout, dry.stdout
    assert "w-1" in dry.stdout, dry.stdout
    # Typed at a terminal, without --yes, an erase is a dry run.
    primary, secondary = os.openpty()
    try:
        typed = subprocess.run(
            [*CLI, "erase", "--lake", str(lake_dir), "w-1"],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(secondary)
        os.close(primary)
    assert typed.returncode == 0, typed.stderr
    assert "dry run: nothing erased" in typed.stdout, typed.stdout
    assert len(_counts(lake_dir, ["w-1", "w-2"])) == 2
    everything = _erase(lake_dir, "--where", "true")
    assert everything.returncode == 2, everything.stderr
    assert "--yes" in everything.stderr, everything.stderr
    # Its dry run lists them all, and erases nothing.
    listed = _erase(lake_dir, "--where", "true", "--dry-run")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert {"w-1", "w-2"} <= set(listed.stdout.split()), listed.stdout
    bad = _erase(lake_dir, "--where", "no_such_column = 1", "--yes")
    assert bad.returncode == 2, bad.stderr
    assert "--where" in bad.stderr, bad.stderr
    assert len(_counts(lake_dir, ["w-1", "w-2"])) == 2
    # From a script (no terminal), only with --yes.
    unconfirmed = _erase(lake_dir, "--where", "conversation_id = 'w-1'")
    assert unconfirmed.returncode == 2, unconfirmed.stdout + unconfirmed.stderr
    assert "add --yes" in unconfirmed.stderr, unconfirmed.stderr
    assert len(_counts(lake_dir, ["w-1", "w-2"])) == 2
    one = _erase(lake_dir, "--where", "conversation_id = 'w-1'", "--yes")
    assert one.returncode == 0, one.stdout + one.stderr
    assert [r[0] for r in _counts(lake_dir, ["w-1", "w-2"])] == ["w-2"]


# Holds a read transaction on a SQLite catalog until its standard input closes (in a process
# of its own: closing a second SQLite library's connection here would drop DuckDB's locks).
_CATALOG_READER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN")
con.execute("SELECT count(*) FROM ducklake_snapshot").fetchall()
print("reading", flush=True)
sys.stdin.read()
"""


def _erasure_status(lake_dir: Path) -> list[Any]:
    con = lake.connect(str(lake_dir))
    try:
        return [r[0] for r in con.execute("SELECT status FROM erasures").fetchall()]
    finally:
        con.close()


@pytest.mark.slow
def test_an_erase_the_collector_or_a_run_holds_back_exits_non_zero_naming_it(
    lake_dir: Path, make_collector: Callable[..., Collector]
) -> None:
    """With the collector up (its maintenance thread idle), `erase` and `erase --finish`
    finish; what keeps an erasure from finishing (a running evaluation, a process holding
    the catalog open) is named, with when maintenance finishes it, and the exit is 3."""
    collector = make_collector(maintenance_interval_s=3600)
    for name in ("gone", "kept"):
        post_lookup_conversation(collector, name, "a street", NOW)
    con = lake.connect(str(lake_dir))
    try:
        con.execute(
            "INSERT INTO eval_runs (run_id, status, started_at, details) "
            "VALUES ('run-in-the-way', 'running', now(), '{}')"
        )
    finally:
        con.close()
    deferred = _erase(lake_dir, "gone", "--yes")
    assert deferred.returncode == 3, deferred.stdout + deferred.stderr
    assert "the running evaluation run-in-the-way" in deferred.stderr, deferred.stderr
    assert f"the collector (pid {os.getpid()})" in deferred.stderr, deferred.stderr
    assert "erase --finish --lake" in deferred.stderr, deferred.stderr
    assert _erasure_status(lake_dir) == ["erased"]
    con = lake.connect(str(lake_dir))
    try:
        con.execute("UPDATE eval_runs SET status = 'succeeded'")
    finally:
        con.close()

    reader = subprocess.Popen(
        [sys.executable, "-c", _CATALOG_READER, str(lake_dir / "catalog.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline() == "reading\n"
        held = _erase(lake_dir, "--finish")
    finally:
        reader.communicate("", timeout=30)
    assert held.returncode == 3, held.stdout + held.stderr
    assert "evaluation" not in held.stderr, held.stderr
    assert "kept the catalog open" in held.stderr, held.stderr
    assert f"pid {os.getpid()}" in held.stderr, held.stderr
    assert "next maintenance" in held.stderr, held.stderr
    assert _erasure_status(lake_dir) == ["erased"]

    finished = _erase(lake_dir, "--finish")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "finished 1 earlier erasure" in finished.stdout, finished.stdout
    assert _erasure_status(lake_dir) == ["purged"]


@pytest.mark.slow
def test_an_erase_killed_midway_leaves_a_consistent_lake_and_a_rerun_finishes_it(
    collector: Collector, lake_dir: Path
) -> None:
    marker = f"MARK{uuid.uuid4().hex[:12]}ER"
    _uncompressed_lake(lake_dir)
    post_lookup_conversation(collector, "killed", f"{marker} street", NOW)
    post_lookup_conversation(collector, "kept", "a street", NOW)
    kept = _counts(lake_dir, ["kept"])
    # Killed as soon as its first phase committed: the conversation is gone from the data,
    # its files are still on disk.
    proc = subprocess.Popen(
        [*CLI, "erase", "--lake", str(lake_dir), "killed", "--yes"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def first_phase_done() -> bool:
            con = lake.connect(str(lake_dir))
            try:
                return bool(con.execute("SELECT count(*) FROM erasures").fetchall()[0][0])
            finally:
                con.close()

        wait_for(lambda: first_phase_done() or proc.poll() is not None, timeout=120)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    # Whatever it had done: the conversation is whole or gone, never half.
    remaining = _counts(lake_dir, ["killed"])
    assert remaining in ([], [("killed", 3, 1)]), remaining
    rerun = _erase(lake_dir, "killed", "--yes")
    if remaining:  # killed before its first commit: the rerun erases it
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    else:  # the rerun finishes the erasure, and says the id is no longer in the lake
        assert rerun.returncode in (0, 2), rerun.stdout + rerun.stderr
    assert _counts(lake_dir, ["killed"]) == []
    assert marker_hits(local_files(lake_dir), marker) == []
    assert _counts(lake_dir, ["kept"]) == kept
    con = lake.connect(str(lake_dir))
    try:
        assert lifecycle.pending_erasures(con) == []
    finally:
        con.close()


@pytest.mark.parametrize("kind", ["embedded", pytest.param("shared", marks=pytest.mark.postgres)])
def test_a_running_evaluation_keeps_its_snapshot_through_erase_and_retention(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An erase while a run runs takes the rows out of the current data at once, and their
    files off the disk only once the run ends; retention never expires the run's snapshot.
    On an embedded lake and on a shared one (PostgreSQL catalog, data in a bucket)."""
    where = tmp_path / "lake" if kind == "embedded" else request.getfixturevalue("shared_lake")
    con = lake.connect(where, create=True)
    try:
        for conversation, started in (("old", OLD), ("gone", NOW), ("kept", NOW)):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, conversation_id, start_time) "
                "VALUES (?, 's', ?, ?)",
                [conversation, conversation, started],
            )
        pinned = lake.current_snapshot(con)
        con.execute(
            "INSERT INTO eval_runs (run_id, status, started_at, details) "
            "VALUES ('r', 'running', now(), ?)",
            [f'{{"snapshot": {pinned}}}'],
        )
        selection = lifecycle.select_conversations(con, ["gone"])
        lifecycle.erase(con, selection, selection_kind="ids")

        def step(sql: Any, what: str) -> list[tuple[Any, ...]]:
            return con.execute(sql).fetchall() if isinstance(sql, str) else sql()

        assert lifecycle.finish_erasures(con, step)["purge_deferred"] == 1
        done = lake.maintain(con, retention_days=30, expire_older_than_s=0, delete_older_than_s=0)
        assert done["retention_rows_deleted"] == 1
        assert done["purge_deferred"] == 1, done
        reader = lake.connect(where, snapshot=pinned)  # the run's workers attach it
        try:
            assert reader.execute("SELECT count(*) FROM spans").fetchone() == (3,)
        finally:
            reader.close()
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (1,)
        assert lifecycle.pending_erasures(con, "erase") != []

        con.execute("UPDATE eval_runs SET status = 'succeeded'")
        done = lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)
        assert done["erasures_finished"] == 1, done
        assert done["retention_finished"] == 1, done
        assert lifecycle.pending_erasures(con) == []
    finally:
        con.close()


@pytest.mark.slow
def test_a_collector_applies_its_retention_down_to_the_disk(
    lake_dir: Path, make_collector: Callable[..., Collector]
) -> None:
    """`retention_days` as a collector setting: its own maintenance deletes the rows past it,
    and (with snapshots kept no time) takes them off the disk; the audit row says so."""
    _uncompressed_lake(lake_dir)
    collector = make_collector(maintenance_interval_s=1, retention_days=30, snapshot_retention_s=0)
    marker = f"MARK{uuid.uuid4().hex[:12]}ER"
    post_lookup_conversation(collector, "old", f"{marker} street", OLD)
    post_lookup_conversation(collector, "new", "a street", NOW)

    def purged() -> bool:
        """Every pass done (the spans and the record may be two commits, and two passes)."""
        con = lake.connect(str(lake_dir))
        try:
            rows = con.execute("SELECT reason, status, spans, log_records FROM erasures").fetchall()
        finally:
            con.close()
        return all(row[:2] == ("retention", "purged") for row in rows) and (
            sum(r[2] for r in rows),
            sum(r[3] for r in rows),
        ) == (3, 1)

    wait_for(purged, timeout=120)
    assert _counts(lake_dir, ["new", "old"]) == [("new", 3, 1)]
    assert marker_hits(local_files(lake_dir), marker) == []


def test_retention_ages_what_no_span_ages(tmp_path: Path) -> None:
    """Judge answers, simulated turns and score explanations past retention go by their own
    age, also of a conversation with no span in the lake (a simulated conversation whose
    agent sends its spans elsewhere); younger ones, and the scores' values, stay."""
    con = lake.connect(tmp_path / "lake", create=True)
    try:
        for conversation, at in (("simulated-old", OLD), ("simulated-new", NOW)):
            con.execute(
                "INSERT INTO judge_cache (key, purpose, answer, created_at, conversation_id) "
                "VALUES (?, 'simulated_user', '{}', ?, ?)",
                [conversation, at, conversation],
            )
            con.execute(
                "INSERT INTO simulated_turns (conversation_id, turn_index, user_message, "
                "sent_at) VALUES (?, 0, 'my address is 1 Elm street', ?)",
                [conversation, at],
            )
            con.execute(
                "INSERT INTO scores (conversation_id, metric, value, explanation, details, "
                "created_at) VALUES (?, 'tone', 1, 'quoting 1 Elm street', '{}', ?)",
                [conversation, at],
            )
        done = lake.maintain(con, retention_days=30, expire_older_than_s=0, delete_older_than_s=0)
        assert done["retention_rows_deleted"] == 3, done
        left = con.execute(
            "SELECT (SELECT list(conversation_id) FROM judge_cache), "
            "(SELECT list(conversation_id) FROM simulated_turns)"
        ).fetchone()
        scores = con.execute(
            "SELECT conversation_id, value, explanation IS NULL, details IS NULL FROM scores "
            "ORDER BY conversation_id"
        ).fetchall()
    finally:
        con.close()
    assert left == (["simulated-new"], ["simulated-new"])
    assert scores == [("simulated-new", 1.0, False, False), ("simulated-old", 1.0, True, True)]


def test_a_writer_that_read_the_bounds_before_the_erase_does_not_write_them_back(
    tmp_path: Path,
) -> None:
    """Another process (a collector) read the spans table's bounds after the files were
    rewritten and before the catalog was scrubbed, and caches them; its commit right after the
    scrub merges its new file into what it cached. The scrub moves the lake's next file id on
    (the cache's key), so that commit reads the bounds again instead of writing the erased
    value back."""
    where = tmp_path / "lake"
    marker = f"MARK{uuid.uuid4().hex[:12]}ER"  # upper case: below every other id, the bound
    con = lake.connect(where, create=True)
    writer = lake.connect(where)
    try:
        for conversation in (marker, "kept"):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, conversation_id, start_time) "
                "VALUES (?, 's', ?, ?)",
                [conversation, conversation, NOW],
            )
        lifecycle.erase(con, lifecycle.select_conversations(con, [marker]), selection_kind="ids")

        def step(sql: Any, what: str) -> list[tuple[Any, ...]]:
            # A step pauses the collector's writer, then takes the commit turn: entered with the
            # turn held, it would wait for a writer that waits for the turn.
            assert not locks._held.__dict__.get("paths"), f"{what}: entered holding the turn"
            if what == "record erasures":  # the writer commits once the catalog is scrubbed
                writer.execute(
                    "INSERT INTO spans (trace_id, span_id, conversation_id, start_time) "
                    "VALUES ('new', 's', 'new', ?)",
                    [NOW],
                )
            rows = con.execute(sql).fetchall() if isinstance(sql, str) else sql()
            if what == "delete old files":  # the last step before the catalog's scrub
                writer.execute(
                    "SELECT count(*) FROM spans WHERE conversation_id = 'kept'"
                ).fetchall()
            return rows

        assert lifecycle.finish_erasures(con, step)["erasures_finished"] == 1
    finally:
        writer.close()
        con.close()
    catalog = sqlite3.connect(where / "catalog.sqlite")
    try:
        bounds = catalog.execute(
            "SELECT min_value FROM ducklake_table_column_stats WHERE min_value LIKE 'MARK%'"
        ).fetchall()
    finally:
        catalog.close()
    assert bounds == []
    assert marker_hits(local_files(where), marker) == []


def test_an_evaluation_starting_while_an_erase_rewrites_files_keeps_its_snapshot(
    tmp_path: Path,
) -> None:
    """A run that pins its snapshot after the erase looked for running runs, while it rewrites
    the files: the erase defers expiring snapshots and deleting files, and the run reads its
    snapshot whole; the erase is finished once the run ends."""
    where = tmp_path / "lake"
    con = lake.connect(where, create=True)
    try:
        for conversation in ("gone", "kept"):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, conversation_id, start_time) "
                "VALUES (?, 's', ?, ?)",
                [conversation, conversation, NOW],
            )
        lifecycle.erase(con, lifecycle.select_conversations(con, ["gone"]), selection_kind="ids")
        pinned: list[int] = []

        def step(sql: Any, what: str) -> list[tuple[Any, ...]]:
            if what == "rewrite files" and not pinned:  # a run starts, and pins the snapshot
                pinned.append(lake.current_snapshot(con))
                con.execute(
                    "INSERT INTO eval_runs (run_id, status, started_at, details) "
                    "VALUES ('r', 'running', now(), ?)",
                    [f'{{"snapshot": {pinned[0]}}}'],
                )
            return con.execute(sql).fetchall() if isinstance(sql, str) else sql()

        assert lifecycle.finish_erasures(con, step)["purge_deferred"] == 1
        reader = lake.connect(where, snapshot=pinned[0])
        try:
            assert reader.execute("SELECT count(*) FROM spans").fetchone() == (1,)
        finally:
            reader.close()
        assert lifecycle.pending_erasures(con) != []
        con.execute("UPDATE eval_runs SET status = 'succeeded'")
        assert lifecycle.finish_erasures(con, step)["erasures_finished"] == 1
    finally:
        con.close()


def test_status_shows_the_oldest_data_kept_and_the_retention(
    lake_dir: Path, make_collector: Callable[..., Collector]
) -> None:
    from spanscore.collector import load_config

    assert (
        load_config(
            overrides={"lake": "x"}, environ={"SPANSCORE_RETENTION_DAYS": "30"}
        ).retention_days
        == 30
    )
    first = make_collector()
    post_lookup_conversation(first, "early", "a street", OLD)
    first.stop(timeout=10)
    collector = make_collector(maintenance_interval_s=3600, retention_days=90)

    def status() -> str:
        shown = subprocess.run(
            [*CLI, "status", "--endpoint", f"http://127.0.0.1:{collector.http_port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return shown.stdout

    wait_for(lambda: OLD.date().isoformat() in status(), timeout=60)
    lines = status().splitlines()
    assert any(re.match(rf"\s+oldest_span\s+{OLD.date().isoformat()}T", line) for line in lines)
    assert any(re.match(r"\s+retention_days\s+90$", line) for line in lines), lines
    assert any(re.match(r"\s+score_retention_days\s+unlimited$", line) for line in lines)
