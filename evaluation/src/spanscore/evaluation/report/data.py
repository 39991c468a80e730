"""The report document of one run, read from the lake.

Everything comes from the lake's tables and views (`eval_runs`, `scores`, the spans through the
trajectory builder) and from `compare_runs`: the run header, the summary per scenario and
metric, score distributions, the trend over the suite's previous runs, tool figures, the
conversations (columnar) and, for as many as asked, their trajectories with each score's
verdict placed on the calls it was about.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import duckdb
from pydantic import ValidationError

from spanscore.evaluation.report.breakdown import ToolFailures
from spanscore.evaluation.report.conversations import clip, conversation_detail, first_trace
from spanscore.evaluation.report.scales import declared_scales, scale_of
from spanscore.evaluation.report.schema import (
    FORMAT,
    VERSION,
    BaselineDoc,
    ConversationChangeDoc,
    ConversationDetailDoc,
    ConversationsDoc,
    DistributionDoc,
    GateDoc,
    JudgeDoc,
    MetricChangeDoc,
    ReportDoc,
    RunDoc,
    ScaleDoc,
    SummaryDoc,
    ToolDoc,
    TrendDoc,
    TrendSeriesDoc,
    TrialsDoc,
)
from spanscore.evaluation.report.trends import trend, trend_series
from spanscore.evaluation.report.trials import trials_doc
from spanscore.evaluation.report.values import finite_or_none, iso, json, round_to
from spanscore.evaluation.runs import store
from spanscore.evaluation.runs.compare import compare_runs
from spanscore.evaluation.runs.store import ScoreRecord
from spanscore.evaluation.suites.model import Gate
from spanscore.evaluation.trajectory.load import load_trajectories
from spanscore.evaluation.trajectory.model import ToolCall


class ReportError(ValueError):
    """The report cannot be made (unknown run, ambiguous prefix, bad option)."""


@dataclass
class ReportOptions:
    baseline: str | None = None  # a run id or prefix; None: the suite's previous run
    compare: bool = True  # False: no baseline section
    trace_url: str | None = None  # e.g. https://tracing.example/trace/{trace_id}
    max_trajectories: int = 20_000  # trajectories embedded (failing and regressed first)
    max_value_chars: int = 4_000  # longer arguments, results and details are cut
    trend_runs: int = 30  # previous runs of the suite in the trend plot
    bins: int = 10  # bins of each score distribution


# --- which runs ----------------------------------------------------------------------------------


def resolve_run(con: duckdb.DuckDBPyConnection, spec: str | None = "latest") -> str:
    """A run id from `latest` (the newest finished run, a simulation's only when no other is:
    `store.latest_run`; else the newest), a run id, or a unique prefix of one."""
    if spec is None or spec == "latest":
        newest = store.latest_run(con) or next(iter(store.runs(con, limit=1)), None)
        if newest is None:
            raise ReportError("no evaluation run in this lake yet (run `spanscore evaluate`)")
        return newest.run_id
    ids = [r.run_id for r in store.runs(con, prefix=spec)]
    if spec in ids:
        return spec
    if not ids:
        raise ReportError(f"no evaluation run {spec!r} in this lake (`spanscore runs` lists them)")
    if len(ids) > 1:
        shown = ", ".join(ids[:5])
        raise ReportError(f"{spec!r} is the start of {len(ids)} run ids ({shown}): give more")
    return ids[0]


def previous_run(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The suite's finished run that started last before this one."""
    previous = store.previous_run(con, run_id)
    return None if previous is None else previous.run_id


# --- the header ----------------------------------------------------------------------------------


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif value is None or isinstance(value, str | int | float | bool):
        out[prefix] = value


def _judge(cost: float | None, details: dict[str, Any]) -> JudgeDoc | None:
    figures: dict[str, Any] = {}
    for key, value in details.items():
        if "judge" in str(key).lower():
            _flatten(str(key), value, figures)
    calls = next(
        (
            int(v)
            for k, v in figures.items()
            if k.rsplit(".", 1)[-1] in ("calls", "judge_calls")
            and isinstance(v, int | float)
            and not isinstance(v, bool)
        ),
        None,
    )
    if not figures and not cost:
        return None
    return {"cost_usd": cost, "calls": calls, "figures": figures}


