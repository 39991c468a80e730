"""Chunks of conversations handed to workers: cut whole, shipped as memory-mapped Arrow files
(not through the pool's pipe), rebuilt and scored by a worker's copy of the suite."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, TypeAlias

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.runs.options import RUN_GC_THRESHOLD
from spanscore.evaluation.runs.store import ScoreRecord, score_record, score_table
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.suites.loaded import Deferred, LoadedSuite
from spanscore.evaluation.trajectory.load import trajectories_from_rows
from spanscore.evaluation.trajectory.model import Trajectory
from spanscore.evaluation.trajectory.scratch import scratch_directory

log = logging.getLogger("spanscore.evaluate")

# --- scoring, in this process or in workers --------------------------------------------------


def score_trajectories(
    suite: LoadedSuite, trajectories: Iterable[Trajectory], deferred: list[Deferred] | None = None
) -> list[ScoreRecord]:
    """The `scores` rows (sans run and time) the suite gives each trajectory without the
    judge; what waits for the judge is appended to `deferred` (without it, it is judged now)."""
    rows: list[ScoreRecord] = []
    append = rows.append
    for trajectory in trajectories:
        conversation_id = trajectory.conversation_id
        scored, waiting = suite.score_deterministic(trajectory)
        if waiting is not None:
            if deferred is not None:
                deferred.append(waiting)
            else:
                with JudgeRunner(suite.judge_config()) as runner:
                    scored += suite.finish(waiting, runner.answer)
        for row in scored:
            append(score_record(conversation_id, row))
    return rows


_WORKER: dict[str, Any] = {}


def worker_start(document: dict[str, Any], base_dir: str, allow_outside_metrics: bool) -> None:
    _WORKER["suite"] = suite = load_suite(
        document, base_dir=base_dir, allow_outside_metrics=allow_outside_metrics
    )
    suite.start_watchdog()  # scoring runs in this (main) thread of the worker
    # As in a run (`_few_collections`), for the worker's whole life.
    gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLD)


def worker_suite(
    document: dict[str, Any], base_dir: str, allow_outside_metrics: bool = False
) -> LoadedSuite:
    """The suite in a long-lived worker process (a Ray worker): loaded and set up as
    `worker_start` does, once per suite version."""
    key = orjson.dumps(
        [document, base_dir, allow_outside_metrics], option=orjson.OPT_SORT_KEYS
    ).decode()
    if _WORKER.get("key") != key:
        previous = _WORKER.get("suite")
        if previous is not None:
            previous.stop_watchdog()
        worker_start(document, base_dir, allow_outside_metrics)
        _WORKER["key"] = key
    suite: LoadedSuite = _WORKER["suite"]
    return suite


Scored = tuple[pa.Table, list[str], list[Deferred]]


# (score rows, conversations, what waits for the judge, already committed by the worker)
Batch = tuple[pa.Table, int, list[Deferred], bool]


def score_chunk(suite: LoadedSuite, rows: pa.Table) -> Scored:
    """Rebuild and score one chunk, one conversation at a time (few objects alive: the
    garbage collector has little to scan). Judged metrics come back deferred."""
    ids: list[str] = []
    deferred: list[Deferred] = []

    def rebuilt() -> Iterator[Trajectory]:
        for trajectory in trajectories_from_rows(rows, suite.attribute_keys()):
            ids.append(trajectory.conversation_id)
            yield trajectory

    return score_table(score_trajectories(suite, rebuilt(), deferred)), ids, deferred


def worker_score(rows: Shipped) -> Scored:
    return score_chunk(_WORKER["suite"], received(rows))


# A chunk goes to a worker as a file of Arrow IPC in a directory of the run's own, in memory
# where the system has one (/dev/shm), which the worker maps without copying. Sent through
# the pool's pipe, it was copied four times (pickled, written, read, unpickled): 590 MB per
# million spans of bench/trajectories.py, and evaluate's rebuild ran at 0.8 of the speed.
_IN_MEMORY_DIR = "/dev/shm"


_CHUNKS_PREFIX = "spanscore-chunks-"


# A file's path, or the bytes themselves where no file could be written.
Shipped: TypeAlias = str | pa.Buffer


def chunk_directory(parent: str | None = None) -> tempfile.TemporaryDirectory[str]:
    """A directory for the chunks of one run (`shipped`), removed with what a failed worker
    left in it; in `parent`, by default /dev/shm where it can be written, else the temporary
    directory (`scratch_directory`: those of runs killed before they could remove theirs go)."""
    if parent is None:
        in_memory = os.access(_IN_MEMORY_DIR, os.W_OK | os.X_OK)
        parent = _IN_MEMORY_DIR if in_memory else tempfile.gettempdir()
    return scratch_directory(_CHUNKS_PREFIX, parent)


def shipped(rows: pa.Table, directory: str | None = None) -> Shipped:
    """A chunk for a worker (`received`): a file in `directory` holding the slice's own rows
    (a pickled slice would carry its whole batch's buffers), or, without a directory or room
    in it (a container's /dev/shm is small), the same Arrow IPC bytes."""
    if directory is not None:
        path = None
        try:
            fd, path = tempfile.mkstemp(suffix=".arrows", dir=directory)
            os.close(fd)
            with pa.OSFile(path, "wb") as sink:
                _write_ipc(sink, rows)
            return path
        except OSError as exc:
            log.debug("chunk sent as bytes: no file in %s (%s)", directory, exc)
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    sink = pa.BufferOutputStream()
    _write_ipc(sink, rows)
    return sink.getvalue()


def received(rows: Shipped) -> pa.Table:
    """The chunk `shipped` sent; its file is mapped, not read, and removed at once (the
    mapping lasts as long as the table)."""
    if isinstance(rows, str):
        try:
            with pa.memory_map(rows) as source:
                return pa.ipc.open_stream(source).read_all()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(rows)
    return pa.ipc.open_stream(rows).read_all()


def _write_ipc(sink: pa.NativeFile, rows: pa.Table) -> None:
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)


def chunks_of(reader: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """The batches' rows (sorted by conversation) cut into tables of `size` whole
    conversations (the last may hold fewer)."""
    carry: pa.Table | None = None
    for batch in reader:
        table = pa.Table.from_batches([batch])
        if carry is not None:
            table = pa.concat_tables([carry, table])
        # where the conversation id changes, found by Arrow (not a Python list of every id)
        ids = table.column(0).combine_chunks()
        changes = pc.indices_nonzero(pc.not_equal(ids[1:], ids[:-1])).to_pylist()
        starts = [0, *(i + 1 for i in changes)]
        # The last conversation may go on in the next batch: keep it back.
        while len(starts) > size:
            cut = starts[size]
            yield table.slice(0, cut)
            table = table.slice(cut)
            starts = [i - cut for i in starts[size:]]
        carry = table
    if carry is not None and carry.num_rows:
        yield carry
