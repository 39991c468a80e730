"""The local engine: one sorted query per group of conversations at the pinned snapshot, cut into
chunks of whole conversations that a pool of worker processes rebuilds and scores.

Memory is set by `--batch-size`, not by the window: a query reads one batch per worker (the
first, one batch; at least `MIN_QUERY_CONVERSATIONS`), its rows are held while a thread runs
the next query, and at most two chunks per worker are in flight: a few queries' rows at a
time, whether the window holds ten thousand conversations or ten million."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context

import duckdb
import pyarrow as pa

from spanscore.evaluation.runs.chunks import (
    Batch,
    Scored,
    chunk_directory,
    chunks_of,
    score_chunk,
    shipped,
    worker_score,
    worker_start,
)
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.store import missing_scores, score_table
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.trajectory.rows import rows_of_chunks
from spanscore.lake import (
    connect,
)


def local_batches(
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    todo: Sequence[str],
    options: RunOptions,
    write_as: str | None = None,
) -> Iterator[Batch]:
    """One query at the pinned snapshot streams the span rows of every conversation to score;
    workers rebuild and score whole conversations, and need no lake connection. The run
    commits the batches (`write_as` is for engines whose tasks commit their own)."""
    size = max(1, options.batch_size)
    con = connect(lake, snapshot=snapshot)
    seen: set[str] = set()
    workers = options.workers or os.cpu_count() or 1
    workers = min(workers, math.ceil(len(todo) / size))
    try:
        chunks = all_chunks(con, suite, todo, size, query_size(options, workers))
        if workers <= 1:
            for chunk in chunks:
                scores, ids, deferred = score_chunk(suite, chunk)
                seen.update(ids)
                yield scores, len(ids), deferred, False
        else:
            for scores, ids, deferred in _in_pool(chunks, suite, workers):
                seen.update(ids)
                yield scores, len(ids), deferred, False
    finally:
        con.close()
    missing = [missing_scores(c) for c in todo if c not in seen]
    for i in range(0, len(missing), size):
        yield score_table(missing[i : i + size]), len(missing[i : i + size]), [], False


# Conversations a query reads at least: each query has a cost of its own (the lake's metadata,
# the plan; bench/evaluate.py: about a quarter of a second of this process's CPU), which
# queries of one small batch per worker (1,000 at the default --batch-size) paid too often.
MIN_QUERY_CONVERSATIONS = 5_000


def query_size(options: RunOptions, workers: int) -> int:
    """Conversations per sorted query: `query_conversations`, by default one batch per worker
    and at least `MIN_QUERY_CONVERSATIONS` (each query's rows are held while the next one
    runs: this is what sets a run's memory, whatever the window)."""
    if options.query_conversations:
        return options.query_conversations
    return max(max(1, options.batch_size) * max(1, workers), MIN_QUERY_CONVERSATIONS)


def all_chunks(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    todo: Sequence[str],
    size: int,
    per_query: int,
) -> Iterator[pa.Table]:
    """Chunks of whole conversations, from one sorted query per `per_query` conversations:
    the sort's memory, and that of the rows held, is bounded by that, not by the window. The
    first chunk has a query of its own, so scoring (and the judge's first questions) start at
    once, not after the sort of the first `per_query` conversations. A thread runs each query
    while the chunks of the one before are cut and handed out (`rows_of_chunks`)."""
    queries: list[list[str]] = []
    start, step = 0, size
    while start < len(todo):
        queries.append(sorted(set(todo[start : start + step])))
        start, step = start + step, max(size, per_query)
    batches = rows_of_chunks(con, queries, attributes=suite.attribute_keys(), batch_rows=50_000)
    yield from chunks_of(batches, size)


def _in_pool(chunks: Iterator[pa.Table], suite: LoadedSuite, workers: int) -> Iterator[Scored]:
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=worker_start,
        initargs=(suite.document(), str(suite.base_dir), suite.allow_outside_metrics),
    )
    pending: set[Future[Scored]] = set()
    directory = chunk_directory()
    try:
        for chunk in chunks:  # at most two chunks per worker in flight: memory stays bounded
            pending.add(pool.submit(worker_score, shipped(chunk, directory.name)))
            while len(pending) >= 2 * workers:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        directory.cleanup()
