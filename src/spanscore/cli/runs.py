"""`spanscore runs`: the evaluation runs in the lake, newest first."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .options import format_option, lake_option, open_lake_or_fail, option

if TYPE_CHECKING:
    from spanscore.evaluation.runs.store import RunRow


def _text(value: Any) -> str | None:
    """A JSON value as text, as SQL's `json_extract_string` gives it."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


# The columns listed, and how each is read from the run's row.
_COLUMNS: dict[str, Callable[[RunRow], Any]] = {
    "run_id": lambda r: r.run_id,
    "suite_name": lambda r: r.suite_name,
    "suite_hash": lambda r: r.suite_hash,
    "status": lambda r: r.status,
    "started_at": lambda r: r.started_at,
    "window_start": lambda r: r.window_start,
    "window_end": lambda r: r.window_end,
    "conversations": lambda r: r.conversation_count,
    "scores": lambda r: r.score_count,
    "errors": lambda r: r.error_count,
    "empty_because": lambda r: _text(r.facts.get("empty_because")),
}


@click.command("runs")
@lake_option()
@option(
    "--suite",
    "suite_name",
    envvar="SPANSCORE_RUNS_SUITE",
    help="Only the runs of this suite (its name).",
)
@option(
    "--limit",
    envvar="SPANSCORE_RUNS_LIMIT",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Runs to list.",
)
@format_option("runs", ["table", "csv", "json"], "Output format; json is one array of run objects.")
def runs_command(lake: str, suite_name: str | None, limit: int, fmt: str) -> None:
    """List evaluation runs, newest first: id, suite, status, window, counts, and why a run
    scored nothing. Any command taking a run accepts its id, a unique prefix, `latest` or
    `previous`.

    \b
    $ spanscore runs --lake ./lake
    $ spanscore runs --lake ./lake --suite customer-service --format json --limit 1
    """
    from spanscore.evaluation.runs.store import runs

    from .query import write_rows

    con = open_lake_or_fail(lake, read_only=True)
    try:
        found = runs(con, suite=suite_name, limit=limit)
    finally:
        con.close()
    names = list(_COLUMNS)
    rows = [{name: shown(run) for name, shown in _COLUMNS.items()} for run in found]
    write_rows(iter(rows), names, fmt, sys.stdout)
