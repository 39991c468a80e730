"""`spanscore report`: one self-contained HTML page (or JSON) for an evaluation run, or a short
Markdown summary of it for CI (a job summary, a pull request comment)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .options import (
    InputError,
    format_option,
    from_environment,
    lake_option,
    open_lake_or_fail,
    option,
)

F = TypeVar("F", bound=Callable[..., Any])


def trace_url_option() -> Callable[[F], F]:
    return option(
        "--trace-url",
        envvar="SPANSCORE_TRACE_URL",
        metavar="TEMPLATE",
        help="Link to each trace in your tracing UI, e.g. "
        "https://tracing.example/trace/{trace_id} ({span_id} and {conversation_id} work too).",
    )


def ui_url_option() -> Callable[[F], F]:
    return option(
        "--ui-url",
        envvar="SPANSCORE_UI_URL",
        metavar="URL",
        help="With --format markdown: link each conversation to the review app (`spanscore ui`) "
        "at URL/conversations/ID.",
    )


def _options(baseline: str | None, trace_url: str | None, max_trajectories: int) -> Any:
    from spanscore.evaluation.report import ReportOptions

    return ReportOptions(
        baseline=None if baseline in (None, "previous", "none") else baseline,
        compare=baseline != "none",
        trace_url=trace_url,
        max_trajectories=max_trajectories,
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
    from spanscore.evaluation.report import ReportError, write_report
    from spanscore.evaluation.runs.result import plural

    options = _options(baseline, trace_url, max_trajectories)
    try:
        written = write_report(lake, output, run, options, "json" if fmt == "json" else "html")
    except ReportError as exc:  # a lake that cannot be opened exits 3 (`_Main.invoke`)
        raise click.ClickException(str(exc)) from exc
    size = written.bytes / 1e6
    click.echo(
        f"report of run {written.run_id} written to {written.path} "
        f"({plural(written.conversations, 'conversation')}, {size:.1f} MB)",
        err=err,
    )


def write_summary(
    lake: str,
    output: str | None,
    run: str,
    *,
    baseline: str | None,
    trace_url: str | None,
    ui_url: str | None,
    max_trajectories: int,
) -> None:
    """The Markdown summary, on stdout or into `output`."""
    from spanscore.evaluation.report import ReportError, build_report
    from spanscore.evaluation.report.markdown import check_ui_url, render_markdown

    try:
        if ui_url is not None:
            check_ui_url(ui_url)  # before the work, not after it
        con = open_lake_or_fail(lake, read_only=True)
        try:
            doc = build_report(con, run, _options(baseline, trace_url, max_trajectories))
        finally:
            con.close()
        summary = render_markdown(doc, ui_url=ui_url)
    except ReportError as exc:
        raise InputError(str(exc)) from exc
    if output is None:
        click.echo(summary, nl=False)
        return
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = summary.encode("utf-8")
    target.write_bytes(data)
    click.echo(
        f"summary of run {doc['run']['run_id']} written to {target} ({len(data) / 1e3:.1f} KB)"
    )


@click.command("report")
@lake_option()
@click.argument("run", default="latest")
@option(
    "-o",
    "--output",
    envvar="SPANSCORE_REPORT_OUTPUT",
    type=click.Path(dir_okay=False),
    help="Where to write it (default: report.html, report.json with --format json, stdout "
    "with --format markdown).",
)
@format_option(
    "report",
    ["html", "json", "markdown"],
    "A self-contained page, the same content as JSON (schema: docs/report.schema.json), or "
    "a short summary for CI (status, gates, regressions, the worst conversations, pass^k), "
    "escaped and under 60 KB.",
)
@option(
    "--baseline",
    envvar="SPANSCORE_BASELINE",
    metavar="RUN|none",
    help="Run to compare with (id or prefix; default: the suite's previous run).",
)
@trace_url_option()
@ui_url_option()
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
    ui_url: str | None,
    max_trajectories: int,
) -> None:
    """Write a report of an evaluation run: header, gates, plots, changes since the baseline,
    the conversations and their trajectories with each verdict next to its tool call.

    RUN is a run id, a unique prefix of one, or `latest`. The HTML page needs no network.
    `--format markdown` prints a short summary for CI instead (a job summary, a pull request
    comment): status and why, gates, the metrics that regressed with their intervals, the five
    worst conversations (linked with --ui-url), pass^k of a simulation; every string from the
    lake escaped, under 60 KB.

    \b
    $ spanscore report --lake ./lake -o report.html
    $ spanscore report 3f2a9c0d --lake ./lake --baseline 9e8d7c6b --format json -o report.json
    $ spanscore report latest --lake ./lake --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    if fmt == "markdown":
        write_summary(
            lake,
            output,
            run,
            baseline=baseline,
            trace_url=trace_url,
            ui_url=ui_url,
            max_trajectories=max_trajectories,
        )
        return
    if ui_url is not None and not from_environment("ui_url"):
        raise InputError("--ui-url is for --format markdown (the HTML report links within itself)")
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
