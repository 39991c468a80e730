"""Evaluation runs: a window of conversations in, scores in the lake, gates out.

One run:
1. pins the lake's current snapshot, so every reader (in every worker process) sees the same
   data while the collector goes on committing;
2. picks the conversations whose last span ended in the window [since, until), where `until`
   is at most now minus `settle` (a conversation still receiving spans waits for the next run)
   and `since` defaults to the end of the previous successful run of the same suite;
3. samples them deterministically (a hash of seed and conversation id: the same ones on every
   re-run), optionally per stratum, and skips those already scored by this suite version;
4. rebuilds and scores them in batches on all cores; each batch's scores are committed in one
   transaction, so an interrupted run leaves whole batches and the next run resumes;
5. records the run in `eval_runs`, summarises the scores per scenario and metric, and checks
   the gates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import hashlib
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from spanscore.lake import arrow_schema, connect, current_snapshot, retrying
from spanscore.lake.schema import EVAL_RUNS, SCORES

from .suite import Gate, LoadedSuite, load_suite
from .trajectory import Trajectory, span_rows, trajectories_from_rows

UTC = dt.UTC


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
    batch_size: int = 500
    query_conversations: int = 20_000  # conversations per sorted query (bounds its memory)
    gates: Sequence[Gate] = ()  # on top of the suite's
    now: dt.datetime | None = None  # for tests: the run's notion of now


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
        shown = "n/a" if self.measured is None else f"{self.measured:.3f}"
        return f"{scope}: {what} {shown} (needs >= {target})"


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

    @property
    def gates_passed(self) -> bool:
        return all(g.passed for g in self.gates)


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
    KeyboardInterrupt; scores committed before it are kept and a re-run resumes."""
    options = options or RunOptions()
    started = time.monotonic()
    now = _now(options)
    con = connect(lake)
    try:
        return _run(con, str(lake), suite, options, now, started, progress)
    finally:
        con.close()


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
    if options.until is not None:
        until = min(until, options.until)
    since = options.since
    if since is None:
        since = _previous_window_end(con, suite)
    reader = connect(lake, snapshot=snapshot)
    try:
        candidates = _candidates(reader, options, since, until)
    finally:
        reader.close()
    sample = choose(
        candidates, rate=options.sample, limit=options.max_conversations, seed=options.seed
    )
    done = set() if options.rescore else _already_scored(con, suite, sample)
    todo = [c for c in sample if c not in done]
    run_id = uuid.uuid4().hex[:16]
    result = RunResult(
        run_id=run_id,
        status="running",
        window_start=since,
        window_end=until,
        snapshot=snapshot,
        candidates=len(candidates),
        sampled=len(sample),
        skipped=len(sample) - len(todo),
        scored=0,
        score_count=0,
        error_count=0,
        elapsed_s=0.0,
    )
    _insert_run(con, suite, options, result, now)
    timings: dict[str, float] = {}
    try:
        for scores, batch_size in _score_batches(lake, snapshot, suite, todo, options):
            t0 = time.monotonic()
            _write_scores(con, run_id, scores)
            timings["write_s"] = timings.get("write_s", 0.0) + time.monotonic() - t0
            result.scored += batch_size
            result.score_count += scores.num_rows
            result.error_count += scores.num_rows - scores.column("error").null_count
            if progress is not None:
                progress(Progress(result.scored, len(todo), time.monotonic() - started))
    except KeyboardInterrupt:
        result.status = "interrupted"
        result.elapsed_s = time.monotonic() - started
        _finish_run(con, result, timings)
        raise RunInterrupted(result) from None
    except BaseException:
        result.status = "failed"
        result.elapsed_s = time.monotonic() - started
        with contextlib.suppress(Exception):
            _finish_run(con, result, timings)
        raise
    result.summary = summarize(con, suite, sample)
    gates = [*suite.suite.gates, *options.gates]
    result.gates = [check_gate(g, result.summary) for g in gates]
    result.status = "succeeded" if result.gates_passed else "gate_failed"
    result.elapsed_s = time.monotonic() - started
    _finish_run(con, result, timings)
    return result


def _candidates(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
) -> list[tuple[str, str | None]]:
    """(conversation id, stratum) of every conversation whose last span ended in the window."""
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
        f"SELECT conversation_id, {stratum} FROM conversations c "
        f"WHERE {' AND '.join(where)} ORDER BY conversation_id"
    )
    return [
        (str(cid), None if s is None else str(s)) for cid, s in con.execute(sql, params).fetchall()
    ]


def _previous_window_end(con: duckdb.DuckDBPyConnection, suite: LoadedSuite) -> dt.datetime | None:
    row = con.execute(
        "SELECT max(window_end) FROM eval_runs WHERE suite_name = ? "
        "AND status IN ('succeeded', 'gate_failed')",
        [suite.name],
    ).fetchone()
    return row[0] if row else None


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
        }
    )
    retrying(
        lambda: con.execute(
            "UPDATE eval_runs SET status = ?, finished_at = ?, conversation_count = ?, "
            "score_count = ?, error_count = ?, details = ? WHERE run_id = ?",
            [
                result.status,
                dt.datetime.now(UTC),
                result.scored,
                result.score_count,
                result.error_count,
                json.dumps(details, sort_keys=True),
                result.run_id,
            ],
        ),
        what="record the run",
    )


