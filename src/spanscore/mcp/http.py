"""Streamable HTTP: the SDK's app, behind the token rule of `spanscore ui`
(`spanscore.ui.security`): with tokens, every HTTP request carries one as
`Authorization: Bearer SECRET`, else 401. There are no pages and no cookies here, so a token in
the URL is not taken (it would land in logs), and there is no sign-in redirect."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from spanscore.ui.security import Token, bearer, matching_token

PATH = "/mcp"


class BearerOnly:
    """ASGI middleware: a request without one of `tokens` is answered 401."""

    def __init__(self, app: ASGIApp, tokens: list[Token]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = (
            scope["type"] == "http"
            and bool(self.tokens)
            and matching_token(self.tokens, bearer(Request(scope))) is None
        )
        if refused:
            response = JSONResponse(
                {"error": "this MCP server needs its token: send Authorization: Bearer TOKEN"},
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(server: MCPServer[Any], host: str, tokens: list[Token]) -> ASGIApp:
    """The server's streamable HTTP app at `PATH`, guarded by `tokens` (none: loopback only,
    which the command enforces)."""
    app = server.streamable_http_app(streamable_http_path=PATH, host=host)
    return BearerOnly(app, tokens)
