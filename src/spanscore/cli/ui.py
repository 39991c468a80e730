"""`spanscore ui`: the review app over a lake."""

from __future__ import annotations

import click

from .options import EXIT_USAGE, lake_option, listening_socket, open_lake_or_fail, option


@click.command("ui")
@lake_option()
@option(
    "--host",
    envvar="SPANSCORE_UI_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Anything but loopback needs --token.",
)
@option(
    "--port",
    envvar="SPANSCORE_UI_PORT",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port (0: any free port; the URL printed says which).",
)
@option(
    "--token",
    "tokens",
    envvar="SPANSCORE_UI_TOKEN",
    multiple=True,
    help="A token every request must carry (repeatable). NAME:SECRET names the reviewer "
    "whose labels it writes. The printed sign-in URL carries the first.",
)
@option(
    "--promote-into",
    "promote_into",
    envvar="SPANSCORE_UI_PROMOTE_INTO",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A suite file the conversation page may append a promoted scenario to (repeatable); "
    "the app writes no other file.",
)
@option(
    "--reviewer",
    envvar="SPANSCORE_REVIEWER",
    help="Who labels, when neither the token nor the session names anyone (default: the OS user).",
)
def ui_command(
    lake: str,
    host: str,
    port: int,
    tokens: tuple[str, ...],
    promote_into: tuple[str, ...],
    reviewer: str | None,
) -> None:
    """Serve the review app: run history and comparison, conversations, review queues,
    labels and the judge's agreement with them, over the lake (while the collector ingests).

    \b
    $ spanscore ui --lake ./spanscore-demo
    spanscore ui: http://127.0.0.1:8765/
    """
    import uvicorn

    from spanscore.ui import create_app
    from spanscore.ui.security import default_reviewer, is_loopback

    if not is_loopback(host) and not tokens:
        click.echo(
            f"Error: --host {host} is not loopback: anyone who reaches it could read the "
            "conversations and write labels. Give --token SECRET (or NAME:SECRET), or keep "
            "the default --host 127.0.0.1.",
            err=True,
        )
        raise SystemExit(EXIT_USAGE)
    open_lake_or_fail(lake).close()  # the lake's own error, before anything binds
    app = create_app(
        lake,
        tokens=list(tokens),
        reviewer=reviewer or default_reviewer(),
        promote_into=list(promote_into),
    )
    sock, base = listening_socket(host, port)
    url = base + "/"
    click.echo(
        f"spanscore ui: {url}"
        + (f"?token={tokens[0].partition(':')[2] or tokens[0]}" if tokens else ""),
        err=False,
    )
    click.echo("  (Ctrl-C stops it)", err=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
