"""`spanscore promote`: a conversation of the lake becomes a scenario of a suite file."""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path

import click

from .invocation import runnable
from .options import InputError, lake_option, open_lake_or_fail, option, suite_options


@click.command("promote")
@click.argument("conversation_id", metavar="CONVERSATION")
@lake_option()
@suite_options
@option(
    "--scenario-id",
    envvar="SPANSCORE_SCENARIO_ID",
    help="The new scenario's id (default: made of the conversation id, made unique in the "
    "suite). An id the suite already has is an error.",
)
@option(
    "--arguments",
    envvar="SPANSCORE_ARGUMENTS",
    type=click.Choice(["exact", "partial"]),
    default="exact",
    show_default=True,
    help="How the expected tool calls' arguments compare: exact (the same keys and values), "
    "or partial (these keys and values, others allowed).",
)
@option(
    "--no-response",
    envvar="SPANSCORE_NO_RESPONSE",
    is_flag=True,
    help="No check of the final answer (default: its similarity to the conversation's).",
)
@option(
    "--dry-run",
    envvar="SPANSCORE_PROMOTE_DRY_RUN",
    is_flag=True,
    help="Print the scenario, checked, and write nothing.",
)
def promote_command(
    conversation_id: str,
    lake: str,
    suite_path: str,
    allow_outside_metrics: bool,
    scenario_id: str | None,
    arguments: str,
    no_response: bool,
    dry_run: bool,
) -> None:
    """Append a scenario made from a conversation to a suite file: it selects that
    conversation, expects the tool calls it made (in order), checks its final answer, and has
    a `user:` block (the first user message as goal and opening, the later ones as what the
    user knows) that `spanscore simulate` replays. The file's comments and order are kept; the
    new suite is loaded before it replaces the file, which is unchanged on any error.

    The scenario passes on its conversation. Edit its expectations to what the agent should
    have done: it then fails until the agent does.

    \b
    $ spanscore promote cs-cancel-2 --lake ./spanscore-demo --suite suite.yaml
    """
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.suites.load import SuiteError
    from spanscore.evaluation.suites.promote import PromoteError, preview_promotion, promote

    act = preview_promotion if dry_run else promote
    con = open_lake_or_fail(lake)
    try:
        promoted = act(
            con,
            conversation_id,
            suite_path,
            scenario_id=scenario_id,
            arguments="partial" if arguments == "partial" else "exact",
            response=not no_response,
            allow_outside_metrics=allow_outside_metrics,
        )
    except SuiteError as exc:
        raise InputError(f"the suite cannot be used:\n{exc}") from None
    except PromoteError as exc:
        raise InputError(str(exc)) from None
    finally:
        con.close()
    where = f"{promoted.path} (line {promoted.line})" if promoted.line else str(promoted.path)
    done = "would append" if dry_run else "appended"
    click.echo(f"{done} scenario {promoted.scenario_id!r} to {where}:")
    click.echo(promoted.text.rstrip("\r\n"))
    for note in promoted.notes:
        click.echo(f"note: {note}", err=True)
    if dry_run:
        return
    suite = shlex.quote(str(Path(suite_path)))
    lake_arg = shlex.quote(lake)
    since = ""
    ended = promoted.conversation_end
    if ended is not None:
        start = ended.astimezone(dt.UTC) - dt.timedelta(seconds=1)
        since = f" --since {start:%Y-%m-%dT%H:%M:%SZ}"
        # A run leaves the conversations of its last minutes for the next one (`--settle`):
        # this one has ended.
        if dt.datetime.now(dt.UTC) - ended < dt.timedelta(seconds=RunOptions.settle_s):
            since += " --settle 0"
    hints = [f"score it: `spanscore evaluate --lake {lake_arg} --suite {suite}{since}`"]
    if "user" in promoted.scenario:
        scenario = shlex.quote(promoted.scenario_id)
        hints.append(
            f"replay it: `spanscore simulate --lake {lake_arg} --suite {suite} "
            f"--scenario {scenario} --agent YOUR_AGENT`"
        )
    for hint in hints:
        click.echo(runnable(hint))
