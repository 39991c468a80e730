"""The one module that reads and writes `eval_runs` and `scores`.

A run writes its row in `eval_runs` (opened, finished, abandoned runs closed) and its `scores`,
each batch's exactly once, in one transaction. Everything else (the report, `compare`, the
gates, naming runs on the command line, the window's defaults, the judge's batches) reads them
here, by name: a `RunRow` is one `eval_runs` row, a `ScoreRecord` one `scores` row without the
columns the store adds (run_id, created_at). Both declare one field per column, in the table's
order, and the columns a query selects come from `spanscore.lake.schema` (`EVAL_RUNS`,
`SCORES`), so a column added there and not here fails a test instead of being read by position
into the wrong field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import operator
import os
import socket
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import duckdb
import orjson
import pyarrow as pa

from spanscore.evaluation.runs.options import UTC, RunOptions, installed_version
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.suites.loaded import LoadedSuite, ScoreRow
from spanscore.evaluation.trajectory.scratch import alive
from spanscore.lake import (
    Column,
    append_rows,
    arrow_schema,
    current_snapshot,
    retrying,
    snapshot_exists,
)
from spanscore.lake.schema.tables import EVAL_RUNS, SCORES, quote_identifier

# Runs that scored their whole window (an interrupted or failed run did not).
COMPLETED = ("succeeded", "gate_failed")

# --- the rows --------------------------------------------------------------------------------


@dataclass(slots=True)
class ScoreRecord:
    """One `scores` row as a run produces it: the run adds run_id and created_at. `details` is
    the JSON text stored (None: no details)."""

    conversation_id: str
    scenario_id: str | None
    metric: str
    value: float | None = None
    label: str | None = None
    passed: bool | None = None
    threshold: float | None = None
    explanation: str | None = None
    details: str | None = None
    error: str | None = None


@dataclass(slots=True)
class RunRow:
    """One `eval_runs` row. `sample_spec` and `details` are the JSON text stored; see
    `sample` and `facts` for them parsed."""

    run_id: str
    suite_name: str
    suite_hash: str | None
    window_start: dt.datetime | None
    window_end: dt.datetime | None
    sample_spec: str | None
    spanscore_version: str | None
    host: str | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    status: str
    conversation_count: int | None
    score_count: int | None
    error_count: int | None
    judge_cost_usd: float | None
    details: str | None
    judge_calls: int | None
    judge_cache_hits: int | None
    judge_prompt_tokens: int | None
    judge_cached_tokens: int | None
    judge_completion_tokens: int | None
    simulation_id: str | None = None

    @property
    def facts(self) -> dict[str, Any]:
        """`details` parsed (timings, gates, warnings, judge batches...); {} when unset."""
        return _json_object(self.details)

    @property
    def sample(self) -> dict[str, Any]:
        """`sample_spec` parsed; {} when unset."""
        return _json_object(self.sample_spec)

    @property
    def warnings(self) -> list[str]:
        """What the run measured nothing with (scenarios that selected nothing, metrics that
        errored everywhere...), as recorded when it finished; [] before it finished."""
        return _strings(self.facts.get("warnings"))

    @property
    def failures(self) -> list[str]:
        """What failed the run besides its gates (strict mode, too few conversations...)."""
        return _strings(self.facts.get("failures"))

    @property
    def strict(self) -> bool | None:
        """Whether the run's warnings failed it; None for runs recorded before it was kept."""
        value = self.facts.get("strict")
        return value if isinstance(value, bool) else None


@dataclass(slots=True)
class ScorePair:
    """The scores two runs gave one conversation for one scenario and metric."""

    conversation_id: str
    scenario_id: str | None
    metric: str
    value_a: float | None
    value_b: float | None
    passed_a: bool | None
    passed_b: bool | None


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


# The scores columns a run produces, in the table's order (what `ScoreRecord` declares).
_SCORE_FIELDS = [c for c in arrow_schema(SCORES) if c.name not in ("run_id", "created_at")]
_SCORE_SCHEMA = pa.schema(_SCORE_FIELDS)
_SCORE_COLUMNS = tuple(c for c in SCORES if c.name not in ("run_id", "created_at"))
_score_values = operator.attrgetter(*(f.name for f in _SCORE_FIELDS))