def _gates(details: dict[str, Any]) -> list[GateDoc]:
    out: list[GateDoc] = []
    for entry in details.get("gates") or []:
        if not isinstance(entry, dict):
            continue
        listed = entry.get("gate")
        gate: dict[str, Any] = listed if isinstance(listed, dict) else {}
        rate = gate.get("min_pass_rate", gate.get("min_score_pass_rate"))
        kind: Literal["pass_rate", "mean"] = (
            "mean" if rate is None and "min_mean" in gate else "pass_rate"
        )
        target = rate if kind == "pass_rate" else gate.get("min_mean")
        try:  # worded as `evaluate` words it
            read = Gate.model_validate(gate)
            measure, scope = read.measure[0], read.scope
        except ValidationError:  # a gate this spanscore cannot read: named by its fields
            measure = kind.replace("_", " ")
            scope = "/".join(str(gate[k]) for k in ("scenario", "metric") if gate.get(k))
        out.append(
            {
                "scope": scope or "all scores",
                "kind": kind,
                "measure": measure,
                "target": finite_or_none(target),
                "measured": finite_or_none(entry.get("measured")),
                "passed": bool(entry.get("passed")),
            }
        )
    return out


def _status_reasons(status: str | None, gates: Sequence[GateDoc], failures: list[str]) -> list[str]:
    """Why the run has its status, one reason a line: the gates that failed, then what else
    failed it (the run's recorded failures); nothing for a run that succeeded."""
    if status == "gate_failed":
        reasons = [
            f"gate {g['scope']}: "
            + (
                "measured nothing"
                if g["measured"] is None
                else f"{g['measure']} {g['measured']:.3f} below {g['target']}"
            )
            for g in gates
            if not g["passed"]
        ]
        reasons += failures
        return reasons or ["no failed gate or other failure was recorded for this run"]
    return {
        "interrupted": ["interrupted before it scored its whole window (its scores are kept)"],
        "failed": ["stopped on an error before it finished (its log says which)"],
        "running": ["still running, or its process ended without recording the end"],
    }.get(status or "", failures)


def run_header(con: duckdb.DuckDBPyConnection, run_id: str) -> RunDoc:
    """The run as the report's header gives it: counts, gates, why it has its status."""
    run = store.run_row(con, run_id)
    if run is None:
        raise ReportError(f"no evaluation run {run_id!r} in this lake")
    details = run.facts
    sample = json(run.sample_spec)
    started, finished = run.started_at, run.finished_at
    duration = finite_or_none(details.get("elapsed_s"))
    if duration is None and started is not None and finished is not None:
        duration = (finished - started).total_seconds()

    def count(key: str) -> int | None:
        value = details.get(key)
        return int(value) if isinstance(value, int | float) else None

    gates = _gates(details)

    return {
        "run_id": run.run_id,
        "suite_name": run.suite_name,
        "suite_version": run.suite_hash,
        "status": run.status,
        "window_start": iso(run.window_start),
        "window_end": iso(run.window_end),
        "started_at": iso(started),
        "finished_at": iso(finished),
        "duration_s": round_to(duration, 3),
        "conversations": int(run.conversation_count or 0),
        "scores": int(run.score_count or 0),
        "errors": int(run.error_count or 0),
        "candidates": count("candidates"),
        "sampled": count("sampled"),
        "skipped": count("skipped"),
        "sample": sample if isinstance(sample, dict) else {},
        "judge": _judge(finite_or_none(run.judge_cost_usd), details),
        "gates": gates,
        "strict": run.strict,
        "warnings": run.warnings,
        "failures": run.failures,
        "status_reasons": _status_reasons(run.status, gates, run.failures),
        "spanscore_version": run.spanscore_version,
        "host": run.host,
        "simulation_id": run.simulation_id,
    }


# --- scores ------------------------------------------------------------------------------------


def _key(score: ScoreRecord) -> str:
    return f"{score.scenario_id}/{score.metric}" if score.scenario_id else score.metric


def _failing(score: ScoreRecord) -> bool:
    return score.passed is False or score.error is not None


def _scores(con: duckdb.DuckDBPyConnection, run_id: str) -> list[ScoreRecord]:
    """The run's scores; a value or threshold that is not a finite number reads as None."""
    scores = store.scores_of_run(con, run_id)
    for s in scores:
        s.value, s.threshold = finite_or_none(s.value), finite_or_none(s.threshold)
    return scores


