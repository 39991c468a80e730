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
and the sorted read of the spans it starts from. And the ceiling of one design not built yet:
the query's output stored as a table (as maintenance would store it), read back in order and
assembled, with and without the assembly.

Target (issue 12): >= 200,000 spans/s on 2 cores. Figures are printed, nothing is asserted.

    .venv/bin/python bench/trajectories.py                 # 100,000 conversations
    .venv/bin/python bench/trajectories.py --conversations 10000
"""

from __future__ import annotations

import argparse
import queue
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from spanscore.evaluation import load_trajectories
from spanscore.evaluation.trajectory import (
    CHUNK_SPANS,
    trajectories_from_batches,
    trajectory_rows,
)
from spanscore.examples.synthetic import SPANS_PER_CONVERSATION, build_lake
from spanscore.lake import ALIAS, connect
from spanscore.lake.schema import SPAN_ORDER


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--commit-conversations", type=int, default=25_000)
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--chunk-spans", type=int, default=CHUNK_SPANS)
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

        def rebuild(chunk: int) -> tuple[float, int, int, int]:
            started = time.perf_counter()
            count = tool_calls = warnings = 0
            for trajectory in load_trajectories(con, batch_rows=args.batch_rows, chunk_spans=chunk):
                count += 1
                tool_calls += len(trajectory.tool_calls)
                warnings += len(trajectory.warnings)
            return time.perf_counter() - started, count, tool_calls, warnings

        stored_read_s, stored_s = stored_rows(con, args.batch_rows)
        whole_s, *_ = rebuild(spans + 1)
        rebuild_s, count, tool_calls, warnings = rebuild(args.chunk_spans)
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
        print("the ceiling of storing the rules' output at maintenance (not built):")
        label = "stored rows, read in order"
        print(f"{label:40}{spans / stored_read_s:>12,.0f}{count / stored_read_s:>18,.0f}")
        label = "stored rows, read + rebuild"
        print(f"{label:40}{spans / stored_s:>12,.0f}{count / stored_s:>18,.0f}")
        print(f"peak RSS of this process: {peak / 2**20:,.0f} MiB")
        print("target: >= 200,000 spans/s on 2 cores (printed, not asserted)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def stored_rows(con: duckdb.DuckDBPyConnection, batch_rows: int) -> tuple[float, float]:
    """(seconds to read, seconds to read and assemble) the rules query's output once it is
    stored in a lake table in its order: what storing it at maintenance would leave to a
    rebuild. Read ahead by a thread, as `load_trajectories` reads its chunks."""
    table = f"{ALIAS}.bench_builder_rows"
    con.register("bench_rows", trajectory_rows(con, batch_rows=batch_rows).read_all())
    con.execute(f"CREATE TABLE {table} AS SELECT row_number() OVER () AS seq, * FROM bench_rows")
    con.unregister("bench_rows")
    read = f"SELECT * EXCLUDE (seq) FROM {table} ORDER BY seq"

    started = time.perf_counter()
    for _ in con.execute(read).to_arrow_reader(batch_rows):
        pass
    read_s = time.perf_counter() - started

    def read_ahead() -> Iterator[pa.RecordBatch]:
        batches: queue.Queue[pa.RecordBatch | None] = queue.Queue(2)
        failed: list[BaseException] = []

        def produce() -> None:
            try:
                for batch in con.cursor().execute(read).to_arrow_reader(batch_rows):
                    batches.put(batch)
            except BaseException as exc:  # raised in the caller: a short read is no figure
                failed.append(exc)
            finally:
                batches.put(None)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        while (batch := batches.get()) is not None:
            yield batch
        thread.join()
        if failed:
            raise failed[0]

    started = time.perf_counter()
    for trajectory in trajectories_from_batches(read_ahead()):
        len(trajectory.tool_calls)
    rebuild_s = time.perf_counter() - started
    con.execute(f"DROP TABLE {table}")
    return read_s, rebuild_s


if __name__ == "__main__":
    main()
