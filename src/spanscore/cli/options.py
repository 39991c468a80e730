"""Options shared by several commands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

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


def option(*param_decls: str, envvar: str | list[str], **attrs: Any) -> Callable[[F], F]:
    """A click option that also reads `envvar` (named by the rule in the package docstring;
    a list: the first set one, the rule's name first) and shows it in `--help`."""
    return click.option(*param_decls, envvar=envvar, show_envvar=True, **attrs)


def from_environment(name: str) -> bool:
    """Whether the current command's parameter `name` was read from its variable."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.ENVIRONMENT


# Where the command's `--lake` is kept for the hints it prints (`invocation.runnable`): a
# context's `meta` is shared by the whole command line, the group's error handling included.
LAKE_META = "spanscore.lake"


def _lake_given(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or not value.strip():
        if ctx.resilient_parsing:
            return value
        raise click.UsageError(MISSING_LAKE, ctx=ctx)
    ctx.meta[LAKE_META] = value
    return value


def _lake_kept(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and value.strip():
        ctx.meta[LAKE_META] = value
    return value


def lake_option(required: bool = True) -> Callable[[F], F]:
    return option(
        "--lake",
        envvar="SPANSCORE_LAKE",
        required=False,
        callback=_lake_given if required else _lake_kept,
        metavar="DIR|POSTGRES_URL",
        help="Lake directory or PostgreSQL connection string"
        + (" (required)." if required else "."),
    )


def format_option(command: str, choices: list[str], description: str) -> Callable[[F], F]:
    """`--format`: each command has its own formats, so its own variable."""
    return option(
        "--format",
        "fmt",
        envvar=f"SPANSCORE_{command.upper().replace('-', '_')}_FORMAT",
        type=click.Choice(choices),
        default=choices[0],
        show_default=True,
        help=description,
    )


def open_lake_or_fail(lake: str, *, create: bool = False, read_only: bool = False) -> Any:
    """A lake connection, or a ClickException that says why not."""
    from spanscore.lake import LakeError, connect, is_interrupt

    try:
        return connect(lake, create=create, read_only=read_only)
    except Exception as exc:
        if is_interrupt(exc):  # Ctrl-C while DuckDB opened it: exit 130, not "cannot open"
            raise
        if isinstance(exc, LakeError):
            raise LakeUnavailable(str(exc)) from exc
        # duckdb errors while attaching: show them plainly
        raise LakeUnavailable(f"cannot open lake {lake}: {exc}") from exc


def suite_options(fn: F) -> F:
    """`--suite` and the opt-in to run its custom metric files from outside its folder."""
    fn = option(
        "--allow-outside-metrics",
        envvar="SPANSCORE_ALLOW_OUTSIDE_METRICS",
        is_flag=True,
        help="Run the suite's custom metric files even when they are outside the suite's "
        "folder (they are Python: allow only files you trust).",
    )(fn)
    return option(
        "--suite",
        "suite_path",
        envvar="SPANSCORE_SUITE",
        required=True,
        type=click.Path(),
        help="Suite file (YAML or JSON), another tool's native test file, or a directory of "
        "watsonx datasets.",
    )(fn)


_JUDGE_SETTINGS = {  # option's parameter -> the judge setting it overrides
    "judge_model": "model",
    "judge_base_url": "base_url",
    "judge_concurrency": "concurrency",
    "judge_timeout": "timeout_s",
    "max_judge_calls": "max_calls",
    "max_judge_cost": "max_cost_usd",
}


def judge_options(fn: F) -> F:
    """The judge's options, over the suite's `judge:` block. The command receives them as one
    `judge` argument: the settings given, by the judge's names (`model`, `cache`, ...)."""

    @functools.wraps(fn)
    def command(*args: Any, no_judge_cache: bool, **kwargs: Any) -> Any:
        judge = {
            setting: value
            for name, setting in _JUDGE_SETTINGS.items()
            if (value := kwargs.pop(name)) is not None
        }
        if no_judge_cache:
            judge["cache"] = False
        return fn(*args, judge=judge, **kwargs)

    decorators = [
        option(
            "--judge-model",
            envvar="SPANSCORE_JUDGE_MODEL",
            help="Judge model (over the suite's judge).",
        ),
        option(
            "--judge-base-url",
            envvar="SPANSCORE_JUDGE_BASE_URL",
            help="OpenAI-compatible endpoint of the judge (default: the suite's, else "
            "OPENAI_BASE_URL).",
        ),
        option(
            "--judge-concurrency",
            envvar="SPANSCORE_JUDGE_CONCURRENCY",
            type=click.IntRange(min=1),
            help="Most judge calls in flight; below it the judge finds the provider's limit "
            "by itself.",
        ),
        option(
            "--judge-timeout",
            envvar="SPANSCORE_JUDGE_TIMEOUT",
            type=click.FloatRange(min=0, min_open=True),
            help="Seconds per judge call (retried, with backoff, up to the suite's max_attempts).",
        ),
        option(
            "--max-judge-calls",
            envvar="SPANSCORE_MAX_JUDGE_CALLS",
            type=click.IntRange(min=0),
            help="Stop judging after this many calls: the rest are recorded as skipped.",
        ),
        option(
            "--max-judge-cost",
            envvar="SPANSCORE_MAX_JUDGE_COST",
            type=click.FloatRange(min=0),
            metavar="USD",
            help="Stop judging once this much is spent: the rest are recorded as skipped.",
        ),
        option(
            "--no-judge-cache",
            envvar="SPANSCORE_NO_JUDGE_CACHE",
            is_flag=True,
            help="Ask the judge again even when the lake's judge_cache has the answer.",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return cast(F, command)


def listening_socket(host: str, port: int) -> tuple[Any, str]:
    """A socket listening on `host`:`port` (0: any free port) for a server to take over, and
    the base URL it answers at; exit 2 with the reason when it cannot bind."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening already: a client that reads the printed URL may connect at once (the
        # server accepts what waits in the backlog when it starts).
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        click.echo(f"Error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    shown = f"[{host}]" if ":" in host else host
    return sock, f"http://{shown}:{sock.getsockname()[1]}"
