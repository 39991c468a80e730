"""`spanscore report`: one self-contained HTML page (or JSON) for an evaluation run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .options import format_option, lake_option, option

F = TypeVar("F", bound=Callable[..., Any])


def trace_url_option() -> Callable[[F], F]:
    return option(
        "--trace-url",
        envvar="SPANSCORE_TRACE_URL",
        metavar="TEMPLATE",
        help="Link to each trace in your tracing UI, e.g. "
        "https://tracing.example/trace/{trace_id} ({span_id} and {conversation_id} work too).",
    )


def write_report_file(
    lake: str,
    output: str,
    run: str | None,
    *,
    fmt: str = "html",
    baseline: str | None = None,
    trace_url: str | None = None,
    max_trajectories: int = 20_000,
    err: bool = False,
) -> None:
    """Write the report and say where (shared by `report` and `evaluate --report`): on stderr
    with `err`, when stdout carries a JSON document."""
    from spanscore.evaluation.report import ReportError, ReportOptions, write_report
    from spanscore.evaluation.runs.result import plural
    from spanscore.lake import LakeError

    options = ReportOptions(
        baseline=None if baseline in (None, "previous", "none") else baseline,
        compare=baseline != "none",
        trace_url=trace_url,
        max_trajectories=max_trajectories,
    )
    try:
        written = write_report(lake, output, run, options, "json" if fmt == "json" else "html")
    except (ReportError, LakeError) as exc:
        raise click.ClickException(str(exc)) from exc
    size = written.bytes / 1e6
    click.echo(
        f"report of run {written.run_id} written to {written.path} "
        f"({plural(written.conversations, 'conversation')}, {size:.1f} MB)",
        err=err,
    )


@click.command("report")
@lake_option()
@click.argument("run", default="latest")
@option(
    "-o",
    "--output",
    envvar="SPANSCORE_REPORT_OUTPUT",
    type=click.Path(dir_okay=False),
    help="Where to write it (default: report.html, or report.json with --format json).",
)
@format_option(
    "report",
    ["html", "json"],
    "A self-contained page, or the same content as JSON (schema: docs/report.schema.json).",
)
@option(
    "--baseline",
    envvar="SPANSCORE_BASELINE",
    metavar="RUN|none",
    help="Run to compare with (id or prefix; default: the suite's previous run).",
)
@trace_url_option()
@option(
    "--max-trajectories",
    envvar="SPANSCORE_MAX_TRAJECTORIES",
    type=click.IntRange(min=0),
    default=20_000,
    show_default=True,
    help="Trajectories embedded (failing and regressed first); the rest are listed only.",
)
def report_command(
    lake: str,
    run: str,
    output: str | None,
    fmt: str,
    baseline: str | None,
    trace_url: str | None,
    max_trajectories: int,
) -> None:
    """Write a report of an evaluation run: header, gates, plots, changes since the baseline,
    the conversations and their trajectories with each verdict next to its tool call.

    RUN is a run id, a unique prefix of one, or `latest`. The HTML page needs no network.

    \b
    $ spanscore report --lake ./lake -o report.html
    $ spanscore report 3f2a9c0d --lake ./lake --baseline 9e8d7c6b --format json -o report.json
    """
    target = output or str(Path("report.json" if fmt == "json" else "report.html"))
    write_report_file(
        lake,
        target,
        run,
        fmt=fmt,
        baseline=baseline,
        trace_url=trace_url,
        max_trajectories=max_trajectories,
    )
