"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def lake_option(required: bool = True) -> Callable[[F], F]:
    return click.option(
        "--lake",
        envvar="SPANSCORE_LAKE",
        required=required,
        metavar="DIR|POSTGRES_URL",
        help="Lake directory or PostgreSQL connection string.  [env: SPANSCORE_LAKE]",
    )


def open_lake_or_fail(lake: str, *, create: bool = False) -> Any:
    """A lake connection, or a ClickException that says why not."""
    from spanscore.lake import LakeError, connect

    try:
        return connect(lake, create=create)
    except LakeError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # duckdb errors while attaching: show them plainly
        raise click.ClickException(f"cannot open lake {lake}: {exc}") from exc
