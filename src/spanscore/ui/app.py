"""The review app as one ASGI application: pages, the JSON API, static files, the guard."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .api import Api
from .lake import AppLake
from .pages import Pages, static_text
from .security import Guard, Token

_STATIC = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "trajectory.js": "text/javascript",
    "report.css": "text/css",
}


def create_app(
    lake: str,
    *,
    tokens: list[str] = (),  # type: ignore[assignment]
    reviewer: str = "reviewer",
    promote_into: list[str] = (),  # type: ignore[assignment]
) -> Starlette:
    """The app over `lake`. `tokens` (each `SECRET` or `NAME:SECRET`): every request needs
    one. `reviewer`: who labels when neither the token nor the session names anyone.
    `promote_into`: the suite files the conversation page may append a scenario to."""
    app_lake = AppLake(lake)
    api = Api(app_lake, reviewer, list(promote_into))
    pages = Pages(api)
    assets = {name: static_text(name).encode() for name in _STATIC}

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(
            assets[name],
            media_type=_STATIC[name],
            headers={"cache-control": "no-cache"},
        )

    routes = [*api.routes(), Route("/static/{name}", static), *pages.routes()]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            app_lake.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.lake = app_lake
    app.add_middleware(Guard, tokens=[Token.parse(t) for t in tokens])
    return app
