"""`spanscore sql` and `spanscore status`."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import click

from .options import from_environment, lake_option, open_lake_or_fail, option

if TYPE_CHECKING:
    import duckdb


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


def _json_columns(description: Any) -> set[str]:
    """The result columns of DuckDB's JSON type (their values arrive as JSON text)."""
    return {d[0] for d in description or () if str(d[1]) == "JSON"}


def _json_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def write_rows(
    rows: Iterator[dict[str, Any]],
    names: list[str],
    fmt: str,
    out: Any,
    json_columns: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Print rows as an aligned table, CSV (LF line ends) or one JSON array of objects, where
    the values of `json_columns` are JSON, not strings of JSON."""
    if fmt == "json":
        out.write("[")
        for i, row in enumerate(rows):
            document = {
                k: _json_value(v) if k in json_columns else _plain(v) for k, v in row.items()
            }
            out.write(("," if i else "") + "\n  " + json.dumps(document, default=str))
        out.write("\n]\n" if names else "]\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
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
@option(
    "--format",
    "fmt",
    # SPANSCORE_FORMAT: the name from before each command's --format had its own variable.
    envvar=["SPANSCORE_SQL_FORMAT", "SPANSCORE_FORMAT"],
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format; json is one array of row objects.",
)
@option(
    "-f",
    "--file",
    "query_file",
    envvar="SPANSCORE_FILE",
    type=click.File("r", encoding="utf-8"),
    help="Read the SQL from this file (- for stdin).",
)
@option(
    "--write",
    envvar="SPANSCORE_WRITE",
    is_flag=True,
    help="Open the lake read-write (default: read-only, so a query cannot change the lake).",
)
@click.argument("query", required=False)
def sql_command(lake: str, fmt: str, query_file: Any, write: bool, query: str | None) -> None:
    """Run SQL against the lake, also while the collector is writing. Read-only unless
    --write; the SQL comes from QUERY, from --file, or from stdin (QUERY `-`).

    \b
    $ spanscore sql --lake ./lake "SELECT tool_name, count(*) AS calls FROM tool_calls GROUP BY ALL"
    $ spanscore sql --lake ./lake --format json "SELECT * FROM conversations LIMIT 5"
    $ spanscore sql --lake ./lake --format csv -f nightly.sql > nightly.csv
    """
    from spanscore.lake import LakeError, commit_turn
    from spanscore.lake.locks import turn_of

    if query_file is not None and query is not None:
        if not from_environment("query_file"):
            raise click.UsageError("give the SQL as QUERY or with --file, not both")
        query_file = None  # SPANSCORE_FILE set, QUERY typed: the command line's
    if query == "-":
        query = sys.stdin.read()
    elif query_file is not None:
        query = query_file.read()
    if not query or not query.strip():
        raise click.UsageError("no SQL: give QUERY, --file FILE, or - to read stdin")
    con = open_lake_or_fail(lake, read_only=not write)
    try:
        # Writes take the lake's commit turn, as spanscore's own writers do: a collector
        # ingesting meanwhile waits for them, instead of losing its commits to them.
        with commit_turn(turn_of(con) if write else None, deadline_s=120):
            _print_query(con, query, fmt, write)
    except LakeError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()


def _print_query(con: duckdb.DuckDBPyConnection, query: str, fmt: str, write: bool) -> None:
    import duckdb

    from spanscore.lake import query as run_query

    cursor_rows = run_query(con, query)
    try:
        first = next(cursor_rows, None)
    except duckdb.Error as exc:
        raise click.ClickException(_sql_error(exc, write)) from exc
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
        write_rows(all_rows(), names, fmt, sys.stdout, _json_columns(con.description))
    except duckdb.Error as exc:
        raise click.ClickException(_sql_error(exc, write)) from exc


def _sql_error(exc: Exception, write: bool) -> str:
    from spanscore.lake.guard import refusal

    return str(exc) if write else refusal(exc, "add --write to change it")


@click.command("status")
@option(
    "--endpoint",
    envvar="SPANSCORE_ENDPOINT",
    default="http://127.0.0.1:4318",
    show_default=True,
    help="The collector's OTLP/HTTP address.",
)
@option("--token", envvar="SPANSCORE_TOKEN", help="Bearer token.")
@option(
    "--json",
    "as_json",
    envvar="SPANSCORE_STATUS_JSON",
    is_flag=True,
    help="Print the raw JSON document.",
)
@option(
    "--wait",
    envvar="SPANSCORE_WAIT",
    type=click.FloatRange(min=0),
    default=0,
    metavar="SECONDS",
    help="Wait up to this long for a collector that is starting (for scripts).",
)
def status_command(endpoint: str, token: str | None, as_json: bool, wait: float) -> None:
    """Show a running collector's health and counters (received, stored, refused by reason).

    \b
    $ spanscore status --endpoint http://127.0.0.1:4318
    $ spanscore serve --lake my-lake & spanscore status --wait 30   # in a script
    """
    import http.client  # here, not at the top: the other commands start without them
    import urllib.error
    import urllib.parse
    import urllib.request

    request = urllib.request.Request(endpoint.rstrip("/") + "/status")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                doc = json.load(response)
            break
        except urllib.error.HTTPError as exc:
            http_port = exc.headers.get("Spanscore-Http-Port")  # the collector's gRPC port
            if http_port and http_port.isdigit():
                host = urllib.parse.urlsplit(endpoint).hostname or "127.0.0.1"
                host = f"[{host}]" if ":" in host else host
                raise click.ClickException(
                    f"{endpoint} is the collector's OTLP/gRPC port. `status` asks its OTLP/HTTP "
                    f"port, {http_port}: `spanscore status --endpoint http://{host}:{http_port}`"
                ) from None
            raise click.ClickException(
                f"{endpoint} answered {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc
        except http.client.HTTPException as exc:  # an answer that is no HTTP/1.1 at all
            host = urllib.parse.urlsplit(endpoint).hostname or "127.0.0.1"
            host = f"[{host}]" if ":" in host else host
            # Collectors before the gRPC port answered HTTP/1 themselves: grpcio's own answer.
            # A gRPC server opens with an HTTP/2 SETTINGS frame: a 9-byte header of type 4.
            line = str(exc.args[0]) if exc.args else ""
            if len(line) >= 4 and line.startswith("\x00") and line[3] == "\x04":
                what = "answers HTTP/2 (gRPC): it is the collector's OTLP/gRPC port."
            else:
                what = (
                    f"does not answer HTTP/1.1 ({type(exc).__name__}): is it the collector's "
                    "OTLP/gRPC port?"
                )
            raise click.ClickException(
                f"{endpoint} {what} `status` asks the OTLP/HTTP port (default 4318): "
                f"`spanscore status --endpoint http://{host}:4318`"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() >= deadline:
                waited = f" (waited {wait:g}s)" if wait else ""
                raise click.ClickException(f"no collector at {endpoint}{waited}: {exc}") from exc
            time.sleep(0.2)
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
    data = doc.get("data") or {}
    if data:
        click.echo("data kept:")
        for key in ("oldest_span", "oldest_log_record", "oldest_score", "oldest_run"):
            if key in data:
                click.echo(f"  {key:<36} {data[key] or 'none (or not measured yet)'}")
        for key in ("retention_days", "score_retention_days"):
            value = data.get(key)
            click.echo(f"  {key:<36} {'unlimited' if value is None else f'{value:g}'}")
    counters = doc.get("counters") or {}
    without = counters.get("spans_without_conversation_id", 0)
    if without:
        received = counters.get("spans_received", 0)
        click.echo(
            f"{without} of {received} spans carried no conversation id: the trace id stands in "
            "(one conversation per trace) unless another span of the trace carries one. Set it "
            "with spanscore.instrumentation.conversation(...) or the collector's "
            "conversation_attribute."
        )
