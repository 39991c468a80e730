"""`spanscore erase`: conversations removed from the lake, and from its files on disk."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from .options import InputError, LakeUnavailable, lake_option, open_lake_or_fail, option


@click.command("erase")
@lake_option()
@click.argument("conversation_ids", nargs=-1, metavar="[CONVERSATION_ID]...")
@option(
    "--where",
    envvar="SPANSCORE_WHERE",
    metavar="SQL",
    help="Erase the conversations this condition over the `conversations` view matches "
    "(such as \"service_name = 'checkout' AND start_time < '2026-01-01'\").",
)
@option(
    "--dry-run/--no-dry-run",
    "dry_run",
    envvar="SPANSCORE_DRY_RUN",
    default=None,
    help="List what would be erased, and erase nothing (the default when standard input is "
    "a terminal, unless --yes).",
)
@option(
    "--yes",
    envvar="SPANSCORE_YES",
    is_flag=True,
    help="Erase without asking. Without it, erase lists what it would erase at a terminal "
    "(unless --no-dry-run) and refuses without one (a script); also needed for a --where that "
    "matches every conversation.",
)
@option(
    "--finish",
    envvar="SPANSCORE_FINISH",
    is_flag=True,
    help="Only finish earlier erasures whose files are still on disk (interrupted, or "
    "deferred while an evaluation ran).",
)
@option("--json", "as_json", envvar="SPANSCORE_ERASE_JSON", is_flag=True, help="Print JSON.")
def erase_command(
    lake: str,
    conversation_ids: tuple[str, ...],
    where: str | None,
    dry_run: bool | None,
    yes: bool,
    finish: bool,
    as_json: bool,
) -> None:
    """Erase conversations: their spans and log records (and every other span of their
    traces), their stored trajectories, their answers in the judge cache and their scores'
    explanations and details. Then their old data files are rewritten, the snapshots that
    still reference them expired, and the files deleted: the text is gone from disk, not
    only from queries. Each erasure is recorded in the `erasures` table: who, when, how many
    rows (not which conversations).

    An unknown id is reported and nothing is erased. Safe while a collector ingests and an
    evaluation runs (the old files then stay until the run ends: the next maintenance or
    `erase --finish` deletes them). Erasing also ends time travel: every older snapshot goes.

    \b
    $ spanscore erase --lake ./lake conv-123 conv-456 --yes
    $ spanscore erase --lake ./lake --where "first_user_message ILIKE '%jane@example.com%'"
    """
    from spanscore.lake import lifecycle, retrying

    if finish and (conversation_ids or where):
        raise click.UsageError("--finish takes no conversation ids nor --where")
    if not finish and not conversation_ids and where is None:
        raise click.UsageError("give conversation ids, --where SQL, or --finish")
    if conversation_ids and where is not None:
        raise click.UsageError("give conversation ids or --where, not both")
    if dry_run is None:  # finishing what was erased already needs no confirmation
        dry_run = sys.stdin.isatty() and not yes and not finish
    if not dry_run and not finish and not yes and not sys.stdin.isatty():
        # A script (no terminal to have seen a dry run first) says so, as `rm -f` would.
        raise InputError(
            "erase asks for confirmation: add --yes to erase without a terminal (or "
            "--dry-run to list what would be erased)"
        )
    con = open_lake_or_fail(lake)

    def step(sql: Any, what: str) -> list[tuple[Any, ...]]:
        run = sql if callable(sql) else lambda: con.execute(sql).fetchall()
        result: list[tuple[Any, ...]] = retrying(run, con=con, deadline_s=120.0, what=what)
        return result

    report: dict[str, Any] = {}
    try:
        if not dry_run:
            # An erasure interrupted before its files were deleted is finished first.
            earlier = lifecycle.finish_erasures(con, step)
            report["earlier_erasures_finished"] = earlier["erasures_finished"]
            report["earlier_erasures_deferred"] = earlier["purge_deferred"]
        if finish and dry_run:
            pending = len(lifecycle.pending_erasures(con, "erase"))
            _print(report, as_json, note=f"dry run: {pending} erasure(s) left to finish")
            return
        if finish:
            if report.get("earlier_erasures_deferred"):
                _print(report, as_json)
                _not_finished(con, lake, earlier)
            _print(report, as_json, note="" if earlier["erasures_finished"] else _NOTHING_LEFT)
            return
        try:
            selection = lifecycle.select_conversations(con, conversation_ids, where)
        except Exception as exc:  # a --where that is no valid condition
            import duckdb

            if isinstance(exc, duckdb.Error) and where is not None:
                raise InputError(f"--where: {exc}") from exc
            raise
        report["selection"] = selection.as_dict()
        if selection.unknown:
            _print(report, as_json)
            raise InputError(
                f"not in the lake: {', '.join(selection.unknown)} (never stored, or erased "
                "already); nothing was erased"
            )
        if not selection.conversations:
            report["erased"] = False
            _print(report, as_json, note="no conversation matches: nothing to erase")
            return
        if where is not None and not yes and not dry_run:  # a dry run lists them all
            [(total,)] = con.execute("SELECT count(*) FROM conversations").fetchall()
            if len(selection.conversations) >= int(total):
                _print(report, as_json)
                raise InputError(
                    f"--where matches every conversation ({total}): add --yes to erase them all"
                )
        if dry_run:
            report["dry_run"] = True
            if where is not None:
                report["conversation_ids"] = selection.conversations
            _print(report, as_json, note="dry run: nothing erased (add --yes to erase)")
            return
        erase_id = lifecycle.erase(
            con, selection, selection_kind="where" if where is not None else "ids"
        )
        report["erase_id"] = erase_id
        done = lifecycle.finish_erasures(con, step)
        report |= done
        if done.get("purge_deferred"):
            _print(report, as_json, note="erased from the lake's data")
            _not_finished(con, lake, done)
        _print(report, as_json, note="erased, and their files deleted")
    finally:
        con.close()


_NOTHING_LEFT = "no erasure left to finish"


def _not_finished(con: Any, lake: str, done: dict[str, int]) -> None:
    """Exit non-zero, naming what keeps an erasure's old files or catalog values on disk, and
    when they go."""
    from spanscore.lake import LakeLocation
    from spanscore.lake.locks import writer_pid
    from spanscore.lake.snapshots import running_evaluations

    again = f"`spanscore erase --finish --lake {shlex.quote(lake)}`"
    pid = writer_pid(LakeLocation.parse(lake).directory)
    maintenance = (
        f"the collector (pid {pid}) serving this lake finishes it at its next maintenance "
        "(every --maintenance-interval-s, 300 s by default)"
        if pid is not None
        else "a collector's next maintenance on this lake finishes it"
    )
    if done.get("catalog_busy"):
        holder = (
            f"the collector (pid {pid}) serving this lake, or another process reading it"
            if pid is not None
            else "another process reading the lake (a query, show, report or evaluation)"
        )
        raise LakeUnavailable(
            "the erased rows are gone from the lake's data, but their old values are still in "
            f"its catalog file: {holder} kept the catalog open for a minute. {maintenance}; "
            f"or run {again} again once that process closed the lake"
        )
    runs = running_evaluations(con)
    holder = (
        f"the running evaluation {', '.join(runs)} reads the snapshot it started from"
        if runs
        else "an evaluation started meanwhile reads the snapshot it started from"
    )
    raise LakeUnavailable(
        f"the erased rows are gone from the lake's data, but their old files stay on disk: "
        f"{holder}. Once it ends, {maintenance}; or run {again}"
    )


def _print(report: dict[str, Any], as_json: bool, note: str = "") -> None:
    if as_json:
        click.echo(json.dumps({**report, **({"note": note} if note else {})}, indent=2))
        return
    if report.get("earlier_erasures_finished"):
        click.echo(f"finished {report['earlier_erasures_finished']} earlier erasure(s)")
    selection = report.get("selection")
    if selection:
        click.echo(
            f"conversations {selection['conversations']}  spans {selection['spans']}  "
            f"log records {selection['log_records']}  scores {selection['scores']}  "
            + "  ".join(f"{t} {n}" for t, n in selection["derived_rows"].items())
        )
        if selection["unknown"]:
            click.echo("unknown: " + ", ".join(selection["unknown"]))
    for conversation in report.get("conversation_ids", []):
        click.echo(f"  {conversation}")
    if "files_deleted" in report:
        click.echo(
            f"files rewritten {report['files_rewritten']}  snapshots expired "
            f"{report['snapshots_expired']}  files deleted {report['files_deleted']}"
        )
    if note:
        click.echo(note)
