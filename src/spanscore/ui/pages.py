"""The pages: server-rendered from the same read functions as the JSON API (`api.Api`), so a
page and its JSON twin under /api/ cannot disagree. Templates escape everything by default;
data a page's script needs goes in a JSON block (`tojson` escapes `<`, `>`, `&`, `'`)."""

from __future__ import annotations

from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from spanscore.evaluation import review

from .api import Api, json_default, query_model, refusal
from .security import reviewer_of

# Steps of a conversation its page embeds (the JSON twin has them all).
PAGE_STEPS = 2_000

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("spanscore.ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.0f}%"


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _when(value: Any) -> str:
    if value is None:
        return "-"
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return text.replace("T", " ")[:19]


def _path(value: Any) -> str:
    """A value as one URL path segment... or several: conversation ids may hold `/`."""
    return quote(str(value), safe="/")


def _heat(value: Any) -> str:
    """A pass rate as a CSS class from `h0` (none passed) to `h10` (all passed)."""
    return "na" if value is None else f"h{round(10 * float(value))}"


_env.filters.update(pct=_pct, num=_num, when=_when, path=_path, heat=_heat)
_env.globals.update(urlencode=urlencode, zip=zip)
# `tojson` (the data a page's script reads) writes times as ISO text, as the API does.
_env.policies["json.dumps_kwargs"] = {"default": json_default}


class Pages:
    def __init__(self, api: Api) -> None:
        self.api = api

    def _render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        page = _env.get_template(template).render(
            request_path=request.url.path,
            reviewer=reviewer_of(request, self.api.reviewer),
            **context,
        )
        return HTMLResponse(page, status_code=status)

    def _guard(self, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                result: Response = await handler(request)
                return result
            except Exception as exc:
                refused = refusal(exc)
                if refused is None:
                    raise
                status, message = refused
                status = 400 if status == 422 else status  # a page's query: a bad request
                return self._render(request, "error.html", status, message=message)

        return endpoint

    async def index(self, request: Request) -> Response:
        data = await self.api.runs(request)
        for suite in data["suites"]:
            # One row per scenario and metric, a cell per run (None: not scored in it).
            keys: dict[tuple[Any, Any], None] = {}
            for run in suite["runs"]:
                for m in run["metrics"]:
                    keys.setdefault((m["scenario_id"], m["metric"]), None)
            suite["rows"] = [
                {
                    "scenario_id": scenario,
                    "metric": metric,
                    "cells": [
                        next(
                            (
                                m
                                for m in run["metrics"]
                                if (m["scenario_id"], m["metric"]) == (scenario, metric)
                            ),
                            None,
                        )
                        for run in suite["runs"]
                    ],
                }
                for scenario, metric in keys
            ]
        return self._render(request, "index.html", suites=data["suites"])

    async def run(self, request: Request) -> Response:
        data = await self.api.run(request)
        return self._render(request, "run.html", view=data)

    async def compare(self, request: Request) -> Response:
        data = await self.api.compare(request)
        return self._render(request, "compare.html", view=data)

    async def conversations(self, request: Request) -> Response:
        f = query_model(request, review.ConversationFilter)
        data = await self.api.conversations(request)
        return self._render(request, "conversations.html", page=data, f=f)

    async def conversation(self, request: Request) -> Response:
        # A conversation of tens of thousands of steps opens with its first ones
        # (`?max_steps=all` draws every one; the renderer pages them either way).
        data = await self.api.conversation(request, default_steps=PAGE_STEPS)
        client = {
            "conversation_id": data["conversation_id"],
            "detail": data["detail"],
            "shown_run": data["shown_run"],
            "scores": data["scores"],
            "promote_into": list(self.api.promote_into.values()),
        }
        return self._render(request, "conversation.html", view=data, client=client)

    async def queues(self, request: Request) -> Response:
        data = await self.api.queues(request)
        runs = await self.api.runs(request)
        return self._render(request, "queues.html", queues=data["queues"], suites=runs["suites"])

    async def queue(self, request: Request) -> Response:
        data = await self.api.queue(request)
        return self._render(request, "queue.html", view=data, client=data)

    async def judge(self, request: Request) -> Response:
        data = await self.api.judge(request)
        return self._render(request, "judge.html", metrics=data["metrics"])

    def routes(self) -> list[Route]:
        g = self._guard
        return [
            Route("/", g(self.index)),
            Route("/runs/{run}", g(self.run)),
            Route("/compare/{a}/{b}", g(self.compare)),
            Route("/conversations", g(self.conversations)),
            Route("/conversations/{conversation_id:path}", g(self.conversation)),
            Route("/queues", g(self.queues)),
            Route("/queues/{name}", g(self.queue)),
            Route("/judge", g(self.judge)),
        ]


def static_text(name: str) -> str:
    if name in ("trajectory.js", "report.css"):
        # The report's own renderer and styles: one implementation for both.
        base = resources.files("spanscore.evaluation.report") / "assets"
    else:
        base = resources.files("spanscore.ui") / "static"
    return (base / name).read_text(encoding="utf-8")
