"""Maintenance completes under steady ingest (issue 16, the soak): on the embedded lake, with
exports arriving all the time, compaction, snapshot expiry and file cleanup each lost every
race against the collector's writer (a maintenance transaction conflicts with any commit made
while it runs, and was retried from the start each time), so maintenance never completed, and
data files, snapshots and the collector's memory grew without bound. The writer now stands
still between two commits while a maintenance step runs.

A real collector on a real embedded lake, exports through OTLP/HTTP from a client thread that
never pauses; the test polls, it never times anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spanscore.collector import Collector
from spanscore.lake import connect

from ..support.otlp_wire import export, make_span, trace_request
from ..support.polling import wait_for
from ..support.s3 import S3Server


def lake_shape(lake: Path) -> tuple[int, int]:
    """(data files on disk, snapshots in the catalog), read as another process would."""
    files = sum(1 for _ in (lake / "data").rglob("*.parquet"))
    con = connect(lake, read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM ducklake_snapshots('lake')").fetchone()
    finally:
        con.close()
    return files, int(row[0]) if row else 0


class SteadyIngest:
    """One client exporting small batches back to back until stopped."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.stop = threading.Event()
        self.acknowledged = 0
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            spans = [make_span(f"steady {n}.{i}") for i in range(5)]
            reply = export(self.collector, "http", trace_request(spans))
            if reply.ok:
                self.acknowledged += len(spans)
            else:
                self.failures.append(str(reply))

    def __enter__(self) -> SteadyIngest:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(120)


@pytest.fixture
def steady(make_collector: Callable[..., Collector]) -> Iterator[tuple[Collector, SteadyIngest]]:
    collector = make_collector(
        maintenance_interval_s=1,
        snapshot_retention_s=0,  # expire and delete everything maintenance may
        batch_delay_ms=5,  # many small commits: the hardest case for maintenance
    )
    with SteadyIngest(collector) as load:
        yield collector, load


@pytest.mark.slow
def test_maintenance_completes_under_steady_ingest(
    steady: tuple[Collector, SteadyIngest], lake_dir: Path
) -> None:
    collector, load = steady
    counters = collector.stats.get
    # Several complete maintenance runs while the client never stopped exporting.
    wait_for(lambda: counters("maintenance_runs") >= 3, timeout=100, interval=0.2)
    assert counters("maintenance_failed") == 0
    assert load.acknowledged > 0
    assert not load.failures

    # Bounded: while commits keep coming, expiry keeps the snapshots to what the last
    # interval added, and compaction and cleanup keep the files near that. Without
    # maintenance the snapshots number one per commit and only grow.
    seen: list[tuple[int, int, int]] = []

    def bounded() -> bool:
        commits = counters("commits")
        files, snapshots = lake_shape(lake_dir)
        seen.append((commits, files, snapshots))
        return commits >= 60 and snapshots < commits / 4 and files < commits / 4

    try:
        wait_for(bounded, timeout=150, interval=0.5)
    except AssertionError:
        raise AssertionError(f"(commits, files, snapshots) grew: {seen[-10:]}") from None
    assert load.thread.is_alive()
    assert not load.failures


def span_files(lake: Path) -> int:
    con = connect(lake, read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'spans')").fetchone()
    finally:
        con.close()
    return int(row[0]) if row else 0