def _summary(
    scores: Sequence[ScoreRecord], declared: dict[tuple[str | None, str], ScaleDoc]
) -> list[SummaryDoc]:
    groups: dict[tuple[str, str], list[ScoreRecord]] = {}
    for s in scores:
        groups.setdefault((s.scenario_id or "", s.metric), []).append(s)
    out: list[SummaryDoc] = []
    for (_, metric), group in sorted(groups.items()):
        judged = [s.passed for s in group if s.passed is not None]
        values = [s.value for s in group if s.value is not None]
        own = declared.get((group[0].scenario_id, metric))
        out.append(
            {
                "scenario_id": group[0].scenario_id,
                "metric": metric,
                "conversations": len({s.conversation_id for s in group}),
                "judged": len(judged),
                "passed": sum(judged),
                "pass_rate": round_to(sum(judged) / len(judged)) if judged else None,
                "mean": round_to(sum(values) / len(values)) if values else None,
                "errors": sum(1 for s in group if s.error is not None),
                "scale": scale_of(values, [own] if own else []) if values else None,
            }
        )
    return out


def _distributions(
    scores: Sequence[ScoreRecord], bins: int, declared: dict[tuple[str | None, str], ScaleDoc]
) -> list[DistributionDoc]:
    by_metric: dict[str, list[float]] = {}
    for s in scores:
        if s.value is not None:
            by_metric.setdefault(s.metric, []).append(s.value)
    out: list[DistributionDoc] = []
    for metric, values in sorted(by_metric.items()):
        scale = scale_of(values, [d for (_, m), d in declared.items() if m == metric])
        low, high = scale["low"], scale["high"]
        counts = [0] * bins
        for v in values:
            counts[min(bins - 1, int((v - low) / (high - low) * bins))] += 1
        out.append(
            {
                "metric": metric,
                "values": len(values),
                "histogram": {"low": low, "high": high, "counts": counts},
            }
        )
    return out


# --- baseline ----------------------------------------------------------------------------------


def _baseline(con: duckdb.DuckDBPyConnection, run_id: str, baseline: str) -> BaselineDoc:
    comparison = compare_runs(con, baseline, run_id)
    metrics: list[MetricChangeDoc] = []
    for m in comparison.metrics:
        direction: Literal["regressed", "improved", "unchanged"] = "unchanged"
        if (
            m.pass_rate_a is not None
            and m.pass_rate_b is not None
            and m.pass_rate_a != m.pass_rate_b
        ):
            direction = "regressed" if m.pass_rate_b < m.pass_rate_a else "improved"
        elif m.delta:
            direction = "regressed" if m.delta < 0 else "improved"
        metrics.append(
            {
                "scenario_id": m.scenario_id,
                "metric": m.metric,
                "paired": m.paired,
                "mean_a": round_to(m.mean_a),
                "mean_b": round_to(m.mean_b),
                "pass_rate_a": round_to(m.pass_rate_a),
                "pass_rate_b": round_to(m.pass_rate_b),
                "delta": round_to(m.delta),
                "low": round_to(m.low),
                "high": round_to(m.high),
                "significant": m.significant,
                "direction": direction,
            }
        )
    order = {"regressed": 0, "improved": 1, "unchanged": 2}
    metrics.sort(key=lambda m: (order[m["direction"]], m["scenario_id"] or "", m["metric"]))
    conversations: list[ConversationChangeDoc] = [
        {
            "conversation_id": c.conversation_id,
            "scenario_id": c.scenario_id,
            "metric": c.metric,
            "value_a": round_to(c.value_a),
            "value_b": round_to(c.value_b),
            "passed_a": c.passed_a,
            "passed_b": c.passed_b,
            "kind": "regressed"
            if c.kind == "regressed"
            else "fixed"
            if c.kind == "fixed"
            else "changed",
        }
        for c in comparison.conversations
    ]
    row = store.run_row(con, baseline)
    return {
        "run_id": baseline,
        "started_at": iso(row.started_at) if row else None,
        "suite_version": row.suite_hash if row else None,
        "paired_conversations": max((m.paired for m in comparison.metrics), default=0),
        "metrics": metrics,
        "conversations": conversations,
    }


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class _ToolFigures:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.latencies: dict[str, list[float]] = {}

    def add(self, calls: Iterable[ToolCall]) -> None:
        for c in calls:
            self.calls[c.name] = self.calls.get(c.name, 0) + 1
            if c.error is not None:
                self.errors[c.name] = self.errors.get(c.name, 0) + 1
            if c.latency_ms is not None:
                self.latencies.setdefault(c.name, []).append(c.latency_ms)

    def docs(self) -> list[ToolDoc]:
        out: list[ToolDoc] = []
        for name, calls in sorted(self.calls.items(), key=lambda kv: (-kv[1], kv[0])):
            latencies = self.latencies.get(name, [])
            errors = self.errors.get(name, 0)
            out.append(
                {
                    "name": name,
                    "calls": calls,
                    "errors": errors,
                    "error_rate": round(errors / calls, 4),
                    "mean_ms": round_to(sum(latencies) / len(latencies), 3) if latencies else None,
                    "p50_ms": round_to(_percentile(latencies, 0.5), 3),
                    "p95_ms": round_to(_percentile(latencies, 0.95), 3),
                }
            )
        return out


