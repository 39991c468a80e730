"""`spanscore judge-check`: how far a judged metric agrees with human labels.

A team labels a few dozen conversations by hand (`calibration.load_labels`), then runs the
metric's judge on exactly those conversations and reads the agreement (accuracy, Cohen's kappa,
weighted for a quantitative scale, confusion matrix, per-label precision and recall) before it
gates a release on the metric. The judge's answers go to the lake's cache like a run's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spanscore.evaluation.calibration.agreement import Agreement, Category, HumanLabel, agreement
from spanscore.evaluation.judged.rubrics import JudgedRubric
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.runs.options import RunOptions, judge_settings
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.trajectory.load import load_trajectories
from spanscore.lake import connect


class JudgeCheckError(ValueError):
    """The check cannot run (unknown metric, no labelled conversation in the lake...)."""


@dataclass
class JudgeCheck:
    agreement: Agreement
    not_in_lake: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # conversation -> judge error
    verdicts: dict[str, Category | None] = field(default_factory=dict)
    judge: dict[str, Any] = field(default_factory=dict)


def judged_metric_position(suite: LoadedSuite, metric: str) -> tuple[str | None, int]:
    """(scenario, assertion position) of the suite's judged metric named `metric`."""
    names: dict[str, tuple[str | None, int]] = {}
    groups: list[tuple[str | None, list[Any]]] = [(None, list(suite.suite.metrics))]
    groups += [(g.id, list(g.assertions)) for g in suite.suite.groups()]
    for scenario_id, assertions in groups:
        for assertion in assertions:
            position = next(i for i, a in enumerate(suite.assertions) if a is assertion)
            if assertion.may_judge(suite.registry):
                names.setdefault(assertion.metric_name, (scenario_id, position))
    if metric not in names:
        known = ", ".join(sorted(names)) or "none"
        raise JudgeCheckError(
            f"the suite has no judged metric {metric!r} (judged metrics: {known})"
        )
    return names[metric]


def check_judge(
    lake: str | os.PathLike[str],
    suite: LoadedSuite,
    metric: str,
    labels: list[HumanLabel],
    *,
    judge: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> JudgeCheck:
    """Judge the labelled conversations with `metric` and compare with the labels."""
    scenario_id, position = judged_metric_position(suite, metric)
    assertion = suite.assertions[position]
    wanted = {label.conversation_id: label for label in labels}
    con = connect(lake)
    try:
        trajectories = {
            t.conversation_id: t
            for t in load_trajectories(
                con, conversation_ids=sorted(wanted), attributes=suite.attribute_keys()
            )
        }
    finally:
        con.close()
    not_in_lake = sorted(set(wanted) - set(trajectories))
    if not trajectories:
        raise JudgeCheckError(
            f"none of the {len(wanted)} labelled conversations is in the lake "
            f"(e.g. {not_in_lake[0]!r})"
        )
    config = judge_settings(suite, RunOptions(judge=dict(judge or {})))
    verdicts: dict[str, Category | None] = {}
    errors: dict[str, str] = {}
    with JudgeRunner(config, lake=str(lake), run_id="judge-check", environ=environ) as runner:
        for conversation_id, trajectory in sorted(trajectories.items()):
            rows, waiting, requests = suite.evaluate_items(
                trajectory, [(scenario_id, position)], {}
            )
            if waiting:
                from spanscore.evaluation.suites.loaded import Deferred

                rows = suite.finish(Deferred(trajectory, waiting, requests), runner.answer)
            score = rows[0].score
            if score.error is not None:
                errors[conversation_id] = score.error
                verdicts[conversation_id] = None
            elif score.label is not None:
                verdicts[conversation_id] = score.label
            elif score.value is not None:
                value = score.value
                verdicts[conversation_id] = int(value) if value.is_integer() else value
            else:
                verdicts[conversation_id] = None
        totals = {**runner.totals.as_dict(), **runner.limit_info()}
    pairs = [(wanted[c].label, verdicts[c]) for c in sorted(verdicts)]
    order: list[Category] | None = None
    ordinal = False
    if isinstance(assertion, JudgedRubric):
        if assertion.labels is not None:
            order = list(assertion.label_names())
        else:
            low, high = assertion.bounds()
            order, ordinal = list(range(low, high + 1)), True
    human = {p[0] for p in pairs}
    if order is not None and not human <= set(order):
        strange = sorted(map(str, human - set(order)))
        raise JudgeCheckError(f"labels {strange} are not among the metric's {order}")
    result = agreement(pairs, labels=order, ordinal=ordinal)
    return JudgeCheck(result, not_in_lake, errors, verdicts, totals)
