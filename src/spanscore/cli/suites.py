"""`spanscore import` and `spanscore schema`: suite files in, suite files described."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .options import option

FORMAT_NAMES = (
    "arksim",
    "watsonx",
    "tool_selection",
    "adk",
    "agentevals",
    "tau_bench",
    "tau2",
    "auto",
)


class BadInput(click.ClickException):
    """The input file is not what the command needs: exit 2, like a usage error."""

    exit_code = 2


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(FORMAT_NAMES))
@click.argument("file", type=click.Path(path_type=Path))
@option(
    "-o",
    "--output",
    envvar="SPANSCORE_IMPORT_OUTPUT",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the suite to this file (default: print it).",
)
@option(
    "--read-only-tool",
    "read_only_tools",
    envvar="SPANSCORE_IMPORT_READ_ONLY_TOOL",
    multiple=True,
    metavar="NAME",
    help="tau_bench, tau2: a tool that changes no state (repeat for each; the benchmarks' "
    "published domains are known).",
)
@option(
    "--write-tool",
    "write_tools",
    envvar="SPANSCORE_IMPORT_WRITE_TOOL",
    multiple=True,
    metavar="NAME",
    help="tau_bench, tau2: a tool that changes state (repeat for each).",
)
def import_command(
    fmt: str,
    file: Path,
    output: Path | None,
    read_only_tools: tuple[str, ...],
    write_tools: tuple[str, ...],
) -> None:
    """Convert another tool's test file into a spanscore suite (YAML, commented where the
    source's semantics differ from spanscore's).

    FORMAT is arksim (scenarios.json), watsonx (a ground-truth dataset, or a directory of
    them), tool_selection (tool-selection tester datasets), adk (Google ADK eval sets),
    agentevals (reference trajectories as OpenAI messages), tau_bench (tau-bench tasks),
    tau2 (tau2-bench tasks.json), or auto. The native files also work directly as `--suite`
    files; importing shows and freezes the conversion.

    \b
    $ spanscore import arksim examples/customer_service/arksim_scenarios.json -o suite.yaml
    $ spanscore import watsonx examples/hr/timeoff_schedule.json
    $ spanscore import tau2 examples/tau2/tasks.json
    """
    from spanscore.evaluation.suites.importers import ImporterError
    from spanscore.evaluation.suites.load import import_to_yaml

    try:
        options: dict[str, list[str]] = {}
        if read_only_tools:
            options["read_only_tools"] = list(read_only_tools)
        if write_tools:
            options["write_tools"] = list(write_tools)
        text = import_to_yaml(fmt, file, options or None)
    except ImporterError as exc:
        raise BadInput(str(exc)) from exc
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)


@click.group("schema")
def schema_group() -> None:
    """Print the JSON Schema of a spanscore file, for editor completion and validation.

    \b
    $ spanscore schema suite > spanscore-suite.schema.json
    """


@schema_group.command("suite")
def schema_suite_command() -> None:
    """Print the JSON Schema of suite files (YAML or JSON).

    \b
    $ spanscore schema suite > spanscore-suite.schema.json
    # in suite.yaml, for editors with the YAML language server:
    # yaml-language-server: $schema=spanscore-suite.schema.json

    The assertion types of every installed plugin are in it; a plugin that fails to load is
    named on stderr and left out.
    """
    from spanscore.evaluation.scoring.plugins import load_installed_plugins
    from spanscore.evaluation.suites.load import suite_json_schema

    for problem in load_installed_plugins():
        click.echo(f"warning: {problem}", err=True)
    click.echo(json.dumps(suite_json_schema(), indent=2))
