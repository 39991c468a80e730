"""`spanscore compare`: how run B's scores differ from run A's."""

from __future__ import annotations

import json
import sys

import click

from .options import format_option, lake_option, option
from .summaries import Echo, figure


@click.command("compare")
@lake_option()
@click.argument("run_a")
@click.argument("run_b")
@option(
    "--limit",
    envvar="SPANSCORE_COMPARE_LIMIT",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Conversations to list.",
)
@option(
    "--all-metrics",
    envvar="SPANSCORE_ALL_METRICS",
    is_flag=True,
    help="List unchanged metrics too.",
)
@option(
    "--fail-on-regression",
    envvar="SPANSCORE_FAIL_ON_REGRESSION",
    is_flag=True,
    help="Exit 1 when a conversation went from pass to fail, or a metric's mean dropped "
    "significantly.",
)
@format_option(
    "compare", ["text", "json"], "json: one document with every metric and changed conversation."
)
def compare_command(
    lake: str,
    run_a: str,
    run_b: str,
    limit: int,
    all_metrics: bool,
    fail_on_regression: bool,
    fmt: str,
) -> None:
    """Show the metrics and conversations whose scores changed from RUN_A to RUN_B.

    A run is its id, a unique prefix of it, `latest` or `previous`. A metric's change comes
    with a 95 % bootstrap interval over the conversations both runs scored (from 10 of them);
    `*` marks a change whose interval excludes 0. Exit status: 0, 1 a regression with
    --fail-on-regression, 2 usage error or unknown run, 3 the lake cannot be opened.

    \b
    $ spanscore compare --lake ./lake previous latest --fail-on-regression
    $ spanscore compare --lake ./lake 3f2a9c0d 9e8d7c6b --format json
    """
    from dataclasses import asdict

    from spanscore.evaluation.runs.compare import compare_runs
    from spanscore.evaluation.runs.run_ids import resolve_run

    from .options import open_lake_or_fail
    from .query import write_rows

    con = open_lake_or_fail(lake, read_only=True)
    try:
        run_a, run_b = resolve_run(con, run_a), resolve_run(con, run_b)
        comparison = compare_runs(con, run_a, run_b)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()
    failed = fail_on_regression and comparison.regressed
    if fmt == "json":
        document = {
            "run_a": run_a,
            "run_b": run_b,
            "regressed": comparison.regressed,
            "notes": comparison.notes,
            "metrics": [
                {**asdict(m), "significant": m.significant, "changed": m.changed}
                for m in comparison.metrics
            ],
            "conversations": [{**asdict(c), "kind": c.kind} for c in comparison.conversations],
        }
        click.echo(json.dumps(document, indent=2, default=str))
        sys.exit(1 if failed else 0)
    shown = [m for m in comparison.metrics if all_metrics or m.changed]
    changed = sum(1 for m in comparison.metrics if m.changed)
    click.echo(f"{changed} of {len(comparison.metrics)} metrics changed from {run_a} to {run_b}")
    for note in comparison.notes:
        click.echo(f"note: {note}")
    if shown:
        rows = (
            {
                "scenario": m.scenario_id or "(all)",
                "metric": m.metric,
                "paired": m.paired,
                "mean_a": figure(m.mean_a),
                "mean_b": figure(m.mean_b),
                "change": figure(m.delta, "{:+.3f}") + (" *" if m.significant else ""),
                "95% interval": "-"
                if m.low is None or m.high is None
                else f"[{m.low:+.3f}, {m.high:+.3f}]",
                "pass_a": figure(m.pass_rate_a, "{:.1%}"),
                "pass_b": figure(m.pass_rate_b, "{:.1%}"),
            }
            for m in shown
        )
        names = [
            "scenario",
            "metric",
            "paired",
            "mean_a",
            "mean_b",
            "change",
            "95% interval",
            "pass_a",
            "pass_b",
        ]
        out = Echo(click.echo)
        write_rows(iter(rows), names, "table", out)
        out.flush()
    changes = comparison.conversations
    if changes:
        click.echo(
            f"\n{len(changes)} conversation scores changed (showing {min(limit, len(changes))}):"
        )
        for c in changes[:limit]:
            click.echo(
                f"  {c.kind:<9} {c.conversation_id}  {c.scenario_id or '(all)'}/{c.metric}  "
                f"{figure(c.value_a)} -> {figure(c.value_b)}"
            )
    if failed:
        click.echo(f"regression from {run_a} to {run_b} (--fail-on-regression)", err=True)
        sys.exit(1)