def build_report(
    con: duckdb.DuckDBPyConnection, run: str | None = "latest", options: ReportOptions | None = None
) -> ReportDoc:
    """The report document of a run (`latest`, a run id or a unique prefix)."""
    options = options or ReportOptions()
    if options.trace_url is not None and not options.trace_url.startswith(("http://", "https://")):
        raise ReportError("the trace URL template must start with http:// or https://")
    overview = run_overview(con, run, options)
    run_doc, baseline_doc, notes = overview.run, overview.baseline, overview.notes
    scores = overview.scores
    by_conversation: dict[str, list[ScoreRecord]] = {}
    for s in scores:
        by_conversation.setdefault(s.conversation_id, []).append(s)
    ids = list(by_conversation)
    changes: dict[str, Literal["regressed", "fixed", "changed"]] = {}
    if baseline_doc is not None:
        for c in baseline_doc["conversations"]:
            if c["kind"] == "regressed" or c["conversation_id"] not in changes:
                changes[c["conversation_id"]] = c["kind"]
    keys = sorted({_key(s) for s in scores})
    key_index = {k: i for i, k in enumerate(keys)}
    metrics = sorted({s.metric for s in scores})
    labelled = sorted({s.metric for s in scores if s.label is not None and s.value is None})
    columns: ConversationsDoc = {
        "id": ids,
        "scenario": [],
        "result": [],
        "failing": [],
        "agent": [],
        "service": [],
        "start": [],
        "first_message": [],
        "trace_id": [],
        "change": [changes.get(c) for c in ids],
        "keys": keys,
        "metrics": metrics,
        "values": {m: [] for m in metrics},
        "passed": {m: [] for m in metrics},
        "labels": {m: [] for m in labelled},
    }
    for cid in ids:
        mine = by_conversation[cid]
        failing = [key_index[_key(s)] for s in mine if _failing(s)]
        columns["failing"].append(sorted(set(failing)))
        if any(s.passed is False for s in mine):
            columns["result"].append("failed")
        elif any(s.error is not None for s in mine):
            columns["result"].append("error")
        elif any(s.passed is not None for s in mine):
            columns["result"].append("passed")
        else:
            columns["result"].append("scored")
        for m in metrics:
            of_metric = [s for s in mine if s.metric == m]
            values = [s.value for s in of_metric if s.value is not None]
            judged = [s.passed for s in of_metric if s.passed is not None]
            columns["values"][m].append(round_to(min(values)) if values else None)
            columns["passed"][m].append(all(judged) if judged else None)
        for m in labelled:
            named = sorted(
                (s.passed is not False, s.label) for s in mine if s.metric == m and s.label
            )
            columns["labels"][m].append(named[0][1] if named else None)
    # Failing and regressed conversations are embedded first when not all can be.
    priority = sorted(
        range(len(ids)),
        key=lambda i: (
            changes.get(ids[i]) != "regressed",
            columns["result"][i] not in ("failed", "error"),
            i,
        ),
    )
    embedded = set(priority[: max(0, options.max_trajectories)])
    details: list[ConversationDetailDoc | None] = [None] * len(ids)
    meta: dict[str, tuple[Any, ...]] = {}
    tools = _ToolFigures()
    failures = ToolFailures()
    position = {cid: i for i, cid in enumerate(ids)}
    for t in load_trajectories(con, conversation_ids=ids):
        i = position.get(t.conversation_id)
        if i is None:
            continue
        tools.add(t.tool_calls)
        scenario = t.attributes.get("scenario.id")
        meta[t.conversation_id] = (
            str(scenario) if scenario is not None else None,
            t.agent_name,
            t.service_name,
            iso(t.start_time),
            clip(t.first_user_message, 500),
            first_trace(t),
        )
        mine = by_conversation[t.conversation_id]
        if i in embedded:
            details[i] = conversation_detail(t, mine, options.max_value_chars)
        failures.add(t.conversation_id, t.tool_calls, mine, details[i])
    for cid in ids:
        scenario, agent, service, start, message, trace = meta.get(cid, (None,) * 6)
        if scenario is None:
            scenario = (
                ", ".join(sorted({s.scenario_id for s in by_conversation[cid] if s.scenario_id}))
                or None
            )
        columns["scenario"].append(scenario)
        columns["agent"].append(agent)
        columns["service"].append(service)
        columns["start"].append(start)
        columns["first_message"].append(message)
        columns["trace_id"].append(trace)
    for cid in ids:
        if cid not in meta:
            failures.add(cid, None, by_conversation[cid])
    gone = len(ids) - len(meta)
    if gone:
        notes.append(f"{gone} scored conversations have no spans in the lake any more")
    if len(embedded) < len(ids):
        notes.append(
            f"trajectories embedded for {len(embedded)} of {len(ids)} conversations "
            "(failing and regressed first); see the others with `spanscore show`"
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "generated_at": iso(dt.datetime.now(dt.UTC)) or "",
        "trace_url": options.trace_url,
        "notes": notes,
        "run": run_doc,
        "baseline": baseline_doc,
        "summary": overview.summary,
        "distributions": _distributions(scores, options.bins, overview.declared),
        "trend": overview.trend,
        "trend_series": overview.trend_series,
        "tools": tools.docs(),
        "tool_failures": failures.doc(),
        "conversations": columns,
        "trials": overview.trials,
        "details": details,
    }


