"""Evaluation runs: a window of conversations in, scores in the lake, gates out.

One run:
1. pins the lake's current snapshot, so every reader (in every worker process) sees the same
   data while the collector goes on committing;
2. picks the conversations whose last span ended in the window [since, until), where `until`
   is at most now minus `settle` (a conversation still receiving spans waits for the next run)
   and `since` defaults to the end of the previous successful run of the same suite;
3. samples them deterministically (a hash of seed and conversation id: the same ones on every
   re-run), optionally per stratum, and skips those already scored by this suite version;
4. rebuilds and scores them in batches on all cores (or, with `engine="ray"`, in shards over a
   Ray cluster, see `ray_engine`); each batch's scores are committed in one transaction, so an
   interrupted run leaves whole batches and the next run resumes;
5. records the run in `eval_runs`, summarises the scores per scenario and metric, and checks
   the gates.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import gc
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeAlias

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from spanscore.lake import (
    ALIAS,
    arrow_schema,
    connect,
    current_snapshot,
    is_interrupt,
    retrying,
    side_cursor,
)
from spanscore.lake.schema import CONVERSATION_SUMMARIES, EVAL_RUNS, SCORES, quote_identifier

from .judge import JudgeAnswer, JudgeConfig, JudgeRequest
from .judge_pool import JudgeRunner
from .suite import Deferred, Gate, LoadedSuite, Policy, ScoreRow, load_suite
from .trajectory import Trajectory, rows_of_chunks, trajectories_from_rows

UTC = dt.UTC
log = logging.getLogger("spanscore.evaluate")


@dataclass
class RunOptions:
    """What to evaluate and how; the `spanscore evaluate` options."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    sample: float | None = None  # fraction of conversations, by hash
    max_conversations: int | None = None
    seed: int = 0
    stratify_by: str | None = None  # agent_name, service_name or a span attribute key
    services: Sequence[str] = ()
    agents: Sequence[str] = ()
    scenarios: Sequence[str] = ()  # conversations whose scenario.id is one of these
    rescore: bool = False
    settle_s: float = 600.0
    workers: int = 0  # 0: one per CPU
    engine: str = "local"  # local (processes of this host) or ray (tasks on a Ray cluster)
    ray_address: str | None = None  # the Ray cluster to join (None: RAY_ADDRESS, else start one)
    batch_size: int = 500
    query_conversations: int = 20_000  # conversations per sorted query (bounds its memory)
    gates: Sequence[Gate] = ()  # on top of the suite's
    min_conversations: int | None = None  # over the suite's `min_conversations`
    strict: bool | None = None  # over the suite's `strict`: warnings fail the run
    now: dt.datetime | None = None  # for tests: the run's notion of now
    judge: Mapping[str, Any] = field(default_factory=dict)  # JudgeConfig fields over the suite's
    judge_environ: Mapping[str, str] | None = None  # for tests: the judge's environment


@dataclass
class Progress:
    done: int
    total: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None


@dataclass
class SummaryRow:
    scenario_id: str | None
    metric: str
    conversations: int
    judged: int  # scores with a pass/fail
    pass_rate: float | None
    mean: float | None
    errors: int
    worst: list[str]
    first_error: str | None = None


@dataclass
class GateResult:
    gate: Gate
    measured: float | None
    passed: bool

    def describe(self) -> str:
        what = "pass rate" if self.gate.min_pass_rate is not None else "mean"
        target = (
            self.gate.min_pass_rate if self.gate.min_pass_rate is not None else self.gate.min_mean
        )
        scope = "/".join(x for x in (self.gate.scenario, self.gate.metric) if x) or "all scores"
        if self.measured is None:
            allowed = "allowed by allow_empty" if self.gate.allow_empty else "an empty gate fails"
            return f"{scope}: no {what} to measure, no score in this run ({allowed})"
        return f"{scope}: {what} {self.measured:.3f} (needs >= {target})"


@dataclass
class RunResult:
    run_id: str
    status: str  # succeeded, gate_failed, interrupted, failed
    window_start: dt.datetime | None
    window_end: dt.datetime
    snapshot: int
    candidates: int  # conversations in the window (after filters)
    sampled: int
    skipped: int  # already scored by this suite version
    scored: int
    score_count: int
    error_count: int
    elapsed_s: float
    summary: list[SummaryRow] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    judge: dict[str, Any] | None = None  # calls, cache hits, skipped, tokens, cost, limits
    window_from: str = ""  # where the window's start came from
    empty_because: str | None = None  # why no conversation was in the window
    warnings: list[str] = field(default_factory=list)  # what measured nothing (see strict)
    failures: list[str] = field(default_factory=list)  # what fails the run besides gates
    strict: bool = False  # warnings fail the run

    @property
    def gates_passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def passed(self) -> bool:
        """Every gate passed and nothing else failed the run (too few conversations,
        warnings in strict mode)."""
        return self.gates_passed and not self.failures

    def to_dict(self) -> dict[str, Any]:
        """The run as a JSON-ready document (`spanscore evaluate --format json`)."""

        def when(moment: dt.datetime | None) -> str | None:
            return moment.astimezone(UTC).isoformat() if moment is not None else None

        return {
            "run_id": self.run_id,
            "status": self.status,
            "passed": self.passed,
            "window": {
                "start": when(self.window_start),
                "end": when(self.window_end),
                "start_from": self.window_from,
                "empty_because": self.empty_because,
            },
            "snapshot": self.snapshot,
            "counts": {
                "candidates": self.candidates,
                "sampled": self.sampled,
                "skipped": self.skipped,
                "scored": self.scored,
                "scores": self.score_count,
                "errors": self.error_count,
            },
            "summary": [
                {
                    "scenario": r.scenario_id,
                    "metric": r.metric,
                    "conversations": r.conversations,
                    "judged": r.judged,
                    "pass_rate": r.pass_rate,
                    "mean": r.mean,
                    "errors": r.errors,
                    "worst": r.worst,
                }
                for r in self.summary
            ],
            "gates": [
                {
                    **g.gate.model_dump(exclude_none=True),
                    "measured": g.measured,
                    "passed": g.passed,
                    "description": g.describe(),
                }
                for g in self.gates
            ],
            "warnings": self.warnings,
            "failures": self.failures,
            "strict": self.strict,
            "judge": self.judge,
            "elapsed_s": round(self.elapsed_s, 3),
        }


