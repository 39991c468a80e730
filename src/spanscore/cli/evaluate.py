"""`spanscore evaluate`: score a window of conversations with a suite (the nightly job)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import time
from typing import Any

import click

from .invocation import runnable
from .options import (
    LakeUnavailable,
    format_option,
    from_environment,
    judge_options,
    lake_option,
    option,
    suite_options,
)
from .summaries import (
    print_summary,
    when,
)

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


def parsewhen(text: str, now: dt.datetime) -> dt.datetime:
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


@click.command("evaluate")
@lake_option()
@suite_options
@option(
    "--since",
    envvar="SPANSCORE_SINCE",
    help="Window start: ISO time or a duration ago (24h). "
    "Default: the end of the previous successful run of this suite.",
)
@option(
    "--until",
    envvar="SPANSCORE_UNTIL",
    help="Window end: ISO time or a duration ago. Default: now - settle.",
)
@option("--last", envvar="SPANSCORE_LAST", help="Shorthand for --since DURATION (e.g. --last 24h).")
@option(
    "--sample",
    envvar="SPANSCORE_SAMPLE",
    type=click.FloatRange(0, 1, min_open=True),
    help="Fraction of the conversations to score (deterministic by id and seed).",
)
@option(
    "--max-conversations",
    envvar="SPANSCORE_MAX_CONVERSATIONS",
    type=click.IntRange(min=1),
    help="At most this many conversations (the lowest hashes).",
)
@option(
    "--seed",
    envvar="SPANSCORE_SEED",
    type=int,
    default=0,
    show_default=True,
    help="Sampling seed.",
)
@option(
    "--stratify-by",
    envvar="SPANSCORE_STRATIFY_BY",
    metavar="FIELD",
    help="Sample each agent_name / service_name / span attribute value alike.",
)
@option(
    "--service",
    "services",
    envvar="SPANSCORE_SERVICE",
    multiple=True,
    help="Only this service (repeatable).",
)
@option(
    "--agent",
    "agents",
    envvar="SPANSCORE_AGENT",
    multiple=True,
    help="Only this agent (repeatable).",
)
@option(
    "--scenario",
    "scenarios",
    envvar="SPANSCORE_SCENARIO",
    multiple=True,
    help="Only conversations with this scenario.id (repeatable).",
)
@option(
    "--simulation",
    envvar="SPANSCORE_SIMULATION",
    metavar="ID",
    help="Score this simulation's conversations (`spanscore simulations` lists them) instead "
    "of production traffic: every finished trial, whatever the window (not to be narrowed by "
    "--sample, --max-conversations, --scenario, --service or --agent); the summary adds each "
    "scenario's trials and pass^k.",
)
@option(
    "--rescore",
    envvar="SPANSCORE_RESCORE",
    is_flag=True,
    help="Score conversations already scored by this suite version again.",
)
@option(
    "--settle",
    envvar="SPANSCORE_SETTLE",
    default="10m",
    show_default=True,
    help="Leave conversations whose last span is younger than this for the next run.",
)
@option(
    "--workers",
    envvar="SPANSCORE_EVALUATE_WORKERS",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Scoring processes (0: one per CPU).",
)
@option(
    "--engine",
    envvar="SPANSCORE_ENGINE",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where conversations are scored: local processes, or tasks on a Ray cluster "
    "(needs spanscore-evaluation[ray]).",
)
@option(
    "--ray-address",
    envvar="SPANSCORE_RAY_ADDRESS",
    metavar="ADDR",
    help="The Ray cluster to join (host:port of its head); without it, RAY_ADDRESS, else a "
    "local Ray cluster started for the run.",
)
@option(
    "--batch-size",
    envvar="SPANSCORE_BATCH_SIZE",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Conversations per committed batch. A run's memory follows this (above a floor), "
    "never the size of the window.",
)
@option(
    "--fail-under",
    "fail_under",
    envvar="SPANSCORE_FAIL_UNDER",
    multiple=True,
    metavar="[SCENARIO/][METRIC.]KEY=X",
    help="Gate, e.g. pass_rate=0.9 (conversations), score_pass_rate=0.9 (scores) or "
    "tool_calls.mean=0.8 (repeatable).",
)
@option(
    "--min-conversations",
    envvar="SPANSCORE_MIN_CONVERSATIONS",
    type=click.IntRange(min=0),
    help="Fail (exit 1) when the run has fewer conversations (over the suite's min_conversations).",
)
@option(
    "--strict",
    envvar="SPANSCORE_STRICT",
    is_flag=True,
    default=None,
    help="Warnings fail the run (exit 1): a scenario that selected no conversation, a metric "
    "that errored on every conversation, what an imported native file lost.",
)
@option(
    "--junit",
    envvar="SPANSCORE_JUNIT",
    type=click.Path(dir_okay=False),
    help="Write JUnit XML here.",
)
@format_option(
    "evaluate",
    ["text", "json"],
    "json: one document on stdout (run id, window, counts, summary, gates, warnings).",
)
@judge_options
@option(
    "--judge-batch",
    envvar="SPANSCORE_JUDGE_BATCH",
    is_flag=True,
    help="Send the judge's questions through the Batch API (half price; waits for the batch).",
)
@option(
    "--report",
    "report_path",
    envvar="SPANSCORE_REPORT",
    type=click.Path(dir_okay=False),
    help="Write the run's HTML report here (see `spanscore report`).",
)
@option(
    "--export-otlp",
    "export_otlp",
    envvar="SPANSCORE_EXPORT_OTLP",
    metavar="[URL]",
    is_flag=False,
    flag_value="",
    default=None,
    help="After the scores are committed, send one gen_ai.evaluation.result event per score, "
    "and the run's figures as OTLP metrics, to this OTLP endpoint (base URL, as "
    "OTEL_EXPORTER_OTLP_ENDPOINT); alone, to the one the OTEL_EXPORTER_OTLP_* variables name. "
    "A failed export is a warning, never a failure.",
)
@option(
    "--metrics-file",
    envvar="SPANSCORE_METRICS_FILE",
    type=click.Path(dir_okay=False),
    help="Write the run's figures (pass rates, gates, counts, judge cost, duration) here in "
    "the Prometheus text format, for node-exporter's textfile collector (name it *.prom).",
)
@option(
    "--follow",
    envvar="SPANSCORE_FOLLOW",
    is_flag=True,
    help="Run continuously: score each conversation once it has been idle for --settle, "
    "one run per --period, until stopped (SIGTERM or Ctrl-C closes the open run).",
)
@option(
    "--period",
    envvar="SPANSCORE_PERIOD",
    default="1h",
    show_default=True,
    help="With --follow: the span of each run (aligned to the clock).",
)
@option(
    "--poll",
    envvar="SPANSCORE_POLL",
    default="10s",
    show_default=True,
    help="With --follow: the time between two looks for settled conversations.",
)
def evaluate_command(
    lake: str,
    suite_path: str,
    allow_outside_metrics: bool,
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
    simulation: str | None,
    rescore: bool,
    settle: str,
    workers: int,
    engine: str,
    ray_address: str | None,
    batch_size: int,
    fail_under: tuple[str, ...],
    min_conversations: int | None,
    strict: bool | None,
    junit: str | None,
    fmt: str,
    judge: dict[str, Any],
    judge_batch: bool,
    report_path: str | None = None,
    export_otlp: str | None = None,
    metrics_file: str | None = None,
    follow: bool = False,
    period: str = "1h",
    poll: str = "10s",
) -> None:
    """Score the conversations of a time window with a suite; store the scores in the lake.

    Exit status: 0 every gate passed, 1 a gate failed (or too few conversations, a judged
    metric that errored on more than half of its conversations, or a warning with --strict),
    2 usage or suite error (a judge that cannot be used included), 3 the lake cannot be
    opened, 130 interrupted (committed batches are kept; run again to resume; judge
    answers already received are kept in the lake's judge_cache).

    Judged metrics use the suite's `judge:` block, these options, and OPENAI_API_KEY /
    OPENAI_BASE_URL (Azure: AZURE_OPENAI_API_KEY, AZURE_OPENAI_ENDPOINT, OPENAI_API_VERSION).

    \b
    $ spanscore evaluate --lake ./lake --suite suite.yaml --last 24h --sample 0.1
    """
    from spanscore.evaluation import SuiteError, load_suite
    from spanscore.evaluation.llm.client import JudgeUnavailable
    from spanscore.evaluation.runs.engines.ray import EngineUnavailable
    from spanscore.evaluation.runs.gates import parse_gate
    from spanscore.evaluation.runs.junit import junit_xml
    from spanscore.evaluation.runs.options import (
        NothingNew,
        RunOptions,
        WindowError,
        judge_settings,
    )
    from spanscore.evaluation.runs.result import RunInterrupted, plural
    from spanscore.evaluation.runs.run import evaluate
    from spanscore.lake import LakeError, connect

    now = dt.datetime.now(dt.UTC)
    export_to = export_settings(export_otlp)
    if ray_address and engine != "ray":
        raise click.UsageError("--ray-address is for --engine ray")
    if engine == "ray":
        from spanscore.evaluation.runs.engines.ray import check_available

        try:
            check_available()
        except EngineUnavailable as exc:
            click.echo(runnable(f"Error: {exc}"), err=True)
            sys.exit(2)
    try:
        suite = load_suite(suite_path, allow_outside_metrics=allow_outside_metrics)
    except SuiteError as exc:
        click.echo(f"Error: the suite cannot be used:\n{exc}", err=True)
        sys.exit(2)
    if last and since:
        # One set in the environment, the other given on the command line: the command line's.
        if from_environment("last") and not from_environment("since"):
            last = None
        elif from_environment("since") and not from_environment("last"):
            since = None
        else:
            raise click.UsageError("give --last or --since, not both")
    try:
        gates = [parse_gate(g) for g in fail_under]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fail-under") from None
    for text, gate in zip(fail_under, gates, strict=True):
        problem = suite.suite.gate_problem(gate)
        if problem is not None:
            raise click.BadParameter(f"{text!r}: {problem[1]}", param_hint="--fail-under")
    start = last or since
    if judge_batch:
        judge["batch"] = True
    options = RunOptions(
        since=parsewhen(start, now) if start else None,
        until=parsewhen(until, now) if until else None,
        sample=sample,
        max_conversations=max_conversations,
        seed=seed,
        stratify_by=stratify_by,
        services=services,
        agents=agents,
        scenarios=scenarios,
        rescore=rescore,
        simulation=simulation,
        settle_s=parse_duration(settle),
        workers=workers,
        engine=engine,
        ray_address=ray_address,
        batch_size=batch_size,
        gates=gates,
        min_conversations=min_conversations,
        strict=strict,
        now=now,
        judge=judge,
    )
    try:
        judge_settings(suite, options)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise click.UsageError(f"judge settings: {exc}") from None
    if follow:
        _follow(
            lake,
            suite,
            options,
            export_otlp,
            period,
            poll,
            fmt,
            junit or report_path,
            metrics_file,
        )
        return
    try:
        result = evaluate(lake, suite, options, progress=_Bar() if fmt == "text" else None)
    except (JudgeUnavailable, WindowError, EngineUnavailable) as exc:
        click.echo(runnable(f"Error: {exc}"), err=True)
        sys.exit(2)
    except NothingNew as exc:
        if fmt == "json":
            click.echo(json.dumps({"status": "nothing_new", "message": str(exc)}, indent=2))
        else:
            click.echo(str(exc))
        sys.exit(0)
    except RunInterrupted as exc:
        click.echo(
            f"\ninterrupted: run {exc.result.run_id} scored "
            f"{plural(exc.result.scored, 'conversation')} "
            "(committed); run the same command again to resume",
            err=True,
        )
        sys.exit(130)
    except LakeError as exc:
        raise LakeUnavailable(str(exc)) from exc
    finished = dt.datetime.now(dt.UTC)  # the figures' finished_timestamp, in both outputs
    committed = result.status in ("succeeded", "gate_failed")
    if export_otlp is not None and export_to is not None and committed:
        result.export = export_result(lake, result.run_id, export_to, result.score_count)
        result.metrics_export = export_figures(result, suite.name, export_otlp, finished)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print_summary(result)
    if metrics_file:
        write_metrics(metrics_file, result, suite.name, finished)
    if junit:
        con = connect(lake, read_only=True)
        try:
            junit_xml(con, suite, result.run_id, junit, result)
        finally:
            con.close()
        click.echo(f"JUnit XML written to {junit}", err=fmt == "json")
    if report_path:
        from .report import write_report_file

        trace_url = os.environ.get("SPANSCORE_TRACE_URL")
        write_report_file(lake, report_path, result.run_id, trace_url=trace_url, err=fmt == "json")
    sys.exit(0 if result.passed else 1)


def _follow(
    lake: str,
    suite: Any,
    options: Any,
    export_otlp: str | None,
    period: str,
    poll: str,
    fmt: str,
    per_run_file: str | None,
    metrics_file: str | None,
) -> None:
    """`evaluate --follow`: passes until SIGTERM or Ctrl-C, a summary per closed run."""
    import dataclasses
    import signal

    from spanscore.evaluation.runs.follow import Follower, FollowSettings, PassResult

    if options.until is not None or options.rescore or per_run_file:
        raise click.UsageError(
            "--follow scores each conversation once, as it settles, with no end: not with "
            "--until, --rescore, --junit or --report (use `spanscore report latest` on its runs)"
        )
    settings = FollowSettings(
        period_s=parse_duration(period),
        poll_s=parse_duration(poll),
        export=export_settings(export_otlp),
    )
    if settings.period_s <= 0 or settings.poll_s <= 0:
        raise click.UsageError("--period and --poll must be longer than 0 s")

    def on_pass(done: PassResult) -> None:
        if done.scored and fmt == "text":
            click.echo(
                f"{when(dt.datetime.now(dt.UTC))}: run {done.run_id} scored {done.scored} "
                f"conversations ({done.scores} scores) that ended before {when(done.until)}"
            )

    def on_period(result: Any) -> None:
        finished = dt.datetime.now(dt.UTC)
        if export_otlp is not None:
            result.metrics_export = export_figures(result, suite.name, export_otlp, finished)
        if fmt == "json":
            click.echo(json.dumps(result.to_dict(), default=str))
        else:
            print_summary(result)
        if metrics_file:
            write_metrics(metrics_file, result, suite.name, finished)

    follower = Follower(
        lake,
        suite,
        dataclasses.replace(options, now=None),
        settings,
        on_pass=on_pass,
        on_period=on_period,
    )
    signal.signal(signal.SIGTERM, lambda *_: follower.stop())
    if fmt == "text":
        click.echo(
            f"following {lake}: suite {suite.name}, settle {_duration_text(options.settle_s)}, "
            f"one run per {period}; SIGTERM or Ctrl-C stops"
        )
    try:
        follower.run()
    except KeyboardInterrupt:
        click.echo("\ninterrupted: the open run is closed as interrupted", err=True)
        sys.exit(130)


def write_metrics(
    path: str, result: Any, suite_name: str, finished: dt.datetime | None = None
) -> None:
    """The run's figures for node-exporter's textfile collector; a failure is a warning."""
    from spanscore.evaluation.runs.run_metrics import prometheus_text, write_textfile

    try:
        write_textfile(path, prometheus_text(result, suite_name, finished))
    except OSError as exc:
        click.echo(f"warning: the run's metrics could not be written to {path}: {exc}", err=True)


def _duration_text(seconds: float) -> str:
    from spanscore.evaluation.runs.window import duration_text

    return duration_text(seconds)


def export_settings(url: str | None) -> tuple[str, str] | None:
    """(endpoint, protocol) of `--export-otlp` (None: no export); a usage error when the
    settings cannot be used, before anything runs."""
    if url is None:
        return None
    from spanscore.evaluation.runs.export_otlp import ExportSettingsError, resolve_endpoint

    try:
        resolve_endpoint(url or None, signal="metrics")  # the run's figures go there
        return resolve_endpoint(url or None)
    except ExportSettingsError as exc:
        raise click.BadParameter(str(exc), param_hint="--export-otlp") from None


def export_figures(
    result: Any, suite_name: str, url: str, finished: dt.datetime | None = None
) -> dict[str, Any] | None:
    """Send the run's figures as OTLP metrics (`--export-otlp`, the metrics signal's
    variables); whatever happens is reported, never raised. None: not sent, because
    `OTEL_METRICS_EXPORTER=none` says so (the SDK's own switch), as when the events go to an
    endpoint that takes no metrics, such as a spanscore collector."""
    from spanscore.evaluation.runs.export_otlp import ExportSettingsError, resolve_endpoint
    from spanscore.evaluation.runs.otlp_metrics import MetricsOutcome, send_run_metrics

    if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "none":
        return None

    try:
        endpoint, protocol = resolve_endpoint(url or None, signal="metrics")
    except ExportSettingsError as exc:
        return MetricsOutcome(url, error=str(exc)).as_dict()
    return send_run_metrics(result, suite_name, endpoint, protocol, now=finished).as_dict()


def export_result(
    lake: str, run_id: str, export_to: tuple[str, str], scores: int
) -> dict[str, Any]:
    """Send the committed run's events; whatever happens is reported, never raised."""
    from spanscore.evaluation.runs.export_otlp import ExportOutcome, export_run
    from spanscore.lake import connect

    endpoint, protocol = export_to
    try:
        con = connect(lake)
        try:
            return export_run(con, run_id, endpoint, protocol).as_dict()
        finally:
            con.close()
    except Exception as exc:  # reading the run back failed: still only a warning
        failed = ExportOutcome(endpoint=endpoint, error=f"{type(exc).__name__}: {exc}")
        failed.failed = failed.events = scores
        return failed.as_dict()