def test_a_busy_collector_compacts_after_so_many_commits_between_maintenance_runs(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    """A point query opens every small file: commits made faster than the maintenance
    interval would pile them up (thousands in 5 minutes of many small exports). Compaction
    runs as soon as `compact_after_commits` commits were made, the interval or not."""
    collector = make_collector(maintenance_interval_s=3600, compact_after_commits=5)
    counters = collector.stats.get
    for n in range(40):  # one commit each: the export is answered once it is committed
        reply = export(collector, "http", trace_request([make_span(f"busy {n}")]))
        assert reply.ok, reply
    wait_for(lambda: counters("compactions") >= 4, timeout=120, interval=0.2)
    assert counters("commits") >= 40
    assert counters("maintenance_runs") == 0  # the interval never came
    assert counters("maintenance_failed") == 0
    # Without it: one file per commit, 40 of them.
    wait_for(lambda: span_files(lake_dir) <= 12, timeout=120, interval=0.2)
    con = connect(lake_dir, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (40,)
    finally:
        con.close()


def test_small_commits_are_compacted_sooner_than_large_ones(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    """Exporters' batches of a few hundred spans make several commits a second: each costs a
    point query a file, and a dozen of them are cheap to rewrite. So the collector runs
    compaction's first stage after `compact_after_small_commits` commits when they averaged
    under SMALL_COMMIT_SPANS, and leaves large ones (a collector near its full speed) to
    `compact_after_commits`."""
    from spanscore.collector.config import SMALL_COMMIT_SPANS

    collector = make_collector(
        maintenance_interval_s=3600, compact_after_commits=1000, compact_after_small_commits=4
    )
    counters = collector.stats.get
    large = 2 * SMALL_COMMIT_SPANS
    for n in range(6):  # one commit each (answered once committed), every one large
        reply = export(
            collector, "http", trace_request([make_span(f"large {n}.{i}") for i in range(large)])
        )
        assert reply.ok, reply
    assert counters("commits") == 6
    # Compaction was never due: the maintenance thread, had it woken, would have reset the count.
    assert collector.maintenance is not None
    assert not collector.maintenance.compaction_due.is_set()
    assert collector.maintenance.commits_since_compaction == 6
    assert counters("compactions") == 0
    # Small ones bring the average under the bound: 12,000 + k spans < (6 + k) * 1,000 from
    # the 7th small commit on.
    for n in range(8):
        reply = export(collector, "http", trace_request([make_span(f"small {n}")]))
        assert reply.ok, reply
    wait_for(lambda: counters("early_compactions") >= 1, timeout=120, interval=0.2)
    assert counters("compactions") == 0  # the first stage only: compact_after_commits never came
    assert counters("early_files_sorted") >= 2
    assert counters("maintenance_runs") == 0  # the interval never came
    assert counters("maintenance_failed") == 0
    wait_for(lambda: span_files(lake_dir) <= 3, timeout=120, interval=0.2)  # 14 without
    con = connect(lake_dir, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (6 * large + 8,)
    finally:
        con.close()


def test_a_running_evaluations_snapshot_is_never_expired(tmp_path: Path) -> None:
    # The soak found it: with a short retention, maintenance expired the snapshot a running
    # `evaluate` had pinned, and its workers could no longer attach the lake
    # ("No snapshot found at version N"). The run's `eval_runs` row names its snapshot.
    from spanscore import lake

    where = tmp_path / "lake"
    con = lake.connect(where, create=True)
    try:
        con.execute(
            "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
            "VALUES ('t', 'a', 'n', 'c')"
        )
        pinned = lake.current_snapshot(con)
        con.execute(
            "INSERT INTO eval_runs (run_id, status, started_at, details) "
            "VALUES ('r', 'running', now(), ?)",
            [f'{{"snapshot": {pinned}}}'],
        )
        for span in "bcd":  # newer snapshots, all older than a zero retention
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
                "VALUES ('t', ?, 'n', 'c')",
                [span],
            )
        lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        reader = lake.connect(where, snapshot=pinned)  # the run's workers attach it
        assert reader.execute("SELECT count(*) FROM spans").fetchone() == (1,)
        reader.close()

        con.execute("UPDATE eval_runs SET status = 'succeeded' WHERE run_id = 'r'")
        assert (
            lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)[
                "snapshots_expired"
            ]
            > 0
        )
        with pytest.raises(lake.LakeError, match="snapshot"):
            lake.connect(where, snapshot=pinned)
    finally:
        con.close()


def test_a_run_whose_snapshot_was_thinned_before_its_row_pinned_it_pins_the_current_one(
    tmp_path: Path,
) -> None:
    # Maintenance thins an embedded lake's snapshots once `snapshot_interval_s` old: one an
    # evaluation read as current, then waited that long to record, may be gone when its row
    # commits. The run then pins the current snapshot, which its row's older id keeps.
    import datetime as dt

    from spanscore import lake
    from spanscore.evaluation import load_suite
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.result import RunResult
    from spanscore.evaluation.runs.store import insert_run

    root = Path(__file__).resolve().parents[2]
    suite = load_suite(root / "examples" / "customer_service" / "suite.yaml")
    where = tmp_path / "lake"
    con = lake.connect(where, create=True)
    try:
        con.execute("INSERT INTO spans (trace_id, span_id, name) VALUES ('t', 'a', 'n')")
        read = lake.current_snapshot(con)
        con.execute("INSERT INTO spans (trace_id, span_id, name) VALUES ('t', 'b', 'n')")
        con.execute(f"CALL ducklake_expire_snapshots('lake', versions => [{read}])").fetchall()
        now = dt.datetime.now(dt.UTC)
        result = RunResult(
            run_id="r",
            status="running",
            window_start=None,
            window_end=now,
            snapshot=read,
        )
        insert_run(con, suite, RunOptions(), result, now)
        assert result.snapshot > read
        assert lake.snapshot_exists(con, result.snapshot)
        [(recorded,)] = con.execute(
            "SELECT json_extract(details, '$.snapshot')::BIGINT FROM eval_runs"
        ).fetchall()
        assert recorded == result.snapshot
        reader = lake.connect(where, snapshot=result.snapshot)  # what its workers attach
        assert reader.execute("SELECT count(*) FROM spans").fetchone() == (2,)
        reader.close()
    finally:
        con.close()


def test_compaction_leaves_merged_files_alone_so_each_run_is_bounded(tmp_path: Path) -> None:
    """Compaction merges only files under `merge_below_bytes`: the file one run made is not
    merged again with the next run's small files (before, every run rewrote everything written
    so far, and held the writer longer each time)."""
    from spanscore.lake import maintain

    lake = tmp_path / "lake"
    con = connect(lake, create=True)

    def commit_small_files(count: int, first: int) -> None:
        for i in range(first, first + count):  # one Parquet file per commit
            con.execute(
                "INSERT INTO judge_cache (key, kind, answer) "
                "SELECT ? || '-' || range, 'chat', '{}' FROM range(2000)",
                [str(i)],
            )

    def data_files() -> list[tuple[str, int]]:
        return [
            (str(path), int(size))
            for path, size in con.execute(
                "SELECT data_file, data_file_size_bytes "
                "FROM ducklake_list_files('lake', 'judge_cache')"
            ).fetchall()
        ]

    try:
        commit_small_files(6, 0)
        first = maintain(con, merge_below_bytes=1 << 20)
        assert (first["files_merged"], first["files_created"]) == (6, 1)
        [(merged, size)] = data_files()
        # The merged file is past the bound the next run uses; six new small files are not.
        commit_small_files(6, 6)
        bound = size  # files of this size or more are left alone
        assert all(s < bound for p, s in data_files() if p != merged)
        second = maintain(con, merge_below_bytes=bound)
        assert (second["files_merged"], second["files_created"]) == (6, 1)
        assert merged in [p for p, _ in data_files()]  # not rewritten
        assert con.execute("SELECT count(*) FROM judge_cache").fetchone() == (24_000,)
        # Without the bound (the old behaviour), everything is merged again.
        commit_small_files(2, 12)
        everything = maintain(con, merge_below_bytes=1 << 40)
        assert everything["files_merged"] == 4
    finally:
        con.close()


def test_compaction_writes_one_file_per_step_and_lets_the_writer_in_between(
    tmp_path: Path,
) -> None:
    """Merging a run's worth of small files in one step held the collector's writer for
    seconds; each step now writes one file of about `merged_file_bytes`, and the writer is let
    in between steps (`exclusive` is entered once per step)."""
    from spanscore.lake import maintain

    con = connect(tmp_path / "lake", create=True)
    try:
        for i in range(12):  # one small Parquet file per commit
            con.execute(
                "INSERT INTO judge_cache (key, kind, answer) "
                "SELECT ? || '-' || range, 'chat', to_json(repeat('x', 200)) FROM range(2000)",
                [str(i)],
            )
        [(small,)] = con.execute(
            "SELECT max(data_file_size_bytes) FROM ducklake_list_files('lake', 'judge_cache')"
        ).fetchall()
        holds = 0

        @contextlib.contextmanager
        def exclusive() -> Iterator[None]:
            nonlocal holds
            holds += 1
            yield

        done = maintain(
            con,
            exclusive=exclusive,
            merge_below_bytes=small + 1,
            merged_file_bytes=small * 3,  # about three small files per merged file
        )
        assert done["files_merged"] == 12
        assert done["files_created"] >= 3, done
        # One step per merged file, and a last one that found nothing left to merge.
        assert done["merge_steps"] == done["files_created"] + 1
        assert holds >= done["merge_steps"]
        steps_ms = [v for k, v in done.items() if k.endswith("_ms") and k != "longest_step_ms"]
        assert done["longest_step_ms"] <= sum(steps_ms)
        assert con.execute("SELECT count(*) FROM judge_cache").fetchone() == (24_000,)
        # Merged files are past the bound: the next run leaves them alone.
        again = maintain(con, merge_below_bytes=small + 1, merged_file_bytes=small * 3)
        assert again["files_merged"] == 0
    finally:
        con.close()


def test_maintenance_during_candidate_selection_keeps_the_runs_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The soak: an evaluation exited 1 in the query that selects its candidate conversations.
    # It read at the snapshot it had taken, but recorded it (its `eval_runs` row, which
    # maintenance honours) only after that query: maintenance run meanwhile expired the
    # snapshot and deleted the files the query was reading. Here maintenance, with zero
    # retention and new data to compact, runs exactly there.
    import datetime as dt

    from spanscore.evaluation import load_suite
    from spanscore.evaluation.runs import window
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate
    from spanscore.examples.synthetic import build_lake
    from spanscore.lake import maintain

    where = tmp_path / "lake"
    build_lake(where, 40, per_commit=10)
    select = window.window_candidates

    def maintenance_first(con: object, *args: object, **kwargs: object) -> object:
        build_lake(where, 40, per_commit=10, first=1000)  # small files to merge
        writer = connect(where)
        try:
            maintain(writer, expire_older_than_s=0, delete_older_than_s=0)
        finally:
            writer.close()
        return select(con, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(window, "window_candidates", maintenance_first)
    start = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    suite = load_suite({"name": "pinned", "metrics": [{"type": "efficiency"}]})
    result = evaluate(
        where,
        suite,
        RunOptions(since=start - dt.timedelta(days=1), settle_s=0, workers=1),
    )
    assert result.status == "succeeded"
    assert result.scored == result.candidates == 40  # what the snapshot held, all of it


def test_files_a_running_evaluation_may_still_read_are_not_deleted(tmp_path: Path) -> None:
    # The soak, once runs recorded their pin first: an evaluation failed with "Cannot open
    # file ...parquet". Compaction replaces small files at once (the snapshots then point
    # into the merged file) and schedules the old ones for deletion, but a query that listed
    # its files before the merge still reads the old ones: with the soak's one-minute
    # retention, a query longer than that lost them (and on the embedded lake, DuckLake's
    # `older_than` deletes every file scheduled the same day anyway). No file is deleted
    # while an evaluation runs.
    from spanscore import lake

    where = tmp_path / "lake"
    con = lake.connect(where, create=True)
    try:
        for i in range(30):  # one small file each
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
                "SELECT 't', ? || '-' || range, 'n', 'c' FROM range(1000)",
                [str(i)],
            )
        pinned = lake.current_snapshot(con)
        con.execute(
            "INSERT INTO eval_runs (run_id, status, started_at, details) "
            "VALUES ('r', 'running', now(), ?)",
            [f'{{"snapshot": {pinned}}}'],
        )
        listed = [
            Path(p)
            for (p,) in con.execute(
                "SELECT data_file FROM ducklake_list_files('lake', 'spans')"
            ).fetchall()
        ]  # what a query of the run lists, and reads later
        assert len(listed) == 30

        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        # replaced (merged, or sorted as an embedded lake's spans are): scheduled for deletion
        assert done["files_merged"] + done["span_files_sorted"] == 30
        assert [p for p in listed if not p.exists()] == []
        reader = lake.connect(where, snapshot=pinned)
        assert reader.execute("SELECT count(*) FROM spans").fetchone() == (30_000,)
        reader.close()

        con.execute("UPDATE eval_runs SET status = 'succeeded' WHERE run_id = 'r'")
        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        # Once the run ended: the 30, and the file of the `eval_runs` row the UPDATE replaced.
        assert done["files_deleted"] == 31
        assert [p for p in listed if p.exists()] == []
    finally:
        con.close()


def test_replaced_files_are_kept_for_the_retention_on_the_embedded_lake(tmp_path: Path) -> None:
    # Any long reader (`spanscore sql`, the report) may still read files compaction replaced:
    # the retention keeps them. DuckLake's own cleanup compares `older_than` with the SQLite
    # catalog's times as text, so it deleted every file scheduled the same day at once,
    # whatever the retention; a test of the old code fails at the first `exists` check.
    from spanscore import lake

    where = tmp_path / "lake"
    con = lake.connect(where, create=True)
    try:
        for i in range(10):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
                "SELECT 't', ? || '-' || range, 'n', 'c' FROM range(1000)",
                [str(i)],
            )
        listed = [
            Path(p)
            for (p,) in con.execute(
                "SELECT data_file FROM ducklake_list_files('lake', 'spans')"
            ).fetchall()
        ]
        assert len(listed) == 10

        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=3600)
        assert done["files_merged"] + done["span_files_sorted"] == 10
        assert (done["files_deleted"], [p for p in listed if not p.exists()]) == (0, [])
        again = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=3600)
        assert (again["files_deleted"], [p for p in listed if not p.exists()]) == (0, [])

        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        assert done["files_deleted"] == 10  # past the retention: deleted, and only those
        assert [p for p in listed if p.exists()] == []
        merged = [
            p
            for (p,) in con.execute(
                "SELECT data_file FROM ducklake_list_files('lake', 'spans')"
            ).fetchall()
        ]
        assert merged
        assert all(Path(p).exists() for p in merged)
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (10_000,)
        scheduled = con.execute(
            "SELECT count(*) FROM __ducklake_metadata_lake.ducklake_files_scheduled_for_deletion"
        ).fetchone()
        assert scheduled == (0,)
    finally:
        con.close()


