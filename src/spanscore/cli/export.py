"""`spanscore export`: send a run's scores again as OpenTelemetry evaluation events."""

from __future__ import annotations

import json
import sys

import click

from .options import EXIT_FAILED, format_option, lake_option, open_lake_or_fail, option


@click.command("export")
@lake_option()
@click.argument("run")
@option(
    "--endpoint",
    envvar="SPANSCORE_EXPORT_ENDPOINT",
    metavar="URL",
    help="The OTLP endpoint (base URL, as OTEL_EXPORTER_OTLP_ENDPOINT); default: the one the "
    "OTEL_EXPORTER_OTLP_* variables name (logs signal first).",
)
@format_option("export", ["text", "json"], "json: one document with the counts.")
def export_command(lake: str, run: str, endpoint: str | None, fmt: str) -> None:
    """Send RUN's scores as gen_ai.evaluation.result events, one per score, parented to the
    spans they judge (what `spanscore evaluate --export-otlp` sends after a run).

    A spanscore collector stores a record sent twice once; other backends may keep both.
    RUN is a run id, a unique prefix, `latest` or `previous`. Exit status: 0 every event was
    sent, 1 some could not be, 2 usage error or unknown run, 3 the lake cannot be opened.

    \b
    $ spanscore export --lake ./lake latest --endpoint http://otel-collector:4318
    """
    from spanscore.evaluation.runs.export_otlp import (
        ExportSettingsError,
        export_run,
        resolve_endpoint,
    )
    from spanscore.evaluation.runs.run_ids import RunNotFound, resolve_run

    from .summaries import export_line

    try:
        url, protocol = resolve_endpoint(endpoint)
    except ExportSettingsError as exc:
        raise click.BadParameter(str(exc), param_hint="--endpoint") from None
    con = open_lake_or_fail(lake)
    try:
        try:
            run_id = resolve_run(con, run)
        except RunNotFound as exc:
            raise click.UsageError(str(exc)) from None
        outcome = export_run(con, run_id, url, protocol)
    finally:
        con.close()
    if fmt == "json":
        click.echo(json.dumps({"run_id": run_id, **outcome.as_dict()}, indent=2))
    else:
        click.echo(f"run {run_id}: {export_line(outcome.as_dict())}")
    sys.exit(EXIT_FAILED if outcome.failed else 0)
