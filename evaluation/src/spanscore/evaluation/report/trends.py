"""The trend over the suite's runs: each run's pass rate, and the course of every scenario and
every metric of this run over the same runs, each metric's mean on its own scale.

The runs are this one and the suite's completed runs before it (`trend_runs` of them), oldest
first, each with an x label that no other run shares.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import duckdb

from spanscore.evaluation.report.scales import scale_of
from spanscore.evaluation.report.schema import ScaleDoc, TrendDoc, TrendSeriesDoc
from spanscore.evaluation.report.values import finite_or_none, iso, round_to
from spanscore.lake import query

_PICKED = """
    picked AS (
        SELECT p.run_id, p.started_at, p.status FROM eval_runs p, eval_runs r
        WHERE r.run_id = ? AND p.suite_name = r.suite_name
          AND (p.run_id = r.run_id OR (p.started_at <= r.started_at
               AND p.status IN ('succeeded', 'gate_failed')))
        ORDER BY p.started_at DESC LIMIT ?)
"""


def run_labels(starts: Sequence[dt.datetime | None], run_ids: Sequence[str]) -> list[str]:
    """The shortest label of each run's start that tells every run apart: the day, then the
    minute, then the second, then with the run id's start; the year only when they span
    years. A run without a start is its id's start."""
    years = {s.year for s in starts if s is not None}
    day = "%Y-%m-%d" if len(years) > 1 else "%m-%d"
    labels: list[str] = []
    for pattern in (day, f"{day} %H:%M", f"{day} %H:%M:%S"):
        labels = [
            s.astimezone(dt.UTC).strftime(pattern) if s is not None else r[:8]
            for s, r in zip(starts, run_ids, strict=True)
        ]
        if len(set(labels)) == len(labels):
            return labels
    return [
        f"{label} {r[:6]}" if s is not None else label
        for label, s, r in zip(labels, starts, run_ids, strict=True)
    ]


def trend(con: duckdb.DuckDBPyConnection, run_id: str, runs: int) -> list[TrendDoc]:
    """This run and the suite's completed runs before it, oldest first."""
    rows = list(
        query(
            con,
            f"""
        WITH {_PICKED}
        SELECT p.run_id AS run_id, p.started_at AS started_at, p.status AS status,
               count(DISTINCT s.conversation_id) AS conversations,
               avg(s.passed::INTEGER) AS pass_rate
        FROM picked p LEFT JOIN scores s ON s.run_id = p.run_id
        GROUP BY ALL ORDER BY p.started_at, p.run_id
        """,
            [run_id, runs],
        )
    )
    labels = run_labels([r["started_at"] for r in rows], [str(r["run_id"]) for r in rows])
    return [
        {
            "run_id": str(r["run_id"]),
            "started_at": iso(r["started_at"]),
            "label": label,
            "status": r["status"],
            "conversations": int(r["conversations"]),
            "pass_rate": round_to(finite_or_none(r["pass_rate"])),
            "current": r["run_id"] == run_id,
        }
        for r, label in zip(rows, labels, strict=True)
    ]


def trend_series(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    points: Sequence[TrendDoc],
    keys: Sequence[tuple[str | None, str]],
    scales: Mapping[tuple[str | None, str], ScaleDoc],
) -> list[TrendSeriesDoc]:
    """The course of each scenario of this run and of each of its (scenario, metric) `keys`
    over the runs of `points`; a metric's means on its scale in this run (`scales`), widened
    to hold them."""
    at = {p["run_id"]: i for i, p in enumerate(points)}
    wanted = set(keys)
    params = [run_id, len(points)]
    by_metric = list(
        query(
            con,
            f"""
        WITH {_PICKED}
        SELECT s.run_id AS run_id, s.scenario_id AS scenario_id, s.metric AS metric,
               avg(s.passed::INTEGER) AS pass_rate, avg(s.value) AS mean
        FROM scores s JOIN picked p ON s.run_id = p.run_id
        GROUP BY ALL
        """,
            params,
        )
    )
    by_scenario = list(
        query(
            con,
            f"""
        WITH {_PICKED},
        conversations AS (
            SELECT s.run_id, s.scenario_id, s.conversation_id, bool_and(s.passed) AS passed
            FROM scores s JOIN picked p ON s.run_id = p.run_id
            GROUP BY ALL)
        SELECT run_id, scenario_id, avg(passed::INTEGER) AS pass_rate
        FROM conversations GROUP BY ALL
        """,
            params,
        )
    )
    empty: list[float | None] = [None] * len(points)
    rates: dict[tuple[str | None, str | None], list[float | None]] = {}
    means: dict[tuple[str | None, str], list[float | None]] = {}
    for r in by_metric:
        key = (r["scenario_id"], str(r["metric"]))
        i = at.get(str(r["run_id"]))
        if i is None or key not in wanted:
            continue
        rates.setdefault(key, list(empty))[i] = round_to(finite_or_none(r["pass_rate"]))
        means.setdefault(key, list(empty))[i] = round_to(finite_or_none(r["mean"]))
    for r in by_scenario:
        i = at.get(str(r["run_id"]))
        if i is not None:
            rates.setdefault((r["scenario_id"], None), list(empty))[i] = round_to(
                finite_or_none(r["pass_rate"])
            )
    out: list[TrendSeriesDoc] = []
    for scenario in sorted({s for s, _ in keys}, key=lambda s: (s is not None, s or "")):
        out.append(
            {
                "scenario_id": scenario,
                "metric": None,
                "pass_rate": rates.get((scenario, None), list(empty)),
                "mean": list(empty),
                "scale": None,
            }
        )
    for key in keys:
        series = means.get(key, list(empty))
        values = [v for v in series if v is not None]
        declared = [scales[key]] if key in scales else []
        out.append(
            {
                "scenario_id": key[0],
                "metric": key[1],
                "pass_rate": rates.get(key, list(empty)),
                "mean": series,
                "scale": scale_of(values, declared) if values or declared else None,
            }
        )
    return out
