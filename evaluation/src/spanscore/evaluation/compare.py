"""Comparing two evaluation runs: which metrics moved, by how much, whether it is more than
noise, and which conversations changed.

Scores are paired by (conversation, scenario, metric): only conversations both runs scored
count. The change of a metric's mean comes with a 95 % bootstrap interval over those
conversations (resampled with a fixed seed, so the same runs always give the same interval);
a change whose interval excludes 0 is flagged as significant.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import duckdb


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


def _bootstrap(deltas: list[float], resamples: int, seed: int) -> tuple[float, float] | None:
    if len(deltas) < 2:
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
    known = {
        r[0]
        for r in con.execute(
            "SELECT run_id FROM eval_runs WHERE run_id IN (?, ?)", [run_a, run_b]
        ).fetchall()
    }
    for run in (run_a, run_b):
        if run not in known:
            raise ValueError(
                f"no evaluation run {run!r} in this lake (see: SELECT * FROM eval_runs)"
            )
    rows = con.execute(
        """
        SELECT a.conversation_id, a.scenario_id, a.metric, a.value, b.value, a.passed, b.passed
        FROM scores a JOIN scores b
          ON a.conversation_id = b.conversation_id AND a.metric = b.metric
         AND a.scenario_id IS NOT DISTINCT FROM b.scenario_id
        WHERE a.run_id = ? AND b.run_id = ?
        ORDER BY a.scenario_id NULLS FIRST, a.metric, a.conversation_id
        """,
        [run_a, run_b],
    ).fetchall()
    result = Comparison(run_a, run_b)
    groups: dict[tuple[str | None, str], list[ConversationChange]] = {}
    for conversation, scenario, metric, value_a, value_b, passed_a, passed_b in rows:
        pair = ConversationChange(
            conversation, scenario, metric, value_a, value_b, passed_a, passed_b
        )
        groups.setdefault((scenario, metric), []).append(pair)
        moved = value_a is not None and value_b is not None and abs(value_a - value_b) > 1e-12
        if passed_a != passed_b or moved:
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
    order = {"regressed": 0, "fixed": 1, "changed": 2}
    result.conversations.sort(key=lambda c: (order[c.kind], c.scenario_id or "", c.metric))
    return result
