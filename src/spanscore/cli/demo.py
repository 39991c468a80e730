"""`spanscore demo`: the product end to end on an embedded lake, no API key needed."""

from __future__ import annotations

from pathlib import Path

import click

from .options import option


@click.command("demo")
@option(
    "--lake",
    envvar="SPANSCORE_DEMO_LAKE",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("spanscore-demo"),
    show_default=True,
    help="Where the demo's lake goes (recreated on each run).",
)
def demo_command(lake: Path) -> None:
    """Start a collector, run the example customer-service agent, query what it stored.

    \b
    $ spanscore demo
    """
    from spanscore.examples.demo import run_demo

    from .invocation import spanscore_command

    try:
        run_demo(lake, echo=click.echo, command=spanscore_command())
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
