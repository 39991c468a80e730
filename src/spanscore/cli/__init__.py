"""The `spanscore` command: thin click commands, each over one library call.

Every option also reads an environment variable, shown in its `--help` (`[env var: ...]`); the
command line wins over the variable, also over the variable of an alternative (`--since` typed
wins over SPANSCORE_LAST, a QUERY over SPANSCORE_FILE). The variables are named by one rule:

- `SPANSCORE_<OPTION>` (`--max-judge-cost`: `SPANSCORE_MAX_JUDGE_COST`) for an option that
  means the same in every command that has it (`--lake`, `--suite`, `--token`, the judge's
  options) and for an option no other command has. The collector's settings (`serve`) are
  named so too: they are also the keys of its config file.
- `SPANSCORE_<COMMAND>_<OPTION>` where commands use one option name for different things:
  `--format` (`SPANSCORE_SQL_FORMAT`, `SPANSCORE_RUNS_FORMAT`, ...), `--json`, `--limit`,
  `--output`, `--endpoint` (`SPANSCORE_EXPORT_ENDPOINT`: not `status`'s collector); and,
  beside a collector setting or shared option of that name, `evaluate --workers`
  (`SPANSCORE_EVALUATE_WORKERS`), `runs --suite` (a suite's name, not its file) and `demo --lake`
  (a lake the demo recreates).

A flag reads its variable as a boolean (1/0, true/false, yes/no, on/off); a repeatable option
reads several values separated by spaces (`serve --redact`: by commas). Only `--help` and
`--version` have no variable: they print and exit. The standard variables keep their meaning:
OPENAI_API_KEY and OPENAI_BASE_URL for the judge, RAY_ADDRESS for `--engine ray`.
`sql` also reads SPANSCORE_FORMAT, its variable before the rule.

Errors exit non-zero with a one-line message. Exit codes, for every command: 0 ok, 1 a gate or
a comparison failed, 2 a usage, suite or input error, 3 the lake cannot be opened, 130
interrupted.
"""

from __future__ import annotations

from typing import Any

import click

from .compare import compare_command
from .erase import erase_command
from .evaluate import evaluate_command
from .export import export_command
from .invocation import runnable
from .judge_check import judge_check_command
from .mcp import mcp_command
from .options import EXIT_CODES_HELP, EXIT_INTERRUPTED, InputError, LakeUnavailable
from .promote import promote_command
from .query import sql_command, status_command
from .report import report_command
from .runs import runs_command
from .serve import serve_command
from .show import show_command
from .simulate import simulate_command, simulations_command
from .suites import import_command, schema_group
from .ui import ui_command


class _Main(click.Group):
    """The command group that keeps the exit-code contract for every command, including
    commands that only raise `click.ClickException` (1 is reserved for a failed gate or
    comparison, so any other error is 2) or let a lake or Ctrl-C error through."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence, wrapped (click cuts it at the width)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from spanscore.lake import LakeError

        try:
            return super().invoke(ctx)
        except LakeError as exc:
            raise LakeUnavailable(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.ClickException as exc:
            # The commands it suggests, as they run here (`message` is final to type checkers).
            vars(exc)["message"] = runnable(exc.message)
            if exc.exit_code == 1:
                raise InputError(exc.format_message()) from exc
            raise
        except Exception as exc:
            from spanscore.lake import is_interrupt

            if is_interrupt(exc):  # Ctrl-C during a DuckDB query, raised as DuckDB's error
                click.echo("interrupted", err=True)
                raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
            raise


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
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
main.add_command(erase_command)
main.add_command(evaluate_command)
main.add_command(compare_command)
main.add_command(report_command)
main.add_command(runs_command)
main.add_command(simulate_command)
main.add_command(simulations_command)
main.add_command(export_command)
main.add_command(judge_check_command)
main.add_command(promote_command)
main.add_command(import_command)
main.add_command(schema_group)
main.add_command(ui_command)
main.add_command(mcp_command)

# The demo imports the example agent (and its dependencies) only when it runs.
from .demo import demo_command  # noqa: E402

main.add_command(demo_command)

__all__ = ["main"]
