"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

# The exit codes of every command (docs/reference.md, "Commands"; `spanscore --help`).
EXIT_OK = 0
EXIT_FAILED = 1  # a gate, a run rule or a comparison failed: the only reason for 1
EXIT_USAGE = 2  # a usage, suite or input error (click's usage errors are 2 too)
EXIT_LAKE = 3  # the lake cannot be opened (missing, not a lake, locked, wrong version)
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 a gate or a comparison failed; 2 a usage, suite or input error; "
    "3 the lake cannot be opened; 130 interrupted."
)


class InputError(click.ClickException):
    """A usage, suite or input error that is not click's own: exit 2."""

    exit_code = EXIT_USAGE


class LakeUnavailable(click.ClickException):
    """The lake cannot be opened or used: exit 3."""

    exit_code = EXIT_LAKE


MISSING_LAKE = (
    "Missing option '--lake': the lake's directory or PostgreSQL connection string "
    "(or set SPANSCORE_LAKE)"
)


def _lake_given(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or not value.strip():
        if ctx.resilient_parsing:
            return value
        raise click.UsageError(MISSING_LAKE, ctx=ctx)
    return value


def lake_option(required: bool = True) -> Callable[[F], F]:
    return click.option(
        "--lake",
        envvar="SPANSCORE_LAKE",
        required=False,
        callback=_lake_given if required else None,
        metavar="DIR|POSTGRES_URL",
        help="Lake directory or PostgreSQL connection string.  [env: SPANSCORE_LAKE]"
        + ("  [required]" if required else ""),
    )


def open_lake_or_fail(lake: str, *, create: bool = False, read_only: bool = False) -> Any:
    """A lake connection, or a ClickException that says why not."""
    from spanscore.lake import LakeError, connect

    try:
        return connect(lake, create=create, read_only=read_only)
    except LakeError as exc:
        raise LakeUnavailable(str(exc)) from exc
    except Exception as exc:  # duckdb errors while attaching: show them plainly
        raise LakeUnavailable(f"cannot open lake {lake}: {exc}") from exc


def allow_outside_metrics_option() -> Callable[[F], F]:
    """The opt-in to run a suite's custom metric files that lie outside the suite's folder."""
    return click.option(
        "--allow-outside-metrics",
        is_flag=True,
        help="Run the suite's custom metric files even when they are outside the suite's "
        "folder (they are Python: allow only files you trust).",
    )
