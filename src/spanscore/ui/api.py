"""The JSON API under /api/: one endpoint per read function of `spanscore.evaluation.review`,
the pages' data and what scripts and the MCP server use. Described by OpenAPI at
/api/openapi.json, made from the same table of endpoints the routes are.

Errors are JSON `{"error": "..."}`: 400 for a request that cannot be served as asked, 404 for
a conversation, run or queue the lake does not have, 422 for a body or query that does not
validate (with pydantic's `detail`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from spanscore.evaluation import review
from spanscore.evaluation.report.data import ReportError

from .security import reviewer_of


class NotFound(LookupError):
    pass


class PromoteRequest(BaseModel):
    """Turn a conversation into a scenario of one of the suite files the app was started with
    (`spanscore ui --promote-into FILE`); `dry_run`: show what would be appended."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(min_length=1)
    suite: str = Field(min_length=1)
    scenario_id: str | None = None
    arguments: Literal["exact", "partial"] = "exact"
    response: bool = True
    dry_run: bool = False


def json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=json_default, ensure_ascii=False).encode()


def error(status: int, message: str, **extra: Any) -> JSON:
    return JSON({"error": message, **extra}, status_code=status)


def query_model(request: Request, model: type[BaseModel]) -> Any:
    values: dict[str, Any] = {}
    fields = model.model_fields
    for key, value in request.query_params.multi_items():
        if key in fields and value != "":
            values[key] = value
    return model.model_validate(values)


async def _body(request: Request, model: type[BaseModel]) -> Any:
    try:
        raw = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the body is not JSON") from None
    return model.model_validate(raw)


Handler = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # Starlette's path syntax
    summary: str
    handler: Handler
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    path_params: tuple[str, ...] = ()


def refusal(exc: Exception) -> tuple[int, str] | None:
    """The HTTP status and message of an error a request caused (None: not one of those, a
    bug): one mapping for the API's answers and the pages'. A body or query that does not
    validate is 422 to the API (with pydantic's detail) and 400 to a page."""
    if isinstance(exc, NotFound | review.NotInLake):
        return 404, str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, ReportError):  # an unknown run is not found; an ambiguous one is not
        message = str(exc)
        return (404 if message.startswith("no evaluation run") else 400), message
    if isinstance(exc, ValidationError):
        problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        return 422, "; ".join(problems)
    # A promotion refused (PromoteError, SuiteError) is a ValueError too.
    if isinstance(exc, ValueError | review.LabelError | review.QueueError):
        return 400, str(exc)
    return None


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await handler(request)
        except ValidationError as exc:
            return error(422, "the request does not validate", detail=exc.errors(include_url=False))
        except Exception as exc:
            refused = refusal(exc)
            if refused is None:
                raise
            return error(*refused)
        return result if isinstance(result, Response) else JSON(result)

    return endpoint


