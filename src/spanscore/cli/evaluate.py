"""`spanscore evaluate`: score a window of conversations with a suite (the nightly job)."""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from typing import Any

import click

from .options import lake_option

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `10m`, `24h`, `7d`, `2w` (or a plain number of seconds)."""
    found = _RELATIVE.match(text)
    if found:
        return float(found.group(1)) * _UNITS[found.group(2)]
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected a duration like 90s, 10m, 24h or 7d"
        ) from None


def parse_when(text: str, now: dt.datetime) -> dt.datetime:
    """An ISO 8601 date or time (UTC unless it says otherwise), or a duration ago (`24h`)."""
    if _RELATIVE.match(text):
        return now - dt.timedelta(seconds=parse_duration(text))
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected an ISO 8601 time (2026-11-20T00:00:00Z) or a duration ago (24h)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


class _Bar:
    """One stderr line: conversations scored, rate, ETA (only on a terminal, else silent)."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, progress: Any) -> None:
        if not self.enabled or (
            time.monotonic() - self.last < 0.2 and progress.done < progress.total
        ):
            return
        self.last = time.monotonic()
        width = 30
        filled = int(width * progress.done / progress.total) if progress.total else width
        eta = f"{progress.eta_s:.0f}s" if progress.eta_s is not None else "?"
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.total} "
            f"conversations  {progress.rate:.0f}/s  ETA {eta}   "
        )
        if progress.done >= progress.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt(value: float | None, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def print_summary(result: Any, echo: Any = click.echo) -> None:
    """The run's summary table and gate results (also printed by the demo)."""
    from .query import write_rows

    start = _when(result.window_start) if result.window_start else "the beginning"
    window = f"[{start}, {_when(result.window_end)})"
    echo(f"run {result.run_id}: {result.status}  window {window}  snapshot {result.snapshot}")
    echo(
        f"{result.candidates} conversations in the window, {result.sampled} sampled, "
        f"{result.skipped} already scored, {result.scored} scored "
        f"({result.score_count} scores, {result.error_count} errors) in {result.elapsed_s:.1f} s"
    )
    if result.summary:
        rows = (
            {
                "scenario": r.scenario_id or "(all)",
                "metric": r.metric,
                "conversations": r.conversations,
                "pass_rate": _fmt(r.pass_rate, "{:.1%}"),
                "mean": _fmt(r.mean),
                "errors": r.errors,
                "worst": ", ".join(r.worst),
            }
            for r in result.summary
        )
        names = ["scenario", "metric", "conversations", "pass_rate", "mean", "errors", "worst"]
        out = _Echo(echo)
        write_rows(iter(rows), names, "table", out)
        out.flush()
    for gate in result.gates:
        echo(f"gate {'passed' if gate.passed else 'FAILED'}: {gate.describe()}")


class _Echo:
    """A file-like object over `echo` (which adds the newlines itself)."""

    def __init__(self, echo: Any) -> None:
        self.echo = echo
        self.buffer = ""

    def write(self, text: str) -> None:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            self.echo(line)

    def flush(self) -> None:
        if self.buffer:
            self.echo(self.buffer)
            self.buffer = ""


@click.command("evaluate")
@lake_option()
@click.option(
    "--suite",
    "suite_path",
    required=True,
    envvar="SPANSCORE_SUITE",
    type=click.Path(dir_okay=False),
    help="Suite file (YAML or JSON).",
)
@click.option(
    "--since",
    help="Window start: ISO time or a duration ago (24h). "
    "Default: the end of the previous successful run of this suite.",
)
@click.option("--until", help="Window end: ISO time or a duration ago. Default: now - settle.")
@click.option("--last", help="Shorthand for --since DURATION (e.g. --last 24h).")
@click.option(
    "--sample",
    type=click.FloatRange(0, 1, min_open=True),
    help="Fraction of the conversations to score (deterministic by id and seed).",
)
@click.option(
    "--max-conversations",
    type=click.IntRange(min=1),
    help="At most this many conversations (the lowest hashes).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option(
    "--stratify-by",
    metavar="FIELD",
    help="Sample each agent_name / service_name / span attribute value alike.",
)
@click.option("--service", "services", multiple=True, help="Only this service (repeatable).")
@click.option("--agent", "agents", multiple=True, help="Only this agent (repeatable).")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    help="Only conversations with this scenario.id (repeatable).",
)
@click.option(
    "--rescore",
    is_flag=True,
    help="Score conversations already scored by this suite version again.",
)
@click.option(
    "--settle",
    default="10m",
    show_default=True,
    help="Leave conversations whose last span is younger than this for the next run.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Scoring processes (0: one per CPU).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Conversations per committed batch.",
)
@click.option(
    "--fail-under",
    "fail_under",
    multiple=True,
    metavar="[SCENARIO/][METRIC.]KEY=X",
    help="Gate, e.g. pass_rate=0.9 or tool_calls.mean=0.8 (repeatable).",
)
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
def evaluate_command(
    lake: str,
    suite_path: str,
    since: str | None,
    until: str | None,
    last: str | None,
    sample: float | None,
    max_conversations: int | None,
    seed: int,
    stratify_by: str | None,
    services: tuple[str, ...],
    agents: tuple[str, ...],
    scenarios: tuple[str, ...],
    rescore: bool,
    settle: str,
    workers: int,
    batch_size: int,
    fail_under: tuple[str, ...],
    junit: str | None,
) -> None:
    """Score the conversations of a time window with a suite; store the scores in the lake.

    Exit status: 0 every gate passed, 1 a gate failed, 2 usage or suite error,
    130 interrupted (committed batches are kept; run again to resume).

    \b
    $ spanscore evaluate --lake ./lake --suite suite.yaml --last 24h --sample 0.1
    """
    from spanscore.evaluation import SuiteError, load_suite
    from spanscore.evaluation.run import RunInterrupted, RunOptions, evaluate, junit_xml, parse_gate
    from spanscore.lake import LakeError, connect

    now = dt.datetime.now(dt.UTC)
    try:
        suite = load_suite(suite_path)
    except SuiteError as exc:
        click.echo(f"Error: the suite cannot be used:\n{exc}", err=True)
        sys.exit(2)
    if last and since:
        raise click.UsageError("give --last or --since, not both")
    try:
        gates = [parse_gate(g) for g in fail_under]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fail-under") from None
    start = last or since
    options = RunOptions(
        since=parse_when(start, now) if start else None,
        until=parse_when(until, now) if until else None,
        sample=sample,
        max_conversations=max_conversations,
        seed=seed,
        stratify_by=stratify_by,
        services=services,
        agents=agents,
        scenarios=scenarios,
        rescore=rescore,
        settle_s=parse_duration(settle),
        workers=workers,
        batch_size=batch_size,
        gates=gates,
        now=now,
    )
    try:
        result = evaluate(lake, suite, options, progress=_Bar())
    except RunInterrupted as exc:
        click.echo(
            f"\ninterrupted: run {exc.result.run_id} scored {exc.result.scored} conversations "
            "(committed); run the same command again to resume",
            err=True,
        )
        sys.exit(130)
    except LakeError as exc:
        raise click.ClickException(str(exc)) from exc
    print_summary(result)
    if junit:
        con = connect(lake, read_only=True)
        try:
            junit_xml(con, suite, result.run_id, junit)
        finally:
            con.close()
        click.echo(f"JUnit XML written to {junit}")
    sys.exit(0 if result.gates_passed else 1)


