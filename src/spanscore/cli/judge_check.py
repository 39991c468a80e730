"""`spanscore judge-check`: agreement of a judged metric with human labels."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .invocation import runnable
from .options import format_option, judge_options, lake_option, option, suite_options
from .summaries import judge_line


@click.command("judge-check")
@lake_option()
@suite_options
@option(
    "--metric",
    envvar="SPANSCORE_METRIC",
    required=True,
    help="Judged metric of the suite to check.",
)
@option(
    "--labels",
    "labels_path",
    envvar="SPANSCORE_LABELS",
    type=click.Path(dir_okay=False),
    help="Human labels: JSON, JSONL or CSV with conversation_id and label (or value). "
    "Without it, the lake's labels of the metric (written in `spanscore ui`): each "
    "conversation's newest.",
)
@judge_options
@option(
    "--min-kappa",
    envvar="SPANSCORE_MIN_KAPPA",
    type=click.FloatRange(-1, 1),
    help="Exit 1 when Cohen's kappa (weighted for a scale) is below this.",
)
@format_option(
    "judge-check", ["text", "json"], "json: one document with the agreement and every verdict."
)
def judge_check_command(
    lake: str,
    suite_path: str,
    allow_outside_metrics: bool,
    metric: str,
    labels_path: str | None,
    judge: dict[str, Any],
    min_kappa: float | None,
    fmt: str,
) -> None:
    """Judge human-labelled conversations with a judged metric and print the agreement.

    Accuracy, Cohen's kappa (weighted, quadratic, for a quantitative scale), the confusion
    matrix and per-label precision and recall: trust a rubric before a gate depends on it.
    Exit status: 0, 1 kappa below --min-kappa, 2 usage, suite or labels error, 3 the lake
    cannot be opened.

    \b
    $ spanscore judge-check --lake ./lake --suite suite.yaml --metric data_privacy \\
        --labels privacy-labels.csv
    $ spanscore judge-check --lake ./lake --suite suite.yaml --metric data_privacy
    """
    from spanscore.evaluation import SuiteError, load_suite
    from spanscore.evaluation.calibration.agreement import LabelsError, load_labels
    from spanscore.evaluation.calibration.judge_check import JudgeCheckError, check_judge
    from spanscore.evaluation.llm.client import JudgeUnavailable

    try:
        suite = load_suite(suite_path, allow_outside_metrics=allow_outside_metrics)
        labels = load_labels(labels_path) if labels_path else _lake_labels(lake, metric)
        result = check_judge(lake, suite, metric, labels, judge=judge)
    except (SuiteError, LabelsError, JudgeCheckError, JudgeUnavailable) as exc:
        click.echo(runnable(f"Error: {exc}"), err=True)
        sys.exit(2)
    stats = result.agreement
    if fmt == "json":
        document = {
            **stats.to_dict(),
            "metric": metric,
            "not_in_lake": result.not_in_lake,
            "judge_errors": result.errors,
            "verdicts": result.verdicts,
            "judge": result.judge,
        }
        click.echo(json.dumps(document, indent=2, sort_keys=True, default=str))
    else:
        click.echo(f"{metric}: judge against {len(labels)} human labels")
        click.echo(stats.render())
        if result.not_in_lake:
            shown = ", ".join(result.not_in_lake[:5])
            click.echo(f"{len(result.not_in_lake)} labelled conversations not in the lake: {shown}")
        for conversation_id, error in sorted(result.errors.items())[:5]:
            click.echo(f"judge error on {conversation_id}: {error}")
        click.echo(judge_line(result.judge))
    kappa = stats.weighted_kappa if stats.weighted_kappa is not None else stats.kappa
    if min_kappa is not None and (kappa is None or kappa < min_kappa):
        click.echo(f"kappa {kappa} is below --min-kappa {min_kappa}", err=True)
        sys.exit(1)


def _lake_labels(lake: str, metric: str) -> list[Any]:
    """The lake's labels of `metric`, as a labels file would give them; none is an error."""
    from spanscore.evaluation.calibration.judge_check import JudgeCheckError
    from spanscore.evaluation.review import lake_labels

    from .options import open_lake_or_fail

    con = open_lake_or_fail(lake, read_only=True)
    try:
        labels, unusable = lake_labels(con, metric)
    finally:
        con.close()
    if not labels:
        said = (
            f" ({unusable} say only pass or fail, or only comment: a judged metric is checked "
            "against a label or a value on its scale)"
            if unusable
            else ""
        )
        raise JudgeCheckError(
            f"the lake has no label of {metric!r}{said}: label its scores in `spanscore ui "
            "--lake ...` or give --labels FILE"
        )
    return labels
