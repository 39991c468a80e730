"""What a run writes: its row in `eval_runs` (opened, finished, abandoned runs closed) and its
`scores`, each batch's exactly once, in one transaction."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
from collections.abc import Sequence
from functools import partial
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from spanscore.evaluation.runs.options import UTC, RunOptions, _version
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.suites.loaded import LoadedSuite, ScoreRow
from spanscore.lake import (
    ALIAS,
    arrow_schema,
    retrying,
    side_cursor,
)
from spanscore.lake.schema.tables import EVAL_RUNS, SCORES, quote_identifier


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


def missing_scores(conversation_id: str) -> ScoreTuple:
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