def test_replaced_objects_are_kept_for_the_retention_on_an_embedded_catalog_with_s3_data(
    tmp_path: Path, s3_server: S3Server
) -> None:
    # Objects only DuckLake can delete: it is given a cutoff its text comparison cannot get
    # wrong (two days back), so files replaced today survive even a zero retention.
    from spanscore import lake

    bucket_path = f"s3://{s3_server.bucket}/embedded/"
    con = lake.connect(tmp_path / "lake", data_path=bucket_path, create=True)
    try:
        for i in range(5):
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
                "SELECT 't', ? || '-' || range, 'n', 'c' FROM range(1000)",
                [str(i)],
            )
        before = set(s3_server.objects("embedded/main/spans/"))
        assert len(before) == 5
        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        assert (done["files_merged"] + done["span_files_sorted"], done["files_deleted"]) == (5, 0)
        assert before <= set(s3_server.objects("embedded/main/spans/"))
        assert con.execute("SELECT count(*) FROM spans").fetchone() == (5_000,)
    finally:
        con.close()


@pytest.mark.postgres
def test_files_of_a_commit_in_flight_are_not_deleted_as_orphans(
    postgres_database: str, tmp_path: Path
) -> None:
    # CI, two collectors on a shared lake with no retention: maintenance in one deleted, as
    # orphans, the files the other's commit had written and not yet committed; that commit
    # then pointed at files that were gone, and every later read of them, maintenance's
    # included, failed. Until its transaction commits, a file looks orphaned: orphans are
    # deleted only once older than any transaction lasts, whatever the retention.
    import os
    import time

    from spanscore import lake
    from spanscore.lake.maintenance import ORPHANS_KEPT_S

    data = tmp_path / "data"
    where = f"{postgres_database}?data_path={data}/"
    con = lake.connect(where, create=True)
    other = lake.connect(where)
    try:
        other.execute("BEGIN")
        other.execute(
            "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
            "SELECT 't', 'in-flight-' || range, 'n', 'c' || (range % 7) FROM range(10000)"
        )
        written = sorted(data.rglob("*.parquet"))
        assert written  # its file is there, its rows are not in the catalog yet

        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        assert (done["orphans_deleted"], [p for p in written if not p.exists()]) == (0, [])
        other.execute("COMMIT")
        assert con.execute(
            "SELECT count(DISTINCT span_id), count(DISTINCT conversation_id) FROM spans"
        ).fetchone() == (10_000, 7)

        # What a crashed transaction left: deleted once older than that, and only that.
        crashed = data / "main" / "spans" / "crashed.parquet"
        con.execute(f"COPY (SELECT 1 AS x) TO '{crashed}'")
        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        assert (done["orphans_deleted"], crashed.exists()) == (0, True)
        past = time.time() - ORPHANS_KEPT_S - 60
        os.utime(crashed, (past, past))
        done = lake.maintain(con.cursor(), expire_older_than_s=0, delete_older_than_s=0)
        assert (done["orphans_deleted"], crashed.exists()) == (1, False)
        assert con.execute("SELECT count(DISTINCT span_id) FROM spans").fetchone() == (10_000,)
    finally:
        other.close()
        con.close()
