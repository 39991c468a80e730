"""Benchmark: rebuilding every trajectory of a window from the lake.

Builds a lake of ``--conversations`` conversations (default 100,000) of 10 spans each (1,000,000
spans): an ``invoke_agent`` root, four model calls (the first two ask for two parallel tool
calls each, the third for one, the fourth answers) and five ``execute_tool`` spans joined to
their requests by call id, with realistic JSON arguments and results, conversations interleaved
in time as real traffic is. Then it times ``load_trajectories`` over the whole lake (SQL
queries that apply the conversation rules to chunks of conversations, a background thread
querying the next chunk while Python assembles this one) and prints spans/s and
conversations/s, next to three baselines of the same run: the same with one query for the
whole lake (nothing overlaps), that query alone, fetched as Arrow without building anything,
and the sorted read of the spans it starts from. Then it has maintenance store the rules'
output (``spanscore.lake.stored``), as the collector does for settled conversations, and times
``load_trajectories`` again, now reading the stored rows, and that read alone. Last, the
rebuild as ``evaluate`` does it: one process reads the rows and cuts them into chunks, and
``--workers`` of the run's own worker processes assemble them; twice, the faster printed.

Target (issue 12): >= 200,000 spans/s on 2 cores. Figures are printed, nothing is asserted.

    .venv/bin/python bench/trajectories.py                 # 100,000 conversations
    .venv/bin/python bench/trajectories.py --conversations 10000
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

import duckdb

from spanscore.evaluation import load_suite, load_trajectories
from spanscore.evaluation.runs.chunks import (
    Shipped,
    chunk_directory,
    received,
    shipped,
    worker_start,
)
from spanscore.evaluation.runs.engines.local import all_chunks, query_size
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.trajectory.load import trajectories_from_rows
from spanscore.evaluation.trajectory.rows import CHUNK_SPANS, trajectory_rows
from spanscore.examples.synthetic import SPANS_PER_CONVERSATION, build_lake
from spanscore.lake import connect
from spanscore.lake.schema.rules import SPAN_ORDER
from spanscore.lake.schema.trajectory import stored_rows_sql
from spanscore.lake.stored import store_trajectories


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--commit-conversations", type=int, default=25_000)
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--chunk-spans", type=int, default=CHUNK_SPANS)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    spans = args.conversations * SPANS_PER_CONVERSATION
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-bench-"))
    try:
        lake_dir = workdir / "lake"
        built = build_lake(lake_dir, args.conversations, args.commit_conversations)
        print(f"built {spans:,} spans ({args.conversations:,} conversations) in {built:.1f}s")

        con = connect(lake_dir)
        started = time.perf_counter()
        spans_read = con.execute(
            f"SELECT * EXCLUDE (attributes, events, links, resource) FROM spans "
            f"ORDER BY conversation_id, {SPAN_ORDER}"
        ).to_arrow_reader(args.batch_rows)
        for _ in spans_read:
            pass
        read_s = time.perf_counter() - started

        started = time.perf_counter()
        rows = 0
        reader = trajectory_rows(con, batch_rows=args.batch_rows)
        for batch in reader:
            rows += batch.num_rows
        query_s = time.perf_counter() - started
        print(f"baseline, the rules query alone: {spans / query_s:,.0f} spans/s ({query_s:.1f}s)")

        def rebuild(chunk: int, *, stored: bool) -> tuple[float, int, int, int]:
            started = time.perf_counter()
            count = tool_calls = warnings = 0
            for trajectory in load_trajectories(
                con, batch_rows=args.batch_rows, chunk_spans=chunk, stored=stored
            ):
                count += 1
                tool_calls += len(trajectory.tool_calls)
                warnings += len(trajectory.warnings)
            return time.perf_counter() - started, count, tool_calls, warnings

        whole_s, *_ = rebuild(spans + 1, stored=False)
        rebuild_s, count, tool_calls, warnings = rebuild(args.chunk_spans, stored=False)
        started = time.perf_counter()
        done = store_trajectories(con, settled_after_s=0)
        store_s = time.perf_counter() - started
        assert done["conversations_stored"] == args.conversations, done
        stored_read_s = read_stored(con, args.batch_rows)
        stored_s, stored_count, stored_calls, _ = rebuild(args.chunk_spans, stored=True)
        assert (stored_count, stored_calls) == (count, tool_calls)
        pooled_runs = []
        for _ in range(2):  # the first also warms what the run reads before the rows
            pooled_s, pooled = rebuild_in_workers(con, args.workers)
            assert pooled == (count, tool_calls), (pooled, count, tool_calls)
            pooled_runs.append(pooled_s)
        pooled_s = min(pooled_runs)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        con.close()
        print(
            f"rebuilt {count:,} trajectories ({tool_calls:,} tool calls, {warnings} warnings) "
            f"in {rebuild_s:.1f}s"
        )
        print()
        print(f"{'':40}{'spans/s':>12}{'conversations/s':>18}")
        print(f"{'sorted read of the spans':40}{spans / read_s:>12,.0f}{count / read_s:>18,.0f}")
        print(f"{'rules query alone':40}{spans / query_s:>12,.0f}{count / query_s:>18,.0f}")
        print(
            f"{'query + rebuild, one query':40}{spans / whole_s:>12,.0f}{count / whole_s:>18,.0f}"
        )
        label = f"query + rebuild, {args.chunk_spans:,}-span chunks"
        print(f"{label:40}{spans / rebuild_s:>12,.0f}{count / rebuild_s:>18,.0f}")
        print()
        print("after maintenance stored the rows (`spanscore.lake.stored`):")
        label = "maintenance storing them"
        print(f"{label:40}{spans / store_s:>12,.0f}{count / store_s:>18,.0f}")
        label = "stored rows, read in order"
        print(f"{label:40}{spans / stored_read_s:>12,.0f}{count / stored_read_s:>18,.0f}")
        label = "load_trajectories from stored rows"
        print(f"{label:40}{spans / stored_s:>12,.0f}{count / stored_s:>18,.0f}")
        label = f"as evaluate does it, {args.workers} workers"
        print(f"{label:40}{spans / pooled_s:>12,.0f}{count / pooled_s:>18,.0f}")
        runs = ", ".join(f"{spans / s:,.0f}" for s in pooled_runs)
        print(f"{'  (spans/s of each of its two runs)':40}{runs:>30}")
        print(f"load from stored rows / sorted read of the spans: {read_s / stored_s:.2f}")
        print(f"evaluate's rebuild / sorted read of the spans: {read_s / pooled_s:.2f}")
        print(f"peak RSS of this process: {peak / 2**20:,.0f} MiB")
        print("target: >= 200,000 spans/s on 2 cores (printed, not asserted)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def rebuild_in_workers(
    con: duckdb.DuckDBPyConnection, workers: int
) -> tuple[float, tuple[int, int]]:
    """Seconds to rebuild every trajectory as `evaluate` does before it scores: one process
    reads the rows of whole conversations (`run.all_chunks`, the run's own reading, at its
    default sizes) and hands each chunk to `workers` processes that assemble it
    (`trajectories_from_rows`, as the run's workers do); also (trajectories, tool calls)."""
    options = RunOptions()
    suite = load_suite({"name": "bench-rebuild", "metrics": [{"type": "efficiency"}]})
    # The run's own workers: the suite loaded, the garbage collector set as for a run.
    pool = ProcessPoolExecutor(
        workers,
        mp_context=get_context("spawn"),
        initializer=worker_start,
        initargs=(suite.document(), str(suite.base_dir), suite.allow_outside_metrics),
    )
    directory = chunk_directory()
    try:
        list(pool.map(rebuilt_counts, [None] * workers))  # the workers are up before timing
        started = time.perf_counter()
        ids = [
            c
            for (c,) in con.execute(
                "SELECT DISTINCT conversation_id FROM spans WHERE conversation_id IS NOT NULL "
                "ORDER BY 1"
            ).fetchall()
        ]
        chunks = all_chunks(con, suite, ids, options.batch_size, query_size(options, workers))
        pending: set[Future[tuple[int, int]]] = set()
        count = tool_calls = 0

        def collect(until: int) -> None:
            nonlocal pending, count, tool_calls
            while len(pending) > until:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    rebuilt, calls = future.result()
                    count, tool_calls = count + rebuilt, tool_calls + calls

        for chunk in chunks:  # as the run: at most two chunks per worker in flight
            pending.add(pool.submit(rebuilt_counts, shipped(chunk, directory.name)))
            collect(2 * workers - 1)
        collect(0)
        return time.perf_counter() - started, (count, tool_calls)
    finally:
        pool.shutdown()
        directory.cleanup()


def rebuilt_counts(rows: Shipped | None) -> tuple[int, int]:
    """In a worker: (trajectories, tool calls) built from a chunk of rows (as the run's
    workers receive it: `run.shipped`)."""
    count = tool_calls = 0
    table = received(rows) if rows is not None else None
    for trajectory in trajectories_from_rows(table) if table is not None else ():
        count += 1
        tool_calls += len(trajectory.tool_calls)
    return count, tool_calls


def read_stored(con: duckdb.DuckDBPyConnection, batch_rows: int) -> float:
    """Seconds to read every stored row in the builder's order, building nothing."""
    started = time.perf_counter()
    for _ in con.execute(stored_rows_sql("")).to_arrow_reader(batch_rows):
        pass
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