class Api:
    """The endpoints over one `AppLake`."""

    def __init__(self, lake: Any, reviewer: str, promote_into: list[str]) -> None:
        self.lake = lake
        self.reviewer = reviewer
        # The only files the app writes besides the lake: those its operator named.
        self.promote_into = {str(Path(p).resolve()): p for p in promote_into}

    def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        def call() -> Any:
            with self.lake.read() as cur:
                return fn(cur, *args, **kwargs)

        return run_in_threadpool(call)

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        def call() -> Any:
            with self.lake.write() as cur:
                return fn(cur, *args, **kwargs)

        return run_in_threadpool(call)

    # --- reads --------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Any:
        suite = request.query_params.get("suite") or None
        return {"suites": await self._read(review.run_history, suite=suite)}

    async def run(self, request: Request) -> Any:
        return await self._read(review.run_view, request.path_params["run"])

    async def compare(self, request: Request) -> Any:
        p = request.path_params
        return await self._read(review.compare_view, p["a"], p["b"])

    async def conversations(self, request: Request) -> Any:
        f = query_model(request, review.ConversationFilter)
        page = await self._read(review.list_conversations, f)
        return {"count": page.count, "next": page.next, "filter": page.filter, "rows": page.rows}

    async def conversation(self, request: Request, default_steps: int | None = None) -> Any:
        """`max_steps` (a number, or `all`) over `default_steps` (None: all of them)."""
        cid = request.path_params["conversation_id"]
        run = request.query_params.get("run") or None
        steps = request.query_params.get("max_steps")
        if steps in (None, ""):
            max_steps = default_steps
        else:
            max_steps = None if steps == "all" else _int(request, "max_steps", 0, 1, 10**9)
        found = await self._read(review.conversation_view, cid, run=run, max_steps=max_steps)
        if found is None:
            raise NotFound(f"no conversation {cid!r} in this lake")
        return found

    async def spans(self, request: Request) -> Any:
        cid = request.path_params["conversation_id"]
        offset = _int(request, "offset", 0, 0, 10**9)
        limit = _int(request, "limit", 100, 1, 1_000)
        return await self._read(review.raw_spans, cid, offset=offset, limit=limit)

    async def labels(self, request: Request) -> Any:
        cid = request.query_params.get("conversation_id")
        if not cid:
            raise ValueError("give conversation_id")
        history = request.query_params.get("history") in ("1", "true", "yes")
        return {"labels": await self._read(review.labels_of, cid, history=history)}

    async def queues(self, request: Request) -> Any:
        return {"queues": await self._read(review.queues)}

    async def queue(self, request: Request) -> Any:
        reviewer = reviewer_of(request, self.reviewer)
        return await self._read(review.queue_view, request.path_params["name"], reviewer)

    async def judge(self, request: Request) -> Any:
        metric = request.query_params.get("metric") or None
        return {"metrics": await self._read(review.judge_agreement, metric)}

    async def judge_exchange(self, request: Request) -> Any:
        q = request.query_params
        missing = [k for k in ("run", "conversation_id", "metric") if not q.get(k)]
        if missing:
            raise ValueError(f"give {', '.join(missing)}")
        return await self._read(review.judge_exchange, q["run"], q["conversation_id"], q["metric"])

    async def me(self, request: Request) -> Any:
        return {"reviewer": reviewer_of(request, self.reviewer)}

    # --- writes -------------------------------------------------------------------------------

    async def add_label(self, request: Request) -> Any:
        label = await _body(request, review.NewLabel)
        reviewer = reviewer_of(request, self.reviewer)
        return JSON(await self._write(review.add_label, label, reviewer), status_code=201)

    async def add_queue(self, request: Request) -> Any:
        spec = await _body(request, review.QueueSpec)
        reviewer = reviewer_of(request, self.reviewer)
        return JSON(await self._write(review.build_queue, spec, reviewer), status_code=201)

    async def promote(self, request: Request) -> Any:
        from spanscore.evaluation.suites.promote import preview_promotion, promote

        asked = await _body(request, PromoteRequest)
        path = self.promote_into.get(str(Path(asked.suite).resolve()))
        if path is None:
            allowed = ", ".join(self.promote_into.values()) or "none"
            raise ValueError(
                f"{asked.suite!r} is not a suite this app may write (started with "
                f"--promote-into: {allowed})"
            )
        fn = preview_promotion if asked.dry_run else promote
        done = await self._read(
            fn,
            asked.conversation_id,
            path,
            scenario_id=asked.scenario_id,
            arguments=asked.arguments,
            response=asked.response,
        )
        return JSON(
            {
                "scenario_id": done.scenario_id,
                "text": done.text,
                "path": str(done.path),
                "line": done.line,
                "written": done.written,
                "notes": done.notes,
            },
            status_code=200 if asked.dry_run else 201,
        )

    async def openapi(self, request: Request) -> Any:
        return openapi(self.endpoints())

    def endpoints(self) -> list[Endpoint]:
        e = Endpoint
        return [
            e("GET", "/api/runs", "Each suite's runs over time, with gates and figures", self.runs),
            e(
                "GET",
                "/api/runs/{run}",
                "One run: header, gates, summary, trend, pass^k",
                self.run,
                path_params=("run",),
            ),
            e(
                "GET",
                "/api/compare/{a}/{b}",
                "Two runs compared, as `spanscore compare`",
                self.compare,
                path_params=("a", "b"),
            ),
            e(
                "GET",
                "/api/conversations",
                "Conversations filtered, counted, paged by key",
                self.conversations,
                query=review.ConversationFilter,
            ),
            e(
                "GET",
                "/api/conversations/{conversation_id:path}",
                "One conversation: trajectory, scores in every run, labels",
                self.conversation,
                path_params=("conversation_id",),
            ),
            e(
                "GET",
                "/api/spans/{conversation_id:path}",
                "A conversation's raw spans, paged",
                self.spans,
                path_params=("conversation_id",),
            ),
            e(
                "GET",
                "/api/labels",
                "A conversation's labels (history=true: every one)",
                self.labels,
            ),
            e(
                "POST",
                "/api/labels",
                "Label a conversation or one of its scores",
                self.add_label,
                body=review.NewLabel,
            ),
            e("GET", "/api/queues", "The review queues and their progress", self.queues),
            e("POST", "/api/queues", "Build a review queue", self.add_queue, body=review.QueueSpec),
            e(
                "GET",
                "/api/queues/{name}",
                "A queue's items; done marks this reviewer's",
                self.queue,
                path_params=("name",),
            ),
            e(
                "GET",
                "/api/judge",
                "The judge's agreement with the labels, per judged metric",
                self.judge,
            ),
            e(
                "GET",
                "/api/judge/exchange",
                "What the judge was asked (rebuilt from the run's suite) and answered",
                self.judge_exchange,
            ),
            e(
                "POST",
                "/api/promote",
                "Append a scenario made of a conversation to a suite (--promote-into)",
                self.promote,
                body=PromoteRequest,
            ),
            e("GET", "/api/me", "The reviewer this session labels as", self.me),
            e("GET", "/api/openapi.json", "This description", self.openapi),
        ]

    def routes(self) -> list[Route]:
        return [Route(ep.path, guarded(ep.handler), methods=[ep.method]) for ep in self.endpoints()]


