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

import importlib
from typing import Any

import click

from .invocation import runnable
from .options import EXIT_CODES_HELP, EXIT_INTERRUPTED, InputError, LakeUnavailable

# Each command by name: its module and the click command in it. A command's module is imported
# when the command runs or a help lists it, so that `spanscore show` does not import the
# collector, the simulator or asyncio (a tenth of a cold `show`).
COMMANDS = {
    "serve": ("serve", "serve_command"),
    "sql": ("query", "sql_command"),
    "status": ("query", "status_command"),
    "show": ("show", "show_command"),
    "erase": ("erase", "erase_command"),
    "evaluate": ("evaluate", "evaluate_command"),
    "compare": ("compare", "compare_command"),
    "report": ("report", "report_command"),
    "runs": ("runs", "runs_command"),
    "simulate": ("simulate", "simulate_command"),
    "simulations": ("simulate", "simulations_command"),
    "export": ("export", "export_command"),
    "judge-check": ("judge_check", "judge_check_command"),
    "promote": ("promote", "promote_command"),
    "import": ("suites", "import_command"),
    "schema": ("suites", "schema_group"),
    "ui": ("ui", "ui_command"),
    "mcp": ("mcp", "mcp_command"),
    # The demo imports the example agent (and its dependencies) only when it runs.
    "demo": ("demo", "demo_command"),
}


class _Main(click.Group):
    """The command group that keeps the exit-code contract for every command, including
    commands that only raise `click.ClickException` (1 is reserved for a failed gate or
    comparison, so any other error is 2) or let a lake or Ctrl-C error through; its commands
    are imported when first wanted (`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, name = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f".{module}", __name__), name)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in COMMANDS and args[0] not in self.commands:
            self.every_command()  # an unknown name: click's "did you mean" looks at them all
        return super().resolve_command(ctx, args)

    def every_command(self) -> dict[str, click.Command]:
        """Every command by name, all imported (for the docs and their tests)."""
        for name in COMMANDS:
            self.get_command(click.Context(self), name)
        return dict(sorted(self.commands.items()))

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


__all__ = ["main"]
