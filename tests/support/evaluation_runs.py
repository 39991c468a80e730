"""Evaluation runs over the synthetic lake (`spanscore.examples.synthetic.build_lake`): its
suite (`SUITE`), the time its conversations start (`SYNTHETIC_START`) and a "now" well after
them (`LATER`), a run with the tests' defaults (`run`: no settling, one worker), a suite
written to a file, and a run's scores read back in a stable order."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate

from .lake import query

UTC = dt.UTC
SYNTHETIC_START = dt.datetime.fromtimestamp(1_700_000_000, UTC)  # where build_lake starts
LATER = SYNTHETIC_START + dt.timedelta(days=30)

SUITE = {
    "name": "synthetic",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["get_order", "search_products"]},
        {
            "type": "tool_calls",
            "name": "strict_calls",
            "mode": "strict",
            "expected": [
                ["get_order", "lookup_customer"],
                ["search_products", "verify_customer"],
                "cancel_order",
            ],
        },
        {"type": "response", "keywords": ["shipped"]},
        {"type": "efficiency"},
        {"type": "tool_errors", "missing_result_is_error": False},
    ],
}


def write_suite(tmp_path: Path, suite: dict[str, Any] | str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(suite if isinstance(suite, str) else json.dumps(suite))
    return path


def score_rows(lake: Path, run_id: str) -> list[tuple[Any, ...]]:
    return sorted(
        query(
            lake,
            "SELECT conversation_id, scenario_id, metric, value, label, passed, threshold, "
            "explanation, details::VARCHAR, error FROM scores WHERE run_id = ?",
            [run_id],
        ),
        key=repr,
    )


def run(lake: Path, suite: Any, **options: Any) -> Any:
    defaults: dict[str, Any] = {"settle_s": 0, "workers": 1, "now": LATER}
    return evaluate(lake, suite, RunOptions(**{**defaults, **options}))
