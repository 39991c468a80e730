"""A run's figures as Prometheus metrics, in a file for the node-exporter textfile collector
(`spanscore evaluate --metrics-file`): cron users alert on them like on any other metric.

Every series carries the suite; each run replaces the file whole (written beside it, then
renamed: the collector never reads half a file), so the file holds the suite's latest run.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from spanscore.evaluation.runs.result import RunResult

PREFIX = "spanscore_run_"


def _labels(labels: Mapping[str, str | None]) -> str:
    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escaped(v or "")}"' for k, v in labels.items()) + "}"


def prometheus_text(result: RunResult, suite: str, now: dt.datetime | None = None) -> str:
    """The run's figures in the Prometheus text format."""
    now = now or dt.datetime.now(dt.UTC)
    families: list[tuple[str, str, list[tuple[dict[str, str | None], float]]]] = []
    base: dict[str, str | None] = {"suite": suite}

    def family(name: str, help_text: str, *samples: tuple[dict[str, str | None], float]) -> None:
        families.append((name, help_text, list(samples)))

    family("passed", "1 when every gate of the suite's last run passed.", (base, result.passed))
    family(
        "finished_timestamp_seconds",
        "When the suite's last run finished (alert when it is too old).",
        (base, now.timestamp()),
    )
    family("duration_seconds", "How long the run took.", (base, result.elapsed_s))
    family("conversations_scored", "Conversations the run scored.", (base, result.scored))
    family("scores", "Scores the run wrote.", (base, result.score_count))
    family("score_errors", "Scores that could not be given.", (base, result.error_count))
    judge = result.judge or {}
    family("judge_calls", "LLM-judge calls paid for.", (base, judge.get("calls", 0) or 0))
    family("judge_cost_usd", "Estimated LLM-judge cost.", (base, judge.get("cost_usd", 0) or 0))
    rows = [r for r in result.summary if r.pass_rate is not None]
    family(
        "pass_rate",
        "Pass rate per scenario and metric (scenario empty: the suite's own metrics).",
        *(
            ({**base, "scenario": r.scenario_id, "metric": r.metric}, r.pass_rate or 0.0)
            for r in rows
        ),
    )
    family(
        "gate_passed",
        "1 when the gate passed.",
        *(({**base, "gate": g.describe().split(":")[0]}, g.passed) for g in result.gates),
    )
    lines = []
    for name, help_text, samples in families:
        if not samples:
            continue
        lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} gauge"]
        lines += [f"{PREFIX}{name}{_labels(labels)} {float(v):g}" for labels, v in samples]
    return "\n".join(lines) + "\n"


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
