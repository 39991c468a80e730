"""A run's figures as Prometheus metrics, in a file for the node-exporter textfile collector
(`spanscore evaluate --metrics-file`): cron users alert on them like on any other metric.

The same figures (`run_figures`, one definition) go out as OTLP metrics with `--export-otlp`
(`otlp_metrics`). Every series carries the suite; each run replaces the file whole (written
beside it, then renamed: the collector never reads half a file), so the file holds the suite's
latest run.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spanscore.evaluation.runs.result import RunResult

PREFIX = "spanscore_run_"
OTLP_PREFIX = "spanscore.run."


@dataclass(frozen=True, slots=True)
class Figure:
    """One of a run's figures, the one definition both outputs use: the textfile's
    `spanscore_run_NAME` (`_seconds` added for a unit of seconds) and the OTLP gauge
    `spanscore.run.NAME` with its unit, which an OpenTelemetry Collector's Prometheus exporter
    turns back into the same name. Labels are the same in both (an empty one is left out of
    the OTLP attributes, as Prometheus reads an empty label as none)."""

    name: str
    help: str
    samples: tuple[tuple[Mapping[str, str | None], float], ...]
    unit: str = ""

    @property
    def prometheus_name(self) -> str:
        return PREFIX + self.name + ("_seconds" if self.unit == "s" else "")

    @property
    def otlp_name(self) -> str:
        return OTLP_PREFIX + self.name


def run_figures(result: RunResult, suite: str, now: dt.datetime | None = None) -> list[Figure]:
    """The run's figures: gates, counts, judge cost, duration, pass rates (a figure with no
    sample, as `gate_passed` of a run without gates, is left out)."""
    now = now or dt.datetime.now(dt.UTC)
    figures: list[Figure] = []
    base: dict[str, str | None] = {"suite": suite}

    def figure(
        name: str, help_text: str, *samples: tuple[Mapping[str, str | None], float], unit: str = ""
    ) -> None:
        if samples:
            figures.append(Figure(name, help_text, tuple(samples), unit))

    figure("passed", "1 when every gate of the suite's last run passed.", (base, result.passed))
    figure(
        "finished_timestamp",
        "When the suite's last run finished (alert when it is too old).",
        (base, now.timestamp()),
        unit="s",
    )
    figure("duration", "How long the run took.", (base, result.elapsed_s), unit="s")
    figure("conversations_scored", "Conversations the run scored.", (base, result.scored))
    figure("scores", "Scores the run wrote.", (base, result.score_count))
    figure("score_errors", "Scores that could not be given.", (base, result.error_count))
    judge = result.judge or {}
    figure("judge_calls", "LLM-judge calls paid for.", (base, judge.get("calls", 0) or 0))
    figure("judge_cost_usd", "Estimated LLM-judge cost.", (base, judge.get("cost_usd", 0) or 0))
    rows = [r for r in result.summary if r.pass_rate is not None]
    figure(
        "pass_rate",
        "Pass rate per scenario and metric (scenario empty: the suite's own metrics).",
        *(
            ({**base, "scenario": r.scenario_id, "metric": r.metric}, r.pass_rate or 0.0)
            for r in rows
        ),
    )
    figure(
        "gate_passed",
        "1 when the gate passed.",
        *(({**base, "gate": g.describe().split(":")[0]}, g.passed) for g in result.gates),
    )
    return figures


def prometheus_text(result: RunResult, suite: str, now: dt.datetime | None = None) -> str:
    """The run's figures in the Prometheus text format."""
    lines = []
    for f in run_figures(result, suite, now):
        name = f.prometheus_name
        lines += [f"# HELP {name} {f.help}", f"# TYPE {name} gauge"]
        lines += [f"{name}{_labels(labels)} {_number(v)}" for labels, v in f.samples]
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str | None]) -> str:
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escaped(v or "")}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    value = float(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def write_textfile(path: str | os.PathLike[str], text: str) -> None:
    """Replace the file with `text` at once (a temporary file beside it, renamed)."""
    target = Path(path)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