class WindowError(ValueError):
    """The window cannot be evaluated (its start is after its end); nothing was recorded."""


class RunInterrupted(Exception):
    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(f"run {result.run_id} interrupted after {result.scored} conversations")


# --- sampling ----------------------------------------------------------------------------------


def sample_key(conversation_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by seed and conversation id."""
    digest = hashlib.blake2b(f"{seed}\0{conversation_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def choose(
    conversations: Sequence[tuple[str, str | None]],
    *,
    rate: float | None,
    limit: int | None,
    seed: int,
) -> list[str]:
    """Deterministic sample of (conversation id, stratum) pairs: those whose key is below
    `rate`, then at most `limit`, shared among strata in proportion to their sizes (largest
    remainders), each stratum taking its lowest keys."""
    strata: dict[str | None, list[tuple[float, str]]] = {}
    for conversation_id, stratum in conversations:
        key = sample_key(conversation_id, seed)
        if rate is None or key < rate:
            strata.setdefault(stratum, []).append((key, conversation_id))
    for members in strata.values():
        members.sort()
    total = sum(len(m) for m in strata.values())
    if limit is None or limit >= total:
        return sorted(cid for members in strata.values() for _, cid in members)
    shares = {s: limit * len(m) / total for s, m in strata.items()}
    taken = {s: math.floor(share) for s, share in shares.items()}
    by_remainder = sorted(strata, key=lambda s: (taken[s] - shares[s], str(s)))
    for s in by_remainder[: limit - sum(taken.values())]:
        taken[s] += 1
    return sorted(cid for s, members in strata.items() for _, cid in members[: taken[s]])


# --- the run -----------------------------------------------------------------------------------


def _now(options: RunOptions) -> dt.datetime:
    return options.now or dt.datetime.now(UTC)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spanscore-evaluation")
    except PackageNotFoundError:
        return "unknown"


def evaluate(
    lake: str | os.PathLike[str],
    suite: LoadedSuite,
    options: RunOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    """Run the suite over the lake's conversations as `options` says (see the module doc).

    Raises `RunInterrupted` (with the partial result, recorded as `interrupted`) on
    KeyboardInterrupt; scores committed before it are kept and a re-run resumes. While it runs,
    the process's garbage collector runs less often (its settings are restored after)."""
    options = options or RunOptions()
    started = time.monotonic()
    now = _now(options)
    with _few_collections():
        con = connect(lake)
        try:
            return _run(con, str(lake), suite, options, now, started, progress)
        finally:
            con.close()


# A run allocates many objects that form no cycles (rows, trajectories, scores, the judge's
# requests and answers) and keeps some alive for a while (trajectories waiting for the judge):
# with the default thresholds the collector ran every 700 allocations and rescanned them, and
# everything the process had loaded, again and again (measured: a third of a warm judged run's
# time above a deterministic one).
_RUN_GC_THRESHOLD = (50_000, 50, 100)


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Collect less often while a run lasts, and never rescan what existed before it; the
    process's own settings are restored after it. A process that froze objects itself keeps
    them frozen (unfreezing is all or nothing, so the run then freezes nothing)."""
    before = gc.get_threshold()
    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()
    gc.set_threshold(*_RUN_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if freezing:
            gc.unfreeze()


def _run(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    suite: LoadedSuite,
    options: RunOptions,
    now: dt.datetime,
    started: float,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    _close_abandoned_runs(con, suite)
    snapshot = current_snapshot(con)
    until = now - dt.timedelta(seconds=options.settle_s)
    until_from = f"now minus --settle {_duration(options.settle_s)}"
    if options.until is not None and options.until < until:
        until, until_from = options.until, "--until"
    since, since_from = options.since, "--since"
    if since is None:
        since, since_from = _default_since(con, suite)
    if since is not None and since > until:
        raise WindowError(
            f"the window starts at {_shown(since)} ({since_from}) after it ends at "
            f"{_shown(until)} ({until_from}): nothing can be in it. Give --since (or --last), "
            "or a shorter --settle"
        )
    run_id = uuid.uuid4().hex[:16]
    result = RunResult(
        run_id=run_id,
        status="running",
        window_start=since,
        window_end=until,
        snapshot=snapshot,
        candidates=0,
        sampled=0,
        skipped=0,
        scored=0,
        score_count=0,
        error_count=0,
        elapsed_s=0.0,
        window_from=since_from,
    )
    # Recorded before anything reads at the snapshot: the row pins it, and maintenance that
    # runs meanwhile would otherwise expire it under the first query (the soak found it).
    _insert_run(con, suite, options, result, now)
    try:
        sample, todo, single_traces, runner = _select(
            con, lake, snapshot, suite, options, result, until_from
        )
    except BaseException:
        with contextlib.suppress(Exception):  # nothing was scored: the run never happened
            retrying(
                partial(con.execute, "DELETE FROM eval_runs WHERE run_id = ?", [run_id]),
                what="forget the run",
            )
        raise
    timings: dict[str, float] = {}
    own_watchdog = suite.watchdog is None
    suite.start_watchdog()  # for scoring in this process (one worker) and re-scoring

    def commit(scores: pa.Table, batch_size: int, written: bool = False) -> None:
        if not written:  # a Ray task may have committed its shard itself
            t0 = time.monotonic()
            _write_scores(con, run_id, scores)
            timings["write_s"] = timings.get("write_s", 0.0) + time.monotonic() - t0
        result.scored += batch_size
        result.score_count += scores.num_rows
        result.error_count += scores.num_rows - scores.column("error").null_count
        if progress is not None:
            progress(Progress(result.scored, len(todo), time.monotonic() - started))

    try:
        if runner is not None and runner.config.batch:
            _judge_in_batches(con, lake, snapshot, suite, todo, options, runner, result)
        batches = _score_batches(lake, snapshot, suite, todo, options, write_as=run_id)
        if runner is None:
            for scores, batch_size, _, written in batches:
                commit(scores, batch_size, written)
        else:
            _judged_batches(batches, suite, runner, commit)
    except BaseException as exc:
        if is_interrupt(exc):
            result.status = "interrupted"
            result.elapsed_s = time.monotonic() - started
            if own_watchdog:
                suite.stop_watchdog()
            _close_judge(runner, result)
            with contextlib.suppress(Exception):  # a write the interrupt cut short
                con.execute("ROLLBACK")
            _finish_run(con, result, timings)
            raise RunInterrupted(result) from None
        result.status = "failed"
        result.elapsed_s = time.monotonic() - started
        if own_watchdog:
            suite.stop_watchdog()
        with contextlib.suppress(Exception):
            _close_judge(runner, result)
        with contextlib.suppress(Exception):
            _finish_run(con, result, timings)
        raise
    if own_watchdog:
        suite.stop_watchdog()
    _close_judge(runner, result)
    result.summary = summarize(con, suite, sample)
    gates = [*suite.suite.gates, *options.gates]
    result.gates = [check_gate(g, result.summary) for g in gates]
    result.warnings = run_warnings(suite, result.summary, len(sample))
    if single_traces * 2 > result.candidates:
        result.warnings.append(
            f"{single_traces} of the {result.candidates} conversations in the window carried no "
            "conversation id (each is one trace: conversations.conversation_source = 'trace'); "
            "set one with spanscore.instrumentation.conversation(...) or the collector's "
            "conversation_attribute, or multi-turn conversations are scored piece by piece"
        )
    least = (
        options.min_conversations
        if options.min_conversations is not None
        else suite.suite.min_conversations
    )
    if len(sample) < least:
        result.failures.append(
            f"{len(sample)} conversations in the run, fewer than the {least} required "
            "(min_conversations)"
        )
    strict = options.strict if options.strict is not None else suite.suite.strict
    result.strict = strict
    if strict and result.warnings:
        count = len(result.warnings)
        result.failures.append(
            f"strict mode: {count} {'warning fails' if count == 1 else 'warnings fail'} the run"
        )
    result.status = "succeeded" if result.passed else "gate_failed"
    result.elapsed_s = time.monotonic() - started
    _finish_run(con, result, timings)
    return result


def _select(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    options: RunOptions,
    result: RunResult,
    until_from: str,
) -> tuple[list[str], list[str], int, JudgeRunner | None]:
    """The run's sample and what of it is still to score, read at the pinned snapshot, and
    its judge, started (one that cannot work is refused before anything is scored); the
    counts go into `result` and the run's row."""
    since, until = result.window_start, result.window_end
    reader = connect(lake, snapshot=snapshot)
    try:
        candidates, single_traces = _candidates(reader, options, since, until)
        if not candidates:
            result.empty_because = _why_empty(
                reader, options, since, until, result.window_from, until_from
            )
    finally:
        reader.close()
    sample = choose(
        candidates, rate=options.sample, limit=options.max_conversations, seed=options.seed
    )
    done = set() if options.rescore else _already_scored(con, suite, sample)
    todo = [c for c in sample if c not in done]
    result.candidates, result.sampled = len(candidates), len(sample)
    result.skipped = len(sample) - len(todo)
    judge_config = judge_settings(suite, options) if suite.uses_judge and todo else None
    runner = (
        JudgeRunner(judge_config, lake=con, run_id=result.run_id, environ=options.judge_environ)
        if judge_config is not None
        else None
    )
    if runner is not None:
        runner.start()  # refuses a judge that cannot work before anything is scored
    _set_details(
        con,
        result.run_id,
        "record the run's sample",
        candidates=result.candidates,
        sampled=result.sampled,
        skipped=result.skipped,
    )
    return sample, todo, single_traces, runner


def judge_settings(suite: LoadedSuite, options: RunOptions) -> JudgeConfig:
    """The suite's judge block with the run's options over it."""
    base = suite.judge_config().model_dump(exclude_unset=True)
    return JudgeConfig.model_validate({**base, **options.judge})


def _close_judge(runner: JudgeRunner | None, result: RunResult) -> None:
    if runner is None:
        return
    try:
        runner.close()
    finally:
        result.judge = {**runner.totals.as_dict(), **runner.limit_info()}


@dataclass
class _Waiting:
    """A scored batch whose judged metrics wait for the judge's answers."""

    scores: pa.Table
    size: int
    deferred: list[Deferred]
    answers: dict[str, JudgeAnswer]
    future: concurrent.futures.Future[dict[str, JudgeAnswer]]
    rows: list[ScoreTuple] = field(default_factory=list)


# Batches waiting for the judge at once: enough questions in flight to keep the judge at its
# limit, few enough that memory stays bounded (each holds its batch's trajectories).
_MAX_WAITING = 4


def _judged_batches(
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
            item.rows += [score_tuple(deferred.trajectory.conversation_id, row) for row in rows]
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


def _judge_in_batches(
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
    for _, _, deferred, _ in _score_batches(lake, snapshot, suite, todo, options):
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
    _set_details(
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
    rows = con.execute(
        "SELECT run_id, details FROM eval_runs WHERE suite_name = ? AND suite_hash = ? "
        "AND status <> 'running' ORDER BY started_at",
        [suite.name, suite.content_hash],
    ).fetchall()
    found = []
    for run_id, details in rows:
        batches = json.loads(details or "{}").get("judge_batches") or {}
        waiting = [b for b, collected in batches.items() if not collected]
        if waiting:
            found.append((run_id, waiting))
    return found


def _batches_collected(con: duckdb.DuckDBPyConnection, run_id: str, batch_ids: list[str]) -> None:
    row = con.execute("SELECT details FROM eval_runs WHERE run_id = ?", [run_id]).fetchone()
    batches = dict(json.loads((row[0] if row else None) or "{}").get("judge_batches") or {})
    batches.update(dict.fromkeys(batch_ids, True))
    _set_details(con, run_id, "record the collected judge batches", judge_batches=batches)


def _set_details(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    what: str,
    **fields: Any,
) -> None:
    row = con.execute("SELECT details FROM eval_runs WHERE run_id = ?", [run_id]).fetchone()
    details = json.loads((row[0] if row else None) or "{}")
    details.update(fields)
    retrying(
        lambda: con.execute(
            "UPDATE eval_runs SET details = ? WHERE run_id = ?",
            [json.dumps(details, sort_keys=True), run_id],
        ),
        what=what,
    )


def _questions(deferred: Iterable[Deferred]) -> dict[str, JudgeRequest]:
    return {digest: r for d in deferred for digest, r in d.requests.items()}


def _candidates(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
) -> tuple[list[tuple[str, str | None]], int]:
    """(conversation id, stratum) of every conversation whose last span ended in the window,
    and how many of them are a trace with no conversation id (`conversation_source`)."""
    where = ["end_time < ?"]
    params: list[Any] = [until]
    if since is not None:
        where.append("end_time >= ?")
        params.append(since)
    if options.services:
        where.append("service_name IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(options.services))
    if options.agents:
        where.append("agent_name IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(options.agents))
    if options.scenarios:
        where.append(
            "conversation_id IN (SELECT conversation_id FROM spans WHERE "
            """json_extract_string(attributes, '$."scenario.id"')"""
            " IN (SELECT unnest(?::VARCHAR[])))"
        )
        params.append(list(options.scenarios))
    stratum = "NULL"
    if options.stratify_by in ("agent_name", "service_name"):
        stratum = options.stratify_by
    elif options.stratify_by:
        stratum = (
            "(SELECT max(json_extract_string(s.attributes, ?)) FROM spans s "
            "WHERE s.conversation_id = c.conversation_id)"
        )
        params.insert(0, '$."' + options.stratify_by.replace('"', '\\"') + '"')
    sql = (
        f"SELECT conversation_id, {stratum}, conversation_source = 'trace' "
        f"FROM {CONVERSATION_SUMMARIES} c WHERE {' AND '.join(where)} ORDER BY conversation_id"
    )
    rows = con.execute(sql, params).fetchall()
    chosen = [(str(cid), None if s is None else str(s)) for cid, s, _ in rows]
    return chosen, sum(1 for *_, single in rows if single)


def _default_since(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite
) -> tuple[dt.datetime | None, str]:
    """The default window start, and where it comes from.

    The end of the previous finished run of this suite version; for a version that never ran
    (the suite was edited), the start of the window the suite's previous version last scored,
    so the edited suite scores that window again (and `compare` can pair the two runs)
    rather than finding nothing new; for a suite that never ran, the beginning."""
    rows = con.execute(
        "SELECT run_id, suite_hash, window_start, window_end FROM eval_runs "
        "WHERE suite_name = ? AND status IN ('succeeded', 'gate_failed') "
        "ORDER BY window_end DESC, started_at DESC",
        [suite.name],
    ).fetchall()
    for run_id, suite_hash, _, window_end in rows:
        if suite_hash == suite.content_hash:
            return window_end, f"the end of run {run_id}, the previous one of this suite version"
    if rows:
        run_id, _, window_start, _ = rows[0]
        if window_start is None:
            return None, (
                f"this suite version never ran: from the beginning, as the previous "
                f"version's last run {run_id}"
            )
        return window_start, (
            f"this suite version never ran: the start of the previous version's last run {run_id}"
        )
    return None, "the beginning: the first run of this suite"


def _why_empty(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
    since_from: str,
    until_from: str,
) -> str:
    """Why no conversation is in the window: what the lake holds, and how many conversations
    each bound and the filters left out."""
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE end_time >= ?), "
        "count(*) FILTER (WHERE end_time < ?) FROM conversations",
        [until, since if since is not None else dt.datetime(1, 1, 1, tzinfo=UTC)],
    ).fetchone()
    total, after, before = row if row else (0, 0, 0)
    if not total:
        return (
            "the lake holds no conversation yet (are spans arriving? `spanscore status` shows "
            "what the collector received)"
        )
    parts = []
    if before:
        parts.append(f"{before} ended before the window start ({since_from})")
    if after:
        parts.append(f"{after} ended at or after the window end ({until_from})")
    filtered = total - before - after
    if filtered:
        parts.append(f"{filtered} did not match --service / --agent / --scenario")
    return f"the lake holds {total} conversations: " + "; ".join(parts)


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _shown(moment: dt.datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _already_scored(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, sample: Sequence[str]
) -> set[str]:
    if not sample:
        return set()
    con.register("spanscore_sample", pa.table({"conversation_id": list(sample)}))
    try:
        rows = con.execute(
            "SELECT DISTINCT s.conversation_id FROM scores s "
            "JOIN eval_runs r USING (run_id) "
            "WHERE r.suite_name = ? AND r.suite_hash = ? "
            "AND s.conversation_id IN (SELECT conversation_id FROM spanscore_sample)",
            [suite.name, suite.content_hash],
        ).fetchall()
    finally:
        con.unregister("spanscore_sample")
    return {r[0] for r in rows}


def _close_abandoned_runs(con: duckdb.DuckDBPyConnection, suite: LoadedSuite) -> None:
    """Runs of this suite left `running` by a process of this host that no longer exists
    (killed) are marked `interrupted`."""
    host = socket.gethostname()
    rows = con.execute(
        "SELECT run_id, details FROM eval_runs WHERE suite_name = ? AND status = 'running' "
        "AND host = ?",
        [suite.name, host],
    ).fetchall()
    for run_id, details in rows:
        pid = json.loads(details or "{}").get("pid")
        if isinstance(pid, int) and not _alive(pid):
            sql = "UPDATE eval_runs SET status = 'interrupted' WHERE run_id = ?"
            retrying(partial(con.execute, sql, [run_id]), what="mark an abandoned run")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _insert_run(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    options: RunOptions,
    result: RunResult,
    now: dt.datetime,
) -> None:
    sample_spec = {
        "rate": options.sample,
        "max_conversations": options.max_conversations,
        "seed": options.seed,
        "stratify_by": options.stratify_by,
        "services": list(options.services),
        "agents": list(options.agents),
        "scenarios": list(options.scenarios),
        "settle_s": options.settle_s,
        "rescore": options.rescore,
    }
    details = {
        "pid": os.getpid(),
        "snapshot": result.snapshot,
        "suite_path": str(suite.path) if suite.path else None,
        "candidates": result.candidates,
        "sampled": result.sampled,
        "skipped": result.skipped,
    }
    row = {
        "run_id": result.run_id,
        "suite_name": suite.name,
        "suite_hash": suite.content_hash,
        "window_start": result.window_start,
        "window_end": result.window_end,
        "sample_spec": json.dumps(sample_spec, sort_keys=True),
        "spanscore_version": _version(),
        "host": socket.gethostname(),
        "started_at": now,
        "finished_at": None,
        "status": "running",
        "conversation_count": 0,
        "score_count": 0,
        "error_count": 0,
        "judge_cost_usd": 0.0,
        "details": json.dumps(details, sort_keys=True),
    }
    table = pa.Table.from_pylist([row], schema=arrow_schema(EVAL_RUNS))
    _append(con, "eval_runs", table)


def _finish_run(
    con: duckdb.DuckDBPyConnection, result: RunResult, timings: dict[str, float]
) -> None:
    details_row = con.execute(
        "SELECT details FROM eval_runs WHERE run_id = ?", [result.run_id]
    ).fetchone()
    details = json.loads(details_row[0]) if details_row and details_row[0] else {}
    details.update(
        {
            "elapsed_s": round(result.elapsed_s, 3),
            **{k: round(v, 3) for k, v in timings.items()},
            "gates": [
                {
                    "gate": g.gate.model_dump(exclude_none=True),
                    "measured": g.measured,
                    "passed": g.passed,
                }
                for g in result.gates
            ],
            "window_from": result.window_from,
            "empty_because": result.empty_because,
            "warnings": result.warnings,
            "failures": result.failures,
        }
    )
    judge = result.judge or {}
    if result.judge is not None:
        details["judge"] = result.judge
    retrying(
        lambda: con.execute(
            "UPDATE eval_runs SET status = ?, finished_at = ?, conversation_count = ?, "
            "score_count = ?, error_count = ?, details = ?, judge_cost_usd = ?, "
            "judge_calls = ?, judge_cache_hits = ?, judge_prompt_tokens = ?, "
            "judge_cached_tokens = ?, judge_completion_tokens = ? WHERE run_id = ?",
            [
                result.status,
                dt.datetime.now(UTC),
                result.scored,
                result.score_count,
                result.error_count,
                json.dumps(details, sort_keys=True),
                judge.get("cost_usd", 0.0),
                judge.get("calls", 0),
                judge.get("cache_hits", 0),
                judge.get("prompt_tokens", 0),
                judge.get("cached_tokens", 0),
                judge.get("completion_tokens", 0),
                result.run_id,
            ],
        ),
        what="record the run",
    )


def _append(con: duckdb.DuckDBPyConnection, table_name: str, table: pa.Table) -> None:
    cur = side_cursor(con)

    def write() -> None:
        cur.register("spanscore_rows", table)
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                # Named columns: a migration may add columns anywhere.
                columns = ", ".join(quote_identifier(n) for n in table.column_names)
                cur.execute(
                    f"INSERT INTO {ALIAS}.{quote_identifier(table_name)} ({columns}) "
                    f"SELECT {columns} FROM spanscore_rows"
                )
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
        finally:
            cur.unregister("spanscore_rows")

    try:
        retrying(write, what=f"write {table_name}")
    finally:
        cur.close()


# (conversation_id, scenario_id, metric, value, label, passed, threshold, explanation, details,
#  error): the `scores` columns a worker produces; the run adds run_id and created_at.
ScoreTuple = tuple[
    str,
    str | None,
    str,
    float | None,
    str | None,
    bool | None,
    float | None,
    str | None,
    str | None,
    str | None,
]


_SCORE_FIELDS = [c for c in arrow_schema(SCORES) if c.name not in ("run_id", "created_at")]
_SCORE_SCHEMA = pa.schema(_SCORE_FIELDS)


def score_table(rows: Sequence[ScoreTuple]) -> pa.Table:
    """Score tuples as an Arrow table (the `scores` columns but run_id and created_at)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_SCORE_FIELDS)
    return pa.table(
        [pa.array(col, type=f.type) for col, f in zip(columns, _SCORE_FIELDS, strict=True)],
        schema=_SCORE_SCHEMA,
    )


def _write_scores(con: duckdb.DuckDBPyConnection, run_id: str, table: pa.Table) -> None:
    if not table.num_rows:
        return
    _append(con, "scores", _scores_of_run(run_id, table))


def _scores_of_run(run_id: str, table: pa.Table) -> pa.Table:
    rows = table.num_rows
    created = pa.array([dt.datetime.now(UTC)] * rows, type=pa.timestamp("us", tz="UTC"))
    full = table.add_column(0, "run_id", pa.array([run_id] * rows, type=pa.string()))
    full = full.append_column("created_at", created)
    return full.cast(arrow_schema(SCORES))


def write_scores_once(
    con: duckdb.DuckDBPyConnection, run_id: str, conversation_ids: Sequence[str], table: pa.Table
) -> bool:
    """Commit the scores of these conversations for the run in one transaction, unless the run
    already holds a score of any of them (a retried task whose first attempt committed before
    its worker was lost): True when this call wrote them."""
    if not table.num_rows:
        return False
    full = _scores_of_run(run_id, table)
    ids = pa.table({"conversation_id": pa.array(list(conversation_ids), type=pa.string())})

    def write() -> bool:
        con.register("spanscore_rows", full)
        con.register("spanscore_ids", ids)
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                found = con.execute(
                    "SELECT count(*) FROM scores WHERE run_id = ? "
                    "AND conversation_id IN (SELECT conversation_id FROM spanscore_ids)",
                    [run_id],
                ).fetchone()
                if found and found[0]:
                    con.execute("ROLLBACK")
                    return False
                columns = ", ".join(quote_identifier(n) for n in full.column_names)
                con.execute(f"INSERT INTO scores ({columns}) SELECT {columns} FROM spanscore_rows")
                con.execute("COMMIT")
                return True
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
        finally:
            con.unregister("spanscore_rows")
            con.unregister("spanscore_ids")

    return retrying(write, what="write scores")


# --- scoring, in this process or in workers --------------------------------------------------


def score_trajectories(
    suite: LoadedSuite, trajectories: Iterable[Trajectory], deferred: list[Deferred] | None = None
) -> list[ScoreTuple]:
    """The `scores` rows (sans run and time) the suite gives each trajectory without the
    judge; what waits for the judge is appended to `deferred` (without it, it is judged now)."""
    rows: list[ScoreTuple] = []
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
            append(score_tuple(conversation_id, row))
    return rows


def score_tuple(conversation_id: str, row: ScoreRow) -> ScoreTuple:
    s = row.score
    details = s.details
    return (
        conversation_id,
        row.scenario_id,
        row.metric,
        s.value,
        s.label,
        s.passed,
        s.threshold,
        s.explanation,
        _json(details) if details else None,
        s.error,
    )


def _json(value: Any) -> str:
    return orjson.dumps(
        value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
    ).decode()


def _missing(conversation_id: str) -> ScoreTuple:
    return (
        conversation_id,
        None,
        "trajectory",
        None,
        None,
        None,
        None,
        None,
        None,
        "no spans found for this conversation at the run's snapshot",
    )


_WORKER: dict[str, Any] = {}


def _worker_start(document: dict[str, Any], base_dir: str, allow_outside_metrics: bool) -> None:
    _WORKER["suite"] = suite = load_suite(
        document, base_dir=base_dir, allow_outside_metrics=allow_outside_metrics
    )
    suite.start_watchdog()  # scoring runs in this (main) thread of the worker
    # As in a run (`_few_collections`), for the worker's whole life.
    gc.freeze()
    gc.set_threshold(*_RUN_GC_THRESHOLD)


def worker_suite(
    document: dict[str, Any], base_dir: str, allow_outside_metrics: bool = False
) -> LoadedSuite:
    """The suite in a long-lived worker process (a Ray worker): loaded and set up as
    `_worker_start` does, once per suite version."""
    key = orjson.dumps(
        [document, base_dir, allow_outside_metrics], option=orjson.OPT_SORT_KEYS
    ).decode()
    if _WORKER.get("key") != key:
        previous = _WORKER.get("suite")
        if previous is not None:
            previous.stop_watchdog()
        _worker_start(document, base_dir, allow_outside_metrics)
        _WORKER["key"] = key
    suite: LoadedSuite = _WORKER["suite"]
    return suite


Scored = tuple[pa.Table, list[str], list[Deferred]]
# (score rows, conversations, what waits for the judge, already committed by the worker)
Batch = tuple[pa.Table, int, list[Deferred], bool]


def _score_chunk(suite: LoadedSuite, rows: pa.Table) -> Scored:
    """Rebuild and score one chunk, one conversation at a time (few objects alive: the
    garbage collector has little to scan). Judged metrics come back deferred."""
    ids: list[str] = []
    deferred: list[Deferred] = []

    def rebuilt() -> Iterator[Trajectory]:
        for trajectory in trajectories_from_rows(rows, suite.attribute_keys()):
            ids.append(trajectory.conversation_id)
            yield trajectory

    return score_table(score_trajectories(suite, rebuilt(), deferred)), ids, deferred


def _worker_score(rows: Shipped) -> Scored:
    return _score_chunk(_WORKER["suite"], received(rows))


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
    directory. Its name holds the process id: the directories of runs killed before they
    could remove theirs (kill -9) are removed here, once their process is gone."""
    if parent is None:
        in_memory = os.access(_IN_MEMORY_DIR, os.W_OK | os.X_OK)
        parent = _IN_MEMORY_DIR if in_memory else tempfile.gettempdir()
    for entry in os.scandir(parent):
        owner = entry.name.removeprefix(_CHUNKS_PREFIX).split("-", 1)[0]
        if entry.name.startswith(_CHUNKS_PREFIX) and owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{_CHUNKS_PREFIX}{os.getpid()}-", dir=parent)


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


def _chunks(reader: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
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


def _score_batches(
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    todo: Sequence[str],
    options: RunOptions,
    write_as: str | None = None,
) -> Iterator[Batch]:
    """(score rows, conversations, what waits for the judge, committed) per batch, in
    completion order. Locally, one query at the pinned snapshot streams the span rows of every
    conversation to score; workers rebuild and score whole conversations, and need no lake
    connection. On Ray, each task reads its own shard at the snapshot and, given `write_as`
    (the run id), commits the shard's scores itself when nothing in it waits for the judge."""
    if not todo:
        return
    if options.engine == "ray":
        from .ray_engine import ray_batches

        yield from ray_batches(lake, snapshot, suite, todo, options, write_as)
        return
    size = max(1, options.batch_size)
    con = connect(lake, snapshot=snapshot)
    seen: set[str] = set()
    workers = options.workers or os.cpu_count() or 1
    workers = min(workers, math.ceil(len(todo) / size))
    try:
        chunks = _all_chunks(con, suite, todo, size, options.query_conversations)
        if workers <= 1:
            for chunk in chunks:
                scores, ids, deferred = _score_chunk(suite, chunk)
                seen.update(ids)
                yield scores, len(ids), deferred, False
        else:
            for scores, ids, deferred in _in_pool(chunks, suite, workers):
                seen.update(ids)
                yield scores, len(ids), deferred, False
    finally:
        con.close()
    missing = [_missing(c) for c in todo if c not in seen]
    for i in range(0, len(missing), size):
        yield score_table(missing[i : i + size]), len(missing[i : i + size]), [], False


def _all_chunks(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    todo: Sequence[str],
    size: int,
    per_query: int,
) -> Iterator[pa.Table]:
    """Chunks of whole conversations, from one sorted query per `per_query` conversations:
    the sort's memory is bounded by that, not by the window. The first chunk has a query of
    its own, so scoring (and the judge's first questions) start at once, not after the sort
    of the first `per_query` conversations. A thread runs each query while the chunks of the
    one before are cut and handed out (`rows_of_chunks`)."""
    queries: list[list[str]] = []
    start, step = 0, size
    while start < len(todo):
        queries.append(sorted(set(todo[start : start + step])))
        start, step = start + step, max(size, per_query)
    batches = rows_of_chunks(con, queries, attributes=suite.attribute_keys(), batch_rows=50_000)
    yield from _chunks(batches, size)


def _in_pool(chunks: Iterator[pa.Table], suite: LoadedSuite, workers: int) -> Iterator[Scored]:
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=_worker_start,
        initargs=(suite.document(), str(suite.base_dir), suite.allow_outside_metrics),
    )
    pending: set[Future[Scored]] = set()
    directory = chunk_directory()
    try:
        for chunk in chunks:  # at most two chunks per worker in flight: memory stays bounded
            pending.add(pool.submit(_worker_score, shipped(chunk, directory.name)))
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


# --- summary and gates ------------------------------------------------------------------------


def summarize(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, sample: Sequence[str]
) -> list[SummaryRow]:
    """Per scenario and metric, over the sample: the latest score of each conversation by
    this suite version (so a resumed run summarises the whole sample)."""
    if not sample:
        return []
    con.register("spanscore_sample", pa.table({"conversation_id": list(sample)}))
    try:
        rows = con.execute(
            """
            WITH latest AS (
                SELECT s.* FROM scores s JOIN eval_runs r USING (run_id)
                WHERE r.suite_name = ? AND r.suite_hash = ?
                  AND s.conversation_id IN (SELECT conversation_id FROM spanscore_sample)
                QUALIFY row_number() OVER (
                    PARTITION BY s.conversation_id, s.scenario_id, s.metric
                    ORDER BY s.created_at DESC, s.run_id DESC) = 1
            )
            SELECT scenario_id, metric, count(*), count(passed),
                   avg(passed::INTEGER), avg(value), count(error),
                   coalesce(list(conversation_id ORDER BY error IS NULL,
                        coalesce(passed::INTEGER, 1), value NULLS LAST, conversation_id)
                        FILTER (WHERE passed IS NOT TRUE OR error IS NOT NULL), [])[1:3],
                   min(error)
            FROM latest GROUP BY ALL
            ORDER BY scenario_id NULLS FIRST, metric
            """,
            [suite.name, suite.content_hash],
        ).fetchall()
    finally:
        con.unregister("spanscore_sample")
    return [
        SummaryRow(
            scenario_id=r[0],
            metric=r[1],
            conversations=r[2],
            judged=r[3],
            pass_rate=r[4],
            mean=r[5],
            errors=r[6],
            worst=list(r[7]),
            first_error=r[8],
        )
        for r in rows
    ]


def run_warnings(
    suite: LoadedSuite, summary: Sequence[SummaryRow], conversations: int
) -> list[str]:
    """What a run measured nothing with: scenarios and policies that selected no conversation,
    metrics that gave an error on every conversation, and what the import of a native file left
    out. Each is a warning; strict mode (`--strict`, the suite's `strict`) fails the run."""
    warnings: list[str] = []
    groups = suite.suite.groups()
    selected = {r.scenario_id for r in summary}
    if not conversations:
        if groups:
            warnings.append(
                f"no conversation in the run: none of the {len(groups)} scenarios and policies "
                "selected any"
            )
    else:
        for group in groups:
            if group.id not in selected:
                kind = "policy" if isinstance(group, Policy) else "scenario"
                warnings.append(
                    f"{kind} {group.id!r} selected none of the {conversations} conversations"
                )
    for r in summary:
        if r.conversations and r.errors == r.conversations:
            scope = f"{r.scenario_id}/" if r.scenario_id else ""
            warnings.append(
                f"{scope}{r.metric} gave an error on every conversation ({r.conversations}): "
                f"{r.first_error}"
            )
    warnings += [f"not imported from {suite.path}: {text}" for text in suite.dropped]
    return warnings


def check_gate(gate: Gate, summary: Sequence[SummaryRow]) -> GateResult:
    """A gate over the summary rows it covers (weighted by conversations)."""
    rows = [
        r
        for r in summary
        if (gate.metric is None or r.metric == gate.metric)
        and (gate.scenario is None or r.scenario_id == gate.scenario)
    ]
    if gate.min_pass_rate is not None:
        judged = sum(r.judged for r in rows)
        passed = sum((r.pass_rate or 0.0) * r.judged for r in rows)
        measured = passed / judged if judged else None
        target = gate.min_pass_rate
    else:
        valued = [(r.mean, r.conversations - r.errors) for r in rows if r.mean is not None]
        weight = sum(n for _, n in valued)
        measured = sum(m * n for m, n in valued) / weight if weight else None
        target = gate.min_mean if gate.min_mean is not None else 0.0
    # Nothing to measure fails, unless the gate allows it: a gate that measured nothing
    # (a quiet night, a scenario that selected nothing) must not look like a passed one.
    if measured is None:
        return GateResult(gate, None, gate.allow_empty)
    return GateResult(gate, measured, measured >= target)


def parse_gate(text: str) -> Gate:
    """`--fail-under` syntax: `[SCENARIO/][METRIC.]pass_rate=0.9` or `...mean=0.8`."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected KEY=VALUE, e.g. pass_rate=0.9")
    try:
        threshold = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number") from None
    found = re.fullmatch(
        r"(?:(?P<scenario>[^/]+)/)?(?:(?P<metric>.+)\.)?(?P<what>[a-z_]+)", key.strip()
    )
    what = found.group("what") if found else ""
    if found is None or what not in ("pass_rate", "mean"):
        raise ValueError(f"{text!r}: expected pass_rate or mean before '='")
    scenario, metric = found.group("scenario"), found.group("metric")
    fields: dict[str, Any] = {"scenario": scenario or None, "metric": metric or None}
    fields["min_pass_rate" if what == "pass_rate" else "min_mean"] = threshold
    return Gate(**fields)


def junit_xml(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    run_id: str,
    path: str | Path,
    result: RunResult | None = None,
) -> None:
    """The run's scores as JUnit XML: one testsuite per scenario, one testcase per
    conversation and metric (failure: not passed; error: no score could be given). With the
    run's result, a testsuite `(run)` holds its warnings (skipped, or failures in strict
    mode), what else failed it (too few conversations) and its gates."""
    from xml.etree import ElementTree as ET

    rows = con.execute(
        "SELECT coalesce(scenario_id, '(suite metrics)'), conversation_id, metric, value, "
        "label, passed, explanation, error FROM scores WHERE run_id = ? "
        "ORDER BY 1, conversation_id, metric",
        [run_id],
    ).fetchall()
    root = ET.Element("testsuites", name=suite.name)
    suites: dict[str, ET.Element] = {}
    counts: dict[str, list[int]] = {}
    for scenario, conversation, metric, value, label, passed, explanation, error in rows:
        if scenario not in suites:
            suites[scenario] = ET.SubElement(root, "testsuite", name=scenario)
            counts[scenario] = [0, 0, 0]
        case = ET.SubElement(
            suites[scenario], "testcase", classname=scenario, name=f"{conversation}: {metric}"
        )
        counts[scenario][0] += 1
        shown = label if label is not None else value
        if error is not None:
            ET.SubElement(case, "error", message=error)
            counts[scenario][2] += 1
        elif passed is False:
            failure = ET.SubElement(case, "failure", message=f"{metric} = {shown}")
            failure.text = explanation or ""
            counts[scenario][1] += 1
    if result is not None:
        _junit_run(root, suites, counts, result)
    for scenario, element in suites.items():
        tests, failures, errors = counts[scenario]
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _junit_run(
    root: Any, suites: dict[str, Any], counts: dict[str, list[int]], result: RunResult
) -> None:
    from xml.etree import ElementTree as ET

    name = "(run)"
    element = ET.SubElement(root, "testsuite", name=name)
    suites[name] = element
    counts[name] = [0, 0, 0]
    strict = result.strict

    def case(title: str, failed: bool | None, message: str) -> None:
        item = ET.SubElement(element, "testcase", classname=name, name=title)
        counts[name][0] += 1
        if failed:
            ET.SubElement(item, "failure", message=message)
            counts[name][1] += 1
        elif failed is None:
            ET.SubElement(item, "skipped", message=message)

    for warning in result.warnings:
        case(f"warning: {warning}", True if strict else None, warning)
    for failure in result.failures:
        case(f"run: {failure}", True, failure)
    if result.empty_because:
        case("window", None, f"no conversation in the window: {result.empty_because}")
    for gate in result.gates:
        case(f"gate: {gate.describe()}", not gate.passed, gate.describe())