@dataclass
class RunOverview:
    """A run's header, baseline comparison, summary per scenario and metric, trend and trials:
    the report's top, and the review app's run page."""

    run: RunDoc
    baseline: BaselineDoc | None
    notes: list[str]
    scores: list[ScoreRecord]
    declared: dict[tuple[str | None, str], ScaleDoc]
    summary: list[SummaryDoc]
    trend: list[TrendDoc]
    trend_series: list[TrendSeriesDoc]
    trials: TrialsDoc | None


def run_overview(
    con: duckdb.DuckDBPyConnection, run: str | None = "latest", options: ReportOptions | None = None
) -> RunOverview:
    """The overview of a run (`latest`, a run id or a unique prefix)."""
    options = options or ReportOptions()
    run_id = resolve_run(con, run)
    run_doc = run_header(con, run_id)
    notes: list[str] = []
    baseline_doc: BaselineDoc | None = None
    if options.compare:
        baseline = (
            resolve_run(con, options.baseline)
            if options.baseline is not None
            else previous_run(con, run_id)
        )
        if baseline is None:
            notes.append("no earlier finished run of this suite to compare with")
        elif baseline == run_id:
            raise ReportError("the baseline is the run itself: give another --baseline")
        else:
            baseline_doc = _baseline(con, run_id, baseline)
    scores = _scores(con, run_id)
    declared = declared_scales(scores)
    summary = _summary(scores, declared)
    scales = {(r["scenario_id"], r["metric"]): r["scale"] for r in summary if r["scale"]}
    series_keys = [(r["scenario_id"], r["metric"]) for r in summary]
    points = trend(con, run_id, options.trend_runs)
    return RunOverview(
        run=run_doc,
        baseline=baseline_doc,
        notes=notes,
        scores=scores,
        declared=declared,
        summary=summary,
        trend=points,
        trend_series=trend_series(con, run_id, points, series_keys, scales),
        trials=trials_doc(con, run_id, run_doc["simulation_id"]),
    )
