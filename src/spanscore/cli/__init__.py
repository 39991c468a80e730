"""The `spanscore` command: thin click commands, each over one library call.

Every option also reads an environment variable (`SPANSCORE_<OPTION>`); errors exit non-zero
with a one-line message.
"""

from __future__ import annotations

import click

from .evaluate import compare_command, evaluate_command
from .query import sql_command, status_command
from .serve import serve_command
from .show import show_command
from .suites import import_command, schema_group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="spanscore")
def main() -> None:
    """spanscore: tool-call spans in over OTLP, stored in a DuckLake, scored, queried with SQL.

    \b
    $ spanscore serve --lake ./lake
    $ spanscore sql --lake ./lake "SELECT tool_name, count(*) FROM tool_calls GROUP BY ALL"
    """


main.add_command(serve_command)
main.add_command(sql_command)
main.add_command(status_command)
main.add_command(show_command)
main.add_command(evaluate_command)
main.add_command(compare_command)
main.add_command(import_command)
main.add_command(schema_group)

# The demo imports the example agent (and its dependencies) only when it runs.
from .demo import demo_command  # noqa: E402

main.add_command(demo_command)

__all__ = ["main"]
