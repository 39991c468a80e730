"""`spanscore runs`: the evaluation runs in the lake, newest first."""

from __future__ import annotations

import sys

import click

from .options import format_option, lake_option, open_lake_or_fail, option


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
    from .query import write_rows

    con = open_lake_or_fail(lake, read_only=True)
    try:
        cursor = con.execute(
            """
            SELECT run_id, suite_name, suite_hash, status, started_at, window_start, window_end,
                   conversation_count AS conversations, score_count AS scores,
                   error_count AS errors,
                   json_extract_string(details, '$.empty_because') AS empty_because
            FROM eval_runs
            WHERE ? IS NULL OR suite_name = ?
            ORDER BY started_at DESC, run_id DESC
            LIMIT ?
            """,
            [suite_name, suite_name, limit],
        )
        names = [d[0] for d in cursor.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()
    write_rows(iter(rows), names, fmt, sys.stdout)
