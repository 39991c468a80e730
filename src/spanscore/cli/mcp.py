"""`spanscore mcp`: the lake to a coding agent, over the Model Context Protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .options import EXIT_USAGE, lake_option, listening_socket, open_lake_or_fail, option

if TYPE_CHECKING:
    from spanscore.mcp import LakeServer
    from spanscore.ui.security import Token


@click.command("mcp")
@lake_option()
@option(
    "--port",
    envvar="SPANSCORE_MCP_PORT",
    type=click.IntRange(0, 65535),
    help="Serve streamable HTTP on this port (0: any free port; the URL printed says which). "
    "Without it: stdio.",
)
@option(
    "--host",
    envvar="SPANSCORE_MCP_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind with --port. Anything but loopback needs --token.",
)
@option(
    "--token",
    "tokens",
    envvar="SPANSCORE_MCP_TOKEN",
    multiple=True,
    help="With --port: a token every HTTP request must carry as Authorization: Bearer TOKEN "
    "(repeatable; NAME:SECRET is taken as in `spanscore ui`, the SECRET is sent).",
)
def mcp_command(lake: str, port: int | None, host: str, tokens: tuple[str, ...]) -> None:
    """Serve the lake to a coding agent over MCP: runs, failing conversations, one
    conversation, labels, the judge's agreement and read-only SQL, as tools; the tables'
    reference and the runs' suite files, as resources. Read-only. Stdio unless --port.

    \b
    $ spanscore mcp --lake ./spanscore-demo
    $ spanscore mcp --lake ./spanscore-demo --port 8766 --token "$TOKEN"
    spanscore mcp: http://127.0.0.1:8766/mcp
    """
    from spanscore.mcp import create_server
    from spanscore.ui.lake import AppLake
    from spanscore.ui.security import Token, is_loopback

    if port is None:
        # Typed on the command line they ask for HTTP; from the environment (shared with an
        # HTTP server's settings) they are left unused.
        source = click.get_current_context().get_parameter_source
        if any(source(n) is click.core.ParameterSource.COMMANDLINE for n in ("host", "tokens")):
            raise click.UsageError("--host and --token serve HTTP: give --port too")
    elif not is_loopback(host) and not tokens:
        click.echo(
            f"Error: --host {host} is not loopback: anyone who reaches it could read the "
            "conversations. Give --token SECRET, or keep the default --host 127.0.0.1.",
            err=True,
        )
        raise SystemExit(EXIT_USAGE)
    open_lake_or_fail(lake, read_only=True).close()  # the lake's own error, exit 3
    app_lake = AppLake(lake, read_only=True)
    try:
        server = create_server(app_lake)
        if port is None:
            server.run("stdio")
        else:
            _serve_http(server, host, port, [Token.parse(t) for t in tokens])
    finally:
        app_lake.close()


def _serve_http(server: LakeServer, host: str, port: int, tokens: list[Token]) -> None:
    import uvicorn

    from spanscore.mcp.http import PATH, http_app

    app = http_app(server, host, tokens)
    sock, base = listening_socket(host, port)
    click.echo(f"spanscore mcp: {base}{PATH}")
    click.echo("  (Ctrl-C stops it)", err=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