def _select(columns: Iterable[Column], alias: str = "") -> str:
    """The select list of these columns by name (JSON ones read as their text)."""
    out = []
    for c in columns:
        name = quote_identifier(c.name)
        source = f"{alias}.{name}" if alias else name
        out.append(f"{source}::VARCHAR AS {name}" if c.sql_type == "JSON" else source)
    return ", ".join(out)


_RUN_SELECT = _select(EVAL_RUNS)
_SCORE_SELECT = _select(_SCORE_COLUMNS)

_Row = TypeVar("_Row", RunRow, ScoreRecord, ScorePair)


def _rows(cursor: duckdb.DuckDBPyConnection, cls: type[_Row]) -> list[_Row]:
    names = [d[0] for d in cursor.description or ()]
    return [cls(**dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


# --- reading runs ------------------------------------------------------------------------------


def run_row(con: duckdb.DuckDBPyConnection, run_id: str) -> RunRow | None:
    """The run's row (None: no such run)."""
    found = _rows(
        con.execute(f"SELECT {_RUN_SELECT} FROM eval_runs WHERE run_id = ?", [run_id]), RunRow
    )
    return found[0] if found else None


def runs(
    con: duckdb.DuckDBPyConnection,
    *,
    suite: str | None = None,
    suite_hash: str | None = None,
    statuses: Collection[str] | None = None,
    finished: bool = False,
    host: str | None = None,
    prefix: str | None = None,
    run_ids: Collection[str] | None = None,
    limit: int | None = None,
) -> list[RunRow]:
    """The runs that match every filter given, newest first (started_at, then run id).
    `finished`: not still running; `prefix`: the run id starts with it."""
    where: list[str] = []
    params: list[Any] = []
    for condition, value in (
        ("suite_name = ?", suite),
        ("suite_hash = ?", suite_hash),
        ("host = ?", host),
        ("starts_with(run_id, ?)", prefix),
    ):
        if value is not None:
            where.append(condition)
            params.append(value)
    if statuses is not None:
        where.append("list_contains(?, status)")
        params.append(list(statuses))
    if run_ids is not None:
        where.append("list_contains(?, run_id)")
        params.append(list(run_ids))
    if finished:
        where.append("status <> 'running'")
    sql = f"SELECT {_RUN_SELECT} FROM eval_runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started_at DESC, run_id DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return _rows(con.execute(sql, params), RunRow)


def latest_run(con: duckdb.DuckDBPyConnection, *, suite: str | None = None) -> RunRow | None:
    """The newest finished run (of `suite`): a simulation's only when the lake holds no other
    (a simulation scores no production window: it is named by its id when wanted)."""
    found = _rows(
        con.execute(
            f"SELECT {_RUN_SELECT} FROM eval_runs WHERE status <> 'running' "
            "AND (? IS NULL OR suite_name = ?) "
            "ORDER BY simulation_id IS NOT NULL, started_at DESC, run_id DESC LIMIT 1",
            [suite, suite],
        ),
        RunRow,
    )
    return found[0] if found else None


def previous_run(con: duckdb.DuckDBPyConnection, run_id: str) -> RunRow | None:
    """The suite's completed run (`COMPLETED`) that started last before this one, of the same
    kind (a simulation's before a simulation's run, else a production window's)."""
    found = _rows(
        con.execute(
            f"""
            SELECT {_select(EVAL_RUNS, "p")} FROM eval_runs p, eval_runs r
            WHERE r.run_id = ? AND p.suite_name = r.suite_name AND p.run_id <> r.run_id
              AND (p.simulation_id IS NULL) = (r.simulation_id IS NULL)
              AND p.started_at < r.started_at AND list_contains(?, p.status)
            ORDER BY p.started_at DESC, p.run_id DESC LIMIT 1
            """,
            [run_id, list(COMPLETED)],
        ),
        RunRow,
    )
    return found[0] if found else None


# --- reading scores ----------------------------------------------------------------------------


def scores_of_run(con: duckdb.DuckDBPyConnection, run_id: str) -> list[ScoreRecord]:
    """The run's scores, by conversation, scenario (suite metrics first) and metric."""
    return _rows(
        con.execute(
            f"SELECT {_SCORE_SELECT} FROM scores WHERE run_id = ? "
            "ORDER BY conversation_id, scenario_id NULLS FIRST, metric",
            [run_id],
        ),
        ScoreRecord,
    )


def timed_scores_of_run(
    con: duckdb.DuckDBPyConnection, run_id: str, conversation_ids: Collection[str] | None = None
) -> list[tuple[ScoreRecord, dt.datetime]]:
    """The run's scores (of these conversations only, if given) with the time each was
    committed, by commit, conversation, scenario (suite metrics first) and metric."""
    sql = f"SELECT {_SCORE_SELECT}, created_at AS spanscore_created FROM scores WHERE run_id = ?"
    params: list[Any] = [run_id]
    if conversation_ids is not None:
        sql += " AND list_contains(?, conversation_id)"
        params.append(list(conversation_ids))
    cursor = con.execute(
        sql + " ORDER BY created_at, conversation_id, scenario_id NULLS FIRST, metric", params
    )
    names = [d[0] for d in cursor.description or ()][:-1]
    return [
        (ScoreRecord(**dict(zip(names, row[:-1], strict=True))), row[-1])
        for row in cursor.fetchall()
    ]


def set_window_end(con: duckdb.DuckDBPyConnection, run_id: str, end: dt.datetime) -> None:
    """Move the end of an open run's window (a follower's period scored up to `end`)."""
    retrying(
        partial(con.execute, "UPDATE eval_runs SET window_end = ? WHERE run_id = ?", [end, run_id]),
        con=con,
        what="record the run's window",
    )


def score_count(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """How many scores the run wrote."""
    found = con.execute("SELECT count(*) AS n FROM scores WHERE run_id = ?", [run_id]).fetchone()
    return int(found[0]) if found else 0


def paired_scores(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> list[ScorePair]:
    """The scores both runs gave the same conversation, scenario and metric, by scenario
    (suite metrics first), metric and conversation."""
    return _rows(
        con.execute(
            """
            SELECT a.conversation_id AS conversation_id, a.scenario_id AS scenario_id,
                   a.metric AS metric, a.value AS value_a, b.value AS value_b,
                   a.passed AS passed_a, b.passed AS passed_b
            FROM scores a JOIN scores b
              ON a.conversation_id = b.conversation_id AND a.metric = b.metric
             AND a.scenario_id IS NOT DISTINCT FROM b.scenario_id
            WHERE a.run_id = ? AND b.run_id = ?
            ORDER BY a.scenario_id NULLS FIRST, a.metric, a.conversation_id
            """,
            [run_a, run_b],
        ),
        ScorePair,
    )


def scored_conversations(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, among: Sequence[str]
) -> set[str]:
    """Which of these conversations a run of this suite version has scored."""
    if not among:
        return set()
    con.register("spanscore_sample", pa.table({"conversation_id": list(among)}))
    try:
        rows = con.execute(
            "SELECT DISTINCT s.conversation_id AS conversation_id FROM scores s "
            "JOIN eval_runs r USING (run_id) "
            "WHERE r.suite_name = ? AND r.suite_hash = ? "
            "AND s.conversation_id IN (SELECT conversation_id FROM spanscore_sample)",
            [suite.name, suite.content_hash],
        ).fetchall()
    finally:
        con.unregister("spanscore_sample")
    return {conversation_id for (conversation_id,) in rows}


# --- writing runs ------------------------------------------------------------------------------


def close_abandoned_runs(con: duckdb.DuckDBPyConnection, suite: LoadedSuite) -> None:
    """Runs of this suite left `running` by a process of this host that no longer exists
    (killed) are marked `interrupted`."""
    for run in runs(con, suite=suite.name, statuses=("running",), host=socket.gethostname()):
        pid = run.facts.get("pid")
        if isinstance(pid, int) and not alive(pid):
            sql = "UPDATE eval_runs SET status = 'interrupted' WHERE run_id = ?"
            retrying(partial(con.execute, sql, [run.run_id]), con=con, what="mark an abandoned run")


def forget_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Delete the row of a run that scored nothing (it never happened)."""
    retrying(
        partial(con.execute, "DELETE FROM eval_runs WHERE run_id = ?", [run_id]),
        con=con,
        what="forget the run",
    )


def insert_run(
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
    row = RunRow(
        run_id=result.run_id,
        suite_name=suite.name,
        suite_hash=suite.content_hash,
        window_start=result.window_start,
        window_end=result.window_end,
        sample_spec=json.dumps(sample_spec, sort_keys=True),
        spanscore_version=installed_version(),
        host=socket.gethostname(),
        started_at=now,
        finished_at=None,
        status="running",
        conversation_count=0,
        score_count=0,
        error_count=0,
        judge_cost_usd=0.0,
        details=json.dumps(details, sort_keys=True),
        judge_calls=None,
        judge_cache_hits=None,
        judge_prompt_tokens=None,
        judge_cached_tokens=None,
        judge_completion_tokens=None,
        simulation_id=options.simulation,
    )
    table = pa.Table.from_pylist([dataclasses.asdict(row)], schema=arrow_schema(EVAL_RUNS))
    append_rows(con, "eval_runs", table)
    try:
        result.snapshot = pin_snapshot(con, result.run_id, result.snapshot, recorded=True)
    except BaseException:
        with contextlib.suppress(Exception):  # a row left `running` would pin for a day
            forget_run(con, result.run_id)
        raise


def pin_snapshot(
    con: duckdb.DuckDBPyConnection, run_id: str, snapshot: int, *, recorded: bool = False
) -> int:
    """Record in the run's row that it reads at `snapshot` (`details.snapshot`: maintenance
    then neither expires nor thins it, nor any newer one); `recorded`: the row already names
    it. Returns the snapshot pinned: maintenance thins an embedded lake's snapshots once
    `snapshot_interval_s` old, so one read before the row pinned it may be gone, and the
    current one is pinned instead (the row's older id keeps it from being thinned meanwhile)."""
    if recorded and snapshot_exists(con, snapshot):
        return snapshot
    if not recorded:
        _set_pin(con, run_id, snapshot)
    while not snapshot_exists(con, snapshot):
        snapshot = current_snapshot(con)
        _set_pin(con, run_id, snapshot)
    return snapshot


def _set_pin(con: duckdb.DuckDBPyConnection, run_id: str, snapshot: int) -> None:
    retrying(
        lambda: con.execute(
            "UPDATE eval_runs SET details = json_merge_patch(details, ?::JSON) WHERE run_id = ?",
            [json.dumps({"snapshot": snapshot}), run_id],
        ),
        con=con,
        what="pin the run's snapshot",
    )


def finish_run(
    con: duckdb.DuckDBPyConnection, result: RunResult, timings: dict[str, float]
) -> None:
    details = _facts(con, result.run_id)
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
            "strict": result.strict,
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
        con=con,
        what="record the run",
    )


def score_table(records: Sequence[ScoreRecord]) -> pa.Table:
    """Score records as an Arrow table (the `scores` columns but run_id and created_at), read
    in one pass over the records."""
    rows = list(map(_score_values, records))
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_SCORE_FIELDS)
    return pa.table(
        [pa.array(col, type=f.type) for col, f in zip(columns, _SCORE_FIELDS, strict=True)],
        schema=_SCORE_SCHEMA,
    )


def write_scores(con: duckdb.DuckDBPyConnection, run_id: str, table: pa.Table) -> None:
    if not table.num_rows:
        return
    append_rows(con, "scores", _stamped(run_id, table))


def _stamped(run_id: str, table: pa.Table) -> pa.Table:
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
    full = _stamped(run_id, table)
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

    return retrying(write, con=con, what="write scores")


def score_record(conversation_id: str, row: ScoreRow) -> ScoreRecord:
    """The record of one score a suite gave the conversation."""
    s = row.score
    details = s.details
    # Positional: once per score, the hot path (keywords cost half as much again); the order is
    # the table's, which tests/evaluation/test_run_store.py holds the record and `Score` to.
    return ScoreRecord(
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


def missing_scores(conversation_id: str) -> ScoreRecord:
    """The record of a conversation with no spans at the run's snapshot."""
    return ScoreRecord(
        conversation_id=conversation_id,
        scenario_id=None,
        metric="trajectory",
        error="no spans found for this conversation at the run's snapshot",
    )


def _facts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    run = run_row(con, run_id)
    return run.facts if run is not None else {}


def set_details(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    what: str,
    **fields: Any,
) -> None:
    details = _facts(con, run_id)
    details.update(fields)
    retrying(
        lambda: con.execute(
            "UPDATE eval_runs SET details = ? WHERE run_id = ?",
            [json.dumps(details, sort_keys=True), run_id],
        ),
        con=con,
        what=what,
    )
