"""`spanscore sql` and `spanscore status`."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import click

from .options import lake_option, open_lake_or_fail


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def _cell(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return str(value)


def write_rows(rows: Iterator[dict[str, Any]], names: list[str], fmt: str, out: Any) -> None:
    """Print rows as an aligned table, CSV or one JSON array of objects."""
    if fmt == "json":
        out.write("[")
        for i, row in enumerate(rows):
            out.write(
                ("," if i else "")
                + "\n  "
                + json.dumps({k: _plain(v) for k, v in row.items()}, default=str)
            )
        out.write("\n]\n" if names else "]\n")
    elif fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(names)
        for row in rows:
            writer.writerow([_cell(v) for v in row.values()])
    else:
        table = [[_cell(v) for v in row.values()] for row in rows]
        _print_table(names, table, out)


def _print_table(names: list[str], table: Iterable[list[str]], out: Any, width: int = 60) -> None:
    rows = [[c if len(c) <= width else c[: width - 1] + "…" for c in r] for r in table]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))
    out.write(line.rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


@click.command("sql")
@lake_option()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    envvar="SPANSCORE_FORMAT",
    show_default=True,
    help="Output format; json is one array of row objects.",
)
@click.argument("query")
def sql_command(lake: str, fmt: str, query: str) -> None:
    """Run one SQL statement against the lake, also while the collector is writing.

    \b
    $ spanscore sql --lake ./lake "SELECT tool_name, count(*) AS calls FROM tool_calls GROUP BY ALL"
    $ spanscore sql --lake ./lake --format json "SELECT * FROM conversations LIMIT 5"
    """
    import duckdb

    from spanscore.lake import query as run_query

    con = open_lake_or_fail(lake)
    try:
        cursor_rows = run_query(con, query)
        try:
            first = next(cursor_rows, None)
        except duckdb.Error as exc:
            raise click.ClickException(str(exc)) from exc
        if first is None:
            description = con.description or []
            names = [d[0] for d in description]
            write_rows(iter(()), names, fmt, sys.stdout)
            return
        names = list(first)

        def all_rows() -> Iterator[dict[str, Any]]:
            yield first
            yield from cursor_rows

        try:
            write_rows(all_rows(), names, fmt, sys.stdout)
        except duckdb.Error as exc:
            raise click.ClickException(str(exc)) from exc
    finally:
        con.close()


@click.command("status")
@click.option(
    "--endpoint",
    envvar="SPANSCORE_ENDPOINT",
    default="http://127.0.0.1:4318",
    show_default=True,
    help="The collector's OTLP/HTTP address.  [env: SPANSCORE_ENDPOINT]",
)
@click.option("--token", envvar="SPANSCORE_TOKEN", help="Bearer token.  [env: SPANSCORE_TOKEN]")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON document.")
def status_command(endpoint: str, token: str | None, as_json: bool) -> None:
    """Show a running collector's health and counters (received, stored, refused by reason).

    \b
    $ spanscore status --endpoint http://127.0.0.1:4318
    """
    request = urllib.request.Request(endpoint.rstrip("/") + "/status")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            doc = json.load(response)
    except urllib.error.HTTPError as exc:
        raise click.ClickException(
            f"{endpoint} answered {exc.code}: {exc.read().decode(errors='replace')}"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"no collector at {endpoint}: {exc}") from exc
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"status: {doc.get('status')}   uptime: {doc.get('uptime_s')}s")
    if doc.get("last_error"):
        click.echo(f"last error: {doc['last_error']}")
    for section in ("counters", "gauges"):
        values = doc.get(section) or {}
        if values:
            click.echo(f"{section}:")
            for key, value in values.items():
                click.echo(f"  {key:<36} {value}")
