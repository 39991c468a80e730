"""The judge's rounds: the questions a batch's deferred assertions asked are answered at once
(concurrently, from the cache, or through the Batch API) and the assertions scored again,
while later batches go on scoring."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.llm.types import JudgeAnswer, JudgeRequest
from spanscore.evaluation.runs.chunks import Batch
from spanscore.evaluation.runs.engines import score_batches
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.store import (
    ScoreRecord,
    run_row,
    runs,
    score_record,
    score_table,
    set_details,
)
from spanscore.evaluation.suites.loaded import Deferred, LoadedSuite

log = logging.getLogger("spanscore.evaluate")


@dataclass
class _Waiting:
    """A scored batch whose judged metrics wait for the judge's answers."""

    scores: pa.Table
    size: int
    deferred: list[Deferred]
    answers: dict[str, JudgeAnswer]
    future: concurrent.futures.Future[dict[str, JudgeAnswer]]
    rows: list[ScoreRecord] = field(default_factory=list)


# Batches waiting for the judge at once: enough questions in flight to keep the judge at its
# limit, few enough that memory stays bounded (each holds its batch's trajectories).
_MAX_WAITING = 4


def judged_batches(
    batches: Iterator[Batch],
    suite: LoadedSuite,
    runner: JudgeRunner,
    commit: Callable[[pa.Table, int, bool], None],
) -> None:
    """Commit each batch once every judged metric of its conversations is scored: the
    judge's questions go to the pool as soon as a batch is scored, and batches are committed
    in the order their answers arrive."""
    waiting: list[_Waiting] = []

    def advance(item: _Waiting) -> bool:
        """Score the item's deferred assertions with the answers; True when it is complete."""
        item.answers.update(item.future.result())
        still: list[Deferred] = []
        for deferred in item.deferred:
            rows, rest = suite.resume(deferred, item.answers)
            item.rows += [score_record(deferred.trajectory.conversation_id, row) for row in rows]
            if rest.items:
                still.append(rest)
        item.deferred = still
        if still:
            item.future = runner.submit(_questions(still))
            return False
        return True

    def settle(block: bool) -> None:
        if not waiting:
            return
        done, _ = concurrent.futures.wait(
            [w.future for w in waiting],
            timeout=None if block else 0,
            return_when=FIRST_COMPLETED,
        )
        for item in [w for w in waiting if w.future in done]:
            if advance(item):
                waiting.remove(item)
                commit(pa.concat_tables([item.scores, score_table(item.rows)]), item.size, False)

    for scores, size, deferred, written in batches:
        if not deferred:
            commit(scores, size, written)
        else:
            waiting.append(
                _Waiting(scores, size, deferred, {}, runner.submit(_questions(deferred)))
            )
        settle(block=False)
        while len(waiting) >= _MAX_WAITING:
            settle(block=True)
    while waiting:
        settle(block=True)


def judge_in_batches(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    todo: Sequence[str],
    options: RunOptions,
    runner: JudgeRunner,
    result: RunResult,
) -> None:
    """Batch mode, before scoring: a first pass collects every question the run will ask, the
    ones the cache cannot answer go through the Batch API, and their answers land in the cache,
    where the scoring pass that follows finds them (questions asked only after an answer, such
    as an embeddings fallback, are asked directly then). Batch ids are recorded on the run
    before waiting: a run interrupted while waiting is resumed by collecting the same batches,
    never by submitting the questions again."""
    questions: dict[str, JudgeRequest] = {}
    for _, _, deferred, _ in score_batches(lake, snapshot, suite, todo, options):
        questions.update(_questions(deferred))
    by_key = {runner.client.cache_key(r): r for r in questions.values()}
    for run_id, batch_ids in _uncollected_batches(con, suite):
        log.info("collecting judge batches %s of interrupted run %s", batch_ids, run_id)
        runner.collect_batches(batch_ids, by_key, progress=log.info)
        _batches_collected(con, run_id, batch_ids)
    missing = runner.uncached(questions)
    if not missing:
        return
    batch_ids = runner.create_batches(missing)
    set_details(
        con,
        result.run_id,
        "record the run's judge batches",
        judge_batches=dict.fromkeys(batch_ids, False),
    )
    log.info("%d judge questions sent as batches %s", len(missing), ", ".join(batch_ids))
    runner.collect_batches(batch_ids, missing, progress=log.info)
    _batches_collected(con, result.run_id, batch_ids)


def _uncollected_batches(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite
) -> list[tuple[str, list[str]]]:
    found = []
    # Oldest first: interrupted runs' batches are collected in the order they were sent.
    for run in reversed(runs(con, suite=suite.name, suite_hash=suite.content_hash, finished=True)):
        batches = run.facts.get("judge_batches") or {}
        waiting = [b for b, collected in batches.items() if not collected]
        if waiting:
            found.append((run.run_id, waiting))
    return found


def _batches_collected(con: duckdb.DuckDBPyConnection, run_id: str, batch_ids: list[str]) -> None:
    run = run_row(con, run_id)
    batches = dict((run.facts if run else {}).get("judge_batches") or {})
    batches.update(dict.fromkeys(batch_ids, True))
    set_details(con, run_id, "record the collected judge batches", judge_batches=batches)


def _questions(deferred: Iterable[Deferred]) -> dict[str, JudgeRequest]:
    return {digest: r for d in deferred for digest, r in d.requests.items()}