def _int(request: Request, key: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{key} must be a whole number, not {text[:20]!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{key} must be between {low} and {high}")
    return value


def openapi(endpoints: list[Endpoint]) -> dict[str, Any]:
    """OpenAPI 3.1 for the endpoints: paths, parameters, request bodies (pydantic's schemas)."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for ep in endpoints:
        path = ep.path.replace(":path}", "}")
        operation: dict[str, Any] = {
            "summary": ep.summary,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {}}},
                "400": {"description": "cannot be served as asked"},
                "401": {"description": "the app's token is missing"},
                "404": {"description": "not in this lake"},
                "422": {"description": "does not validate"},
            },
        }
        parameters = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in ep.path_params
        ]
        if ep.query is not None:
            schema = ep.query.model_json_schema()
            for name, prop in schema.get("properties", {}).items():
                parameters.append({"name": name, "in": "query", "schema": prop})
        if parameters:
            operation["parameters"] = parameters
        if ep.body is not None:
            name = ep.body.__name__
            schemas[name] = ep.body.model_json_schema(ref_template="#/components/schemas/{model}")
            operation["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}
                },
            }
            operation["responses"]["201"] = {"description": "stored"}
        paths.setdefault(path, {})[ep.method.lower()] = operation
    for schema in list(schemas.values()):
        for name, inner in schema.pop("$defs", {}).items():
            schemas.setdefault(name, inner)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "spanscore review app",
            "version": "1",
            "description": "The review app's data: runs, conversations, labels, queues, "
            "the judge's agreement. Send the app's token as `Authorization: Bearer TOKEN` "
            "when it has one; writes come from the app's origin and send JSON.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