@click.command("compare")
@lake_option()
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Conversations to list.",
)
@click.option("--all-metrics", is_flag=True, help="List unchanged metrics too.")
def compare_command(lake: str, run_a: str, run_b: str, limit: int, all_metrics: bool) -> None:
    """Show the metrics and conversations whose scores changed from RUN_A to RUN_B.

    A metric's change comes with a 95 % bootstrap interval over the conversations both runs
    scored; `*` marks a change whose interval excludes 0.

    \b
    $ spanscore compare --lake ./lake 3f2a9c0d1e2b4a6f 9e8d7c6b5a4f3e2d
    """
    from spanscore.evaluation.compare import compare_runs

    from .options import open_lake_or_fail
    from .query import write_rows

    con = open_lake_or_fail(lake)
    try:
        comparison = compare_runs(con, run_a, run_b)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()
    shown = [m for m in comparison.metrics if all_metrics or m.changed]
    changed = sum(1 for m in comparison.metrics if m.changed)
    click.echo(f"{changed} of {len(comparison.metrics)} metrics changed from {run_a} to {run_b}")
    if shown:
        rows = (
            {
                "scenario": m.scenario_id or "(all)",
                "metric": m.metric,
                "paired": m.paired,
                "mean_a": _fmt(m.mean_a),
                "mean_b": _fmt(m.mean_b),
                "change": _fmt(m.delta, "{:+.3f}") + (" *" if m.significant else ""),
                "95% interval": "-"
                if m.low is None or m.high is None
                else f"[{m.low:+.3f}, {m.high:+.3f}]",
                "pass_a": _fmt(m.pass_rate_a, "{:.1%}"),
                "pass_b": _fmt(m.pass_rate_b, "{:.1%}"),
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
        out = _Echo(click.echo)
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
                f"{_fmt(c.value_a)} -> {_fmt(c.value_b)}"
            )
