"""What a run prints when it ends, shared by `evaluate`, `simulate`, `export`, `judge-check`,
`compare` and the demo: the summary per scenario and metric, trials and pass^k, and one line
each for the judge, the metrics export and the events export."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from .invocation import runnable


def when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def figure(value: float | None, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def print_summary(result: Any, echo: Any = click.echo) -> None:
    """The run's summary table and gate results (also printed by the demo)."""
    from .query import write_rows

    start = when(result.window_start) if result.window_start else "the beginning"
    window = f"[{start}, {when(result.window_end)})"
    if getattr(result, "simulation_id", None):
        window = f"simulation {result.simulation_id}"
    echo(f"run {result.run_id}: {result.status}  window {window}  snapshot {result.snapshot}")
    from spanscore.evaluation.runs.result import plural

    echo(
        f"{plural(result.candidates, 'conversation')} in the window, {result.sampled} sampled, "
        f"{result.skipped} already scored, {result.scored} scored "
        f"({result.score_count} scores, {result.error_count} errors) in {result.elapsed_s:.1f} s"
    )
    if result.window_from:
        echo(f"window start: {result.window_from}")
    if result.empty_because:
        echo(runnable(f"no conversation in the window: {result.empty_because}"))
    if result.summary:
        rows = (
            {
                "scenario": r.scenario_id or "(all)",
                "metric": r.metric,
                "conversations": r.conversations,
                "pass_rate": figure(r.pass_rate, "{:.1%}"),
                "mean": figure(r.mean),
                "errors": r.errors,
                "worst": ", ".join(r.worst),
            }
            for r in result.summary
        )
        names = ["scenario", "metric", "conversations", "pass_rate", "mean", "errors", "worst"]
        out = Echo(echo)
        write_rows(iter(rows), names, "table", out)
        out.flush()
    if getattr(result, "trials", None):
        print_trials(result.trials, echo)
    judge = getattr(result, "judge", None)
    if judge:
        echo(judge_line(judge))
    for warning in result.warnings:
        echo(f"warning{' (strict: fails the run)' if result.strict else ''}: {warning}")
    if result.export is not None:
        echo(export_line(result.export))
    metrics_export = getattr(result, "metrics_export", None)
    line = metrics_export_line(metrics_export) if metrics_export is not None else ""
    if line:
        echo(line)
    for gate in result.gates:
        echo(f"gate {'passed' if gate.passed else 'FAILED'}: {gate.describe()}")
    for failure in result.failures:
        echo(f"run FAILED: {failure}")


def print_trials(trials: Any, echo: Any = click.echo) -> None:
    """Per scenario: its simulation's trials that counted, those passed, and pass^k."""
    from spanscore.evaluation.runs.result import mean_pass_hat_k

    from .query import write_rows

    most = max(t.trials for t in trials)
    ks = list(range(1, most + 1))
    rows = (
        {
            "scenario": t.scenario_id,
            "trials": t.trials,
            "passed": t.passed,
            **{f"pass^{k}": figure(t.pass_hat_k.get(k), "{:.2f}") for k in ks},
        }
        for t in trials
    )
    out = Echo(echo)
    write_rows(
        iter(rows), ["scenario", "trials", "passed", *(f"pass^{k}" for k in ks)], "table", out
    )
    out.flush()
    means = ", ".join(f"pass^{k} {figure(mean_pass_hat_k(trials, k), '{:.3f}')}" for k in ks)
    echo(f"over {len(trials)} scenarios: {means}")


def judge_line(judge: dict[str, Any]) -> str:
    """What the judge did: calls, cache hits, what the budget left out, tokens and cost."""
    cost = judge.get("cost_usd")
    shown = "cost unknown (no price for the model)" if cost is None else f"${cost:.4f}"
    attempts = judge.get("attempts")
    tried = "" if attempts is None else f" of {attempts} attempts"
    line = (
        f"judge: {judge.get('calls', 0)} calls answered{tried}, "
        f"{judge.get('cache_hits', 0)} cached answers, "
        f"{judge.get('prompt_tokens', 0)} prompt tokens ({judge.get('cached_tokens', 0)} cached), "
        f"{judge.get('completion_tokens', 0)} completion tokens, {shown}"
    )
    if judge.get("failed"):
        at = f" at {judge['endpoint']}" if judge.get("endpoint") else ""
        line += f"; {judge['failed']} questions failed{at} (last error: {judge.get('last_error')})"
    if judge.get("skipped"):
        line += f"; {judge['skipped']} questions SKIPPED: the judge budget was spent"
    if judge.get("throttled"):
        line += (
            f"; {judge['throttled']} rate-limited answers (429), concurrency settled at "
            f"{judge.get('limit')}"
        )
    if judge.get("batches"):
        line += f"; batches {', '.join(judge['batches'])}"
    return line


def metrics_export_line(outcome: dict[str, Any]) -> str:
    """What sending the run's figures as OTLP metrics did (a warning when it failed; "" when
    the endpoint keeps no metrics and this process said so already)."""
    from spanscore.evaluation.runs.otlp_metrics import MetricsOutcome

    line = MetricsOutcome(**outcome).describe()
    return f"warning (the run's result stands): {line}" if outcome.get("error") else line


def export_line(export: dict[str, Any]) -> str:
    """What `--export-otlp` did, in one line (a warning when events were not sent)."""
    from spanscore.evaluation.runs.export_otlp import ExportOutcome

    line = ExportOutcome(**export).describe()
    return f"warning (the run's result stands): {line}" if export.get("failed") else line


class Echo:
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
