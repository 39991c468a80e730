"""Comparing two evaluation runs: which metrics moved, by how much, whether it is more than
noise, and which conversations changed.

Scores are paired by (conversation, scenario, metric): only conversations both runs scored
count. The change of a metric's mean comes with a 95 % bootstrap interval over those
conversations (resampled with a fixed seed, so the same runs always give the same interval);
a change whose interval excludes 0 is flagged as significant. Below `MIN_PAIRED` paired
conversations no interval is given: a bootstrap over a handful of values (two conversations
that both dropped) excludes 0 without meaning anything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import duckdb

from spanscore.evaluation.runs.store import paired_scores, run_row, runs, score_count

# Fewest paired conversations a metric needs for an interval (and so for "significant").
MIN_PAIRED = 10


@dataclass
class MetricChange:
    scenario_id: str | None
    metric: str
    paired: int
    mean_a: float | None
    mean_b: float | None
    pass_rate_a: float | None
    pass_rate_b: float | None
    delta: float | None
    low: float | None  # 95 % bootstrap interval of the mean change
    high: float | None

    @property
    def significant(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    @property
    def changed(self) -> bool:
        return bool(self.delta) or self.pass_rate_a != self.pass_rate_b


@dataclass
class ConversationChange:
    conversation_id: str
    scenario_id: str | None
    metric: str
    value_a: float | None
    value_b: float | None
    passed_a: bool | None
    passed_b: bool | None

    @property
    def kind(self) -> str:
        if self.passed_a is True and self.passed_b is False:
            return "regressed"
        if self.passed_a is False and self.passed_b is True:
            return "fixed"
        return "changed"


@dataclass
class Comparison:
    run_a: str
    run_b: str
    metrics: list[MetricChange] = field(default_factory=list)
    conversations: list[ConversationChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why there is little or nothing to compare

    @property
    def regressed(self) -> bool:
        """A conversation went from passing to failing, or a metric's mean dropped by more
        than noise (its interval is below 0)."""
        return any(c.kind == "regressed" for c in self.conversations) or any(
            m.significant and m.delta is not None and m.delta < 0 for m in self.metrics
        )


def _bootstrap(deltas: list[float], resamples: int, seed: int) -> tuple[float, float] | None:
    if len(deltas) < MIN_PAIRED:
        return None
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(sum(rng.choices(deltas, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def compare_runs(
    con: duckdb.DuckDBPyConnection,
    run_a: str,
    run_b: str,
    *,
    resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """How run B's scores differ from run A's (see the module docstring)."""
    known = {r.run_id for r in runs(con, run_ids=(run_a, run_b))}
    for run in (run_a, run_b):
        if run not in known:
            raise ValueError(
                f"no evaluation run {run!r} in this lake (`spanscore runs` lists them)"
            )
    notes = [n for n in (_no_scores(con, run) for run in dict.fromkeys((run_a, run_b))) if n]
    rows = paired_scores(con, run_a, run_b)
    result = Comparison(run_a, run_b, notes=notes)
    if not rows and not notes:
        result.notes.append("the two runs scored no conversation in common: nothing to compare")
    groups: dict[tuple[str | None, str], list[ConversationChange]] = {}
    for row in rows:
        pair = ConversationChange(
            conversation_id=row.conversation_id,
            scenario_id=row.scenario_id,
            metric=row.metric,
            value_a=row.value_a,
            value_b=row.value_b,
            passed_a=row.passed_a,
            passed_b=row.passed_b,
        )
        groups.setdefault((pair.scenario_id, pair.metric), []).append(pair)
        value_a, value_b = pair.value_a, pair.value_b
        moved = value_a is not None and value_b is not None and abs(value_a - value_b) > 1e-12
        if pair.passed_a != pair.passed_b or moved:
            result.conversations.append(pair)
    for (scenario, metric), pairs in groups.items():
        values = [
            (p.value_a, p.value_b) for p in pairs if p.value_a is not None and p.value_b is not None
        ]
        judged = [
            (p.passed_a, p.passed_b)
            for p in pairs
            if p.passed_a is not None and p.passed_b is not None
        ]
        deltas = [b - a for a, b in values]
        interval = _bootstrap(deltas, resamples, seed)
        result.metrics.append(
            MetricChange(
                scenario_id=scenario,
                metric=metric,
                paired=len(pairs),
                mean_a=sum(a for a, _ in values) / len(values) if values else None,
                mean_b=sum(b for _, b in values) / len(values) if values else None,
                pass_rate_a=sum(bool(a) for a, _ in judged) / len(judged) if judged else None,
                pass_rate_b=sum(bool(b) for _, b in judged) / len(judged) if judged else None,
                delta=sum(deltas) / len(deltas) if deltas else None,
                low=interval[0] if interval else None,
                high=interval[1] if interval else None,
            )
        )
    small = [m for m in result.metrics if 0 < m.paired < MIN_PAIRED]
    if small:
        which = "1 metric has" if len(small) == 1 else f"{len(small)} metrics have"
        result.notes.append(
            f"{which} fewer than {MIN_PAIRED} paired conversations: no interval, never significant"
        )
    order = {"regressed": 0, "fixed": 1, "changed": 2}
    result.conversations.sort(key=lambda c: (order[c.kind], c.scenario_id or "", c.metric))
    return result


def _no_scores(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """Why a run has no scores (None when it has some)."""
    run = run_row(con, run_id)
    if run is None or score_count(con, run_id):
        return None
    status, details = run.status, run.facts
    if status == "running":
        why = "it is still running"
    elif details.get("empty_because"):
        why = f"no conversation was in its window ({details['empty_because']})"
    elif details.get("skipped"):
        why = (
            f"its {details['skipped']} conversations were already scored by the same suite "
            "version in earlier runs (run with --rescore to score them again)"
        )
    elif not details.get("candidates"):
        why = "no conversation was in its window"
    else:
        why = f"it ended {status} before scoring any conversation"
    return f"run {run_id} has no scores: {why}"