def _append(con: duckdb.DuckDBPyConnection, table_name: str, table: pa.Table) -> None:
    def write() -> None:
        con.register("spanscore_rows", table)
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"INSERT INTO {table_name} SELECT * FROM spanscore_rows")
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
        finally:
            con.unregister("spanscore_rows")

    retrying(write, what=f"write {table_name}")


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
    rows = table.num_rows
    created = pa.array([dt.datetime.now(UTC)] * rows, type=pa.timestamp("us", tz="UTC"))
    full = table.add_column(0, "run_id", pa.array([run_id] * rows, type=pa.string()))
    full = full.append_column("created_at", created)
    _append(con, "scores", full.cast(arrow_schema(SCORES)))


# --- scoring, in this process or in workers --------------------------------------------------


def score_trajectories(suite: LoadedSuite, trajectories: Iterable[Trajectory]) -> list[ScoreTuple]:
    """The `scores` rows (sans run and time) the suite gives each trajectory."""
    rows: list[ScoreTuple] = []
    append = rows.append
    for trajectory in trajectories:
        conversation_id = trajectory.conversation_id
        for scenario_id, metric_name, s in suite.score(trajectory):
            details = s.details
            append(
                (
                    conversation_id,
                    scenario_id,
                    metric_name,
                    s.value,
                    s.label,
                    s.passed,
                    s.threshold,
                    s.explanation,
                    _json(details) if details else None,
                    s.error,
                )
            )
    return rows


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


def _worker_start(document: dict[str, Any], base_dir: str) -> None:
    _WORKER["suite"] = load_suite(document, base_dir=base_dir)
    # A worker allocates many short-lived objects (rows, trajectories, scores) that form no
    # cycles: collect less often, and never rescan what was loaded at start.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _score_chunk(suite: LoadedSuite, rows: pa.Table) -> tuple[pa.Table, list[str]]:
    """Rebuild and score one chunk, one conversation at a time (few objects alive: the
    garbage collector has little to scan)."""
    ids: list[str] = []

    def rebuilt() -> Iterator[Trajectory]:
        for trajectory in trajectories_from_rows(rows, suite.attribute_keys()):
            ids.append(trajectory.conversation_id)
            yield trajectory

    return score_table(score_trajectories(suite, rebuilt())), ids


def _worker_score(rows: pa.Table) -> tuple[pa.Table, list[str]]:
    return _score_chunk(_WORKER["suite"], rows)


def _chunks(reader: pa.RecordBatchReader, size: int) -> Iterator[pa.Table]:
    """The reader's rows (sorted by conversation) cut into tables of `size` whole
    conversations (the last may hold fewer)."""
    carry: pa.Table | None = None
    for batch in reader:
        table = pa.Table.from_batches([batch])
        if carry is not None:
            table = pa.concat_tables([carry, table])
        ids = table.column(0).to_pylist()
        starts = [0] + [i for i in range(1, len(ids)) if ids[i] != ids[i - 1]]
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
) -> Iterator[tuple[pa.Table, int]]:
    """(score rows, conversations) per batch, in completion order. One query at the pinned
    snapshot streams the span rows of every conversation to score; workers rebuild and score
    whole conversations, and need no lake connection."""
    if not todo:
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
                scores, ids = _score_chunk(suite, chunk)
                seen.update(ids)
                yield scores, len(ids)
        else:
            for scores, ids in _in_pool(chunks, suite, workers):
                seen.update(ids)
                yield scores, len(ids)
    finally:
        con.close()
    missing = [_missing(c) for c in todo if c not in seen]
    for i in range(0, len(missing), size):
        yield score_table(missing[i : i + size]), len(missing[i : i + size])


def _all_chunks(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    todo: Sequence[str],
    size: int,
    per_query: int,
) -> Iterator[pa.Table]:
    """Chunks of whole conversations, from one sorted query per `per_query` conversations:
    the sort's memory is bounded by that, not by the window."""
    step = max(size, per_query)
    for start in range(0, len(todo), step):
        reader = span_rows(
            con,
            conversation_ids=todo[start : start + step],
            attributes=suite.attribute_keys(),
            batch_rows=50_000,
        )
        yield from _chunks(reader, size)


def _in_pool(
    chunks: Iterator[pa.Table], suite: LoadedSuite, workers: int
) -> Iterator[tuple[pa.Table, list[str]]]:
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=get_context("spawn"),
        initializer=_worker_start,
        initargs=(suite.document(), str(suite.base_dir)),
    )
    pending: set[Future[tuple[pa.Table, list[str]]]] = set()
    try:
        for chunk in chunks:  # at most two chunks per worker in flight: memory stays bounded
            pending.add(pool.submit(_worker_score, chunk))
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
                        FILTER (WHERE passed IS NOT TRUE OR error IS NOT NULL), [])[1:3]
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
        )
        for r in rows
    ]


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
    # Nothing to measure is not a failure: a quiet night is not a regression.
    return GateResult(gate, measured, measured is None or measured >= target)


def parse_gate(text: str) -> Gate:
    """`--fail-under` syntax: `[SCENARIO/][METRIC.]pass_rate=0.9` or `...mean=0.8`."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected KEY=VALUE, e.g. pass_rate=0.9")
    try:
        threshold = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number") from None
    scope, _, what = key.strip().rpartition(".")
    if what not in ("pass_rate", "mean"):
        raise ValueError(f"{text!r}: expected pass_rate or mean before '='")
    scenario, _, metric = scope.rpartition("/")
    fields: dict[str, Any] = {"scenario": scenario or None, "metric": metric or None}
    fields["min_pass_rate" if what == "pass_rate" else "min_mean"] = threshold
    return Gate(**fields)


def junit_xml(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, run_id: str, path: str | Path
) -> None:
    """The run's scores as JUnit XML: one testsuite per scenario, one testcase per
    conversation and metric (failure: not passed; error: no score could be given)."""
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
    for scenario, element in suites.items():
        tests, failures, errors = counts[scenario]
        element.set("tests", str(tests))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
