"""The LLM judge's client: one OpenAI-compatible endpoint, called as fast as it allows.

Configuration comes from the suite's `judge:` block (`JudgeConfig`), then `evaluate` options,
then the standard variables: `OPENAI_API_KEY`, `OPENAI_BASE_URL`, and for Azure OpenAI
`AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT`, `OPENAI_API_VERSION`. A suite never holds a
key: `api_key_env` names the variable to read it from.

What a call does:
- the request is the static part first (instructions, rubric, answer schema) and the
  conversation last, so providers' automatic prefix caching applies; temperature 0 and a seed;
- structured output (`response_format: json_schema`, strict) where the endpoint has it; an
  endpoint that refuses it is remembered, and the schema is then asked for in the prompt and
  the answer parsed tolerantly (code fences, text around the object);
- concurrency finds the provider's limit by itself (`AdaptiveLimit`: slow start, additive
  increase, cut on 429), never above the ceiling;
- `retry-after-ms`, `retry-after` and `x-ratelimit-reset-*` are obeyed; 429, 5xx, timeouts and
  answers that do not parse are retried with exponential backoff and full jitter, up to
  `max_attempts`; what still fails is an answer with an `error`, never an exception or a hang.
- tokens (prompt, cached prompt, completion) are read from the usage and priced from
  `PRICES` (USD per million tokens, overridable in the suite), at half price in batch mode.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import heapq
import itertools
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal

import openai
import orjson
from pydantic import BaseModel, ConfigDict, Field

from .judge_http import judge_http_client
from .schema_check import check_arguments, quick_check

OPENAI_URL = "https://api.openai.com/v1"  # the openai client's default base URL
PROMPT_FORMAT = "1"  # bump when the way requests are built changes (part of every cache key)


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0, description="default: the input price")
    output: float = Field(0.0, ge=0)
    batch_discount: float = Field(
        0.5, ge=0, le=1, description="share of the price batch requests cost (OpenAI: half)"
    )


# Published list prices (USD per 1M tokens: input, cached input, output) of common judge and
# embedding models; a suite's `judge.prices` overrides or adds to them.
PRICES: dict[str, Price] = {
    name: Price(input=i, cached_input=c, output=o)
    for name, (i, c, o) in {
        "gpt-4.1": (2.00, 0.50, 8.00),
        "gpt-4.1-mini": (0.40, 0.10, 1.60),
        "gpt-4.1-nano": (0.10, 0.025, 0.40),
        "gpt-4o": (2.50, 1.25, 10.00),
        "gpt-4o-mini": (0.15, 0.075, 0.60),
        "gpt-5": (1.25, 0.125, 10.00),
        "gpt-5-mini": (0.25, 0.025, 2.00),
        "gpt-5-nano": (0.05, 0.005, 0.40),
        "o3": (2.00, 0.50, 8.00),
        "o4-mini": (1.10, 0.275, 4.40),
        "text-embedding-3-small": (0.02, 0.02, 0.0),
        "text-embedding-3-large": (0.13, 0.13, 0.0),
    }.items()
}


class JudgeConfig(BaseModel):
    """The suite's `judge:` block: which endpoint and model judge, and how hard to push it."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("gpt-4.1-mini", description="chat model that judges")
    embedding_model: str = Field(
        "text-embedding-3-small", description="model of /v1/embeddings (judged arguments)"
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, or OpenAI)"
    )
    api_key_env: str | None = Field(
        None, description="variable holding the key (default: OPENAI_API_KEY, Azure's for Azure)"
    )
    azure: bool | None = Field(
        None, description="Azure OpenAI (default: when AZURE_OPENAI_ENDPOINT or api_version is set)"
    )
    api_version: str | None = Field(None, description="Azure API version")
    headers: dict[str, str] = Field(default_factory=dict, description="extra HTTP headers")
    temperature: float = Field(0.0, ge=0, le=2)
    seed: int | None = 0
    max_tokens: int = Field(1024, ge=1, description="longest answer")
    structured_output: Literal["auto", "json_schema", "prompt"] = Field(
        "auto",
        description="auto: json_schema, falling back to asking in the prompt when refused",
    )
    concurrency: int = Field(32, ge=1, description="most calls in flight (the ceiling)")
    timeout_s: float = Field(60.0, gt=0, description="per call")
    max_attempts: int = Field(6, ge=1, description="tries per call, the first included")
    max_calls: int | None = Field(None, ge=0, description="judge calls per run at most")
    max_cost_usd: float | None = Field(None, ge=0, description="judge cost per run at most")
    cache: bool = Field(True, description="reuse answers stored in the lake's judge_cache")
    batch: bool = Field(False, description="send the run's requests through the Batch API")
    batch_poll_s: float = Field(30.0, gt=0, description="batch mode: seconds between polls")
    prices: dict[str, Price] = Field(default_factory=dict, description="model -> price")

    def price(self, model: str) -> Price | None:
        return self.prices.get(model) or PRICES.get(model) or _dated_price(model)

    def is_azure(self) -> bool:
        if self.azure is not None:
            return self.azure
        return self.api_version is not None or (
            self.base_url is None and bool(os.environ.get("AZURE_OPENAI_ENDPOINT"))
        )

    def family(self) -> str:
        """The endpoint family in cache keys: the same model name means the same model within
        a family (OpenAI, Azure OpenAI, or one OpenAI-compatible server's host)."""
        if self.is_azure():
            return "azure"
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or ""
        if not url or "api.openai.com" in url:
            return "openai"
        host = re.sub(r"^[a-z]+://", "", url).split("/", 1)[0].split(":", 1)[0]
        return "compatible:" + host


def _dated_price(model: str) -> Price | None:
    """`gpt-4.1-mini-2025-04-14` is priced as `gpt-4.1-mini`."""
    base = re.sub(r"-\d{4}-\d{2}-\d{2}$", "", model)
    return PRICES.get(base) if base != model else None


# --- requests and answers ------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeRequest:
    """One question for the judge. `messages` (chat) or `text` (embedding). The digest names
    the question whatever endpoint answers it; `JudgeClient.cache_key` adds the endpoint."""

    kind: Literal["chat", "embedding"]
    purpose: str  # the metric or rule asking, for logs and batch ids
    messages: tuple[tuple[str, str], ...] = ()  # (role, content)
    schema_name: str = "verdict"
    schema: Mapping[str, Any] | None = None  # JSON Schema of the answer (chat)
    text: str = ""  # embedding input
    prompt_version: str = "1"

    @cached_property
    def digest(self) -> str:
        return _digest(
            [
                self.kind,
                self.messages,
                self.schema_name,
                self.schema,
                self.text,
                self.prompt_version,
            ]
        )


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.completion_tokens + other.completion_tokens,
            cost,
        )


@dataclass(frozen=True)
class JudgeAnswer:
    """What came back: a parsed JSON object (chat) or a vector (embedding), or why not.

    `skipped` is set when the run's budget left the question unasked; `cached` when the answer
    came from the lake's judge cache (it then cost nothing this time)."""

    value: Any = None
    error: str | None = None
    skipped: str | None = None
    cached: bool = False
    model: str | None = None
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None

    @property
    def problem(self) -> str:
        return self.skipped or self.error or ""


# --- concurrency ---------------------------------------------------------------------------


class AdaptiveLimit:
    """How many calls may be in flight: doubles each round trip from `start` until the first
    429 (slow start); on a 429, drops to 90 % of what was in flight; then, below the level that
    was refused, climbs back by half the gap per round trip (at least one), and above it by one
    per round trip. Always within [1, ceiling]. Only calls started after the last cut can cut
    again, so one burst of 429s cuts the limit once.

    The fast climb back matters against a provider with a fixed capacity: with a plain +1 per
    round trip, every cut leaves the provider under-used for many round trips (measured with
    `bench/judge.py`: 80 % of its capacity with +1).

    Free slots go to the waiting call with the lowest ticket (`ticket()`, taken once per
    question): a retry keeps its place instead of queueing behind every later question, so
    questions are answered in the order they were asked and the run's batches complete one
    after another, each freeing the evaluator to send the next, rather than all at the end."""

    DECREASE = 0.9

    def __init__(self, ceiling: int, start: int = 4) -> None:
        self.ceiling = ceiling
        self.limit = float(min(ceiling, max(1, start)))
        self.in_flight = 0
        self.peak = 0
        self.lowest_after_throttle: float | None = None
        self.throttles = 0
        self._refused_at: float | None = None
        self._slow_start = True
        self._epoch = 0
        self._tickets = itertools.count()
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []  # a heap by ticket

    def ticket(self) -> int:
        """A question's place in line, kept by all its attempts."""
        return next(self._tickets)

    async def acquire(self, ticket: int | None = None) -> int:
        """Wait for a slot (by `ticket`, default: last in line); the epoch to release with."""
        if self.in_flight < int(self.limit) and not self._waiting:
            self.in_flight += 1
        else:
            handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            place = self.ticket() if ticket is None else ticket
            heapq.heappush(self._waiting, (place, handed))
            try:
                await handed  # the slot is counted by whoever hands it over
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self.in_flight -= 1  # handed over as we were cancelled: pass it on
                    self._hand_over()
                raise
        self.peak = max(self.peak, self.in_flight)
        return self._epoch

    async def release(self, epoch: int, throttled: bool) -> None:
        self.in_flight -= 1
        if throttled:
            self.throttles += 1
            if epoch == self._epoch:
                self._slow_start = False
                self._epoch += 1
                # What was in flight when the provider refused is its limit: go a little
                # below it (a gentler cut than TCP's half keeps the provider busier).
                refused_at = float(self.in_flight + 1)
                self._refused_at = refused_at
                self.limit = max(1.0, min(self.limit, refused_at) * self.DECREASE)
                low = self.lowest_after_throttle
                self.lowest_after_throttle = self.limit if low is None else min(low, self.limit)
        elif self._slow_start:
            self.limit = min(float(self.ceiling), self.limit + 1)
        else:
            gap = (self._refused_at or 0.0) - self.limit
            step = max(1.0, gap / 2)  # per round trip: `limit` answers
            self.limit = min(float(self.ceiling), self.limit + step / self.limit)
        self._hand_over()

    def _hand_over(self) -> None:
        """Give the free slots to the first waiting calls in line (cancelled ones skipped)."""
        while self._waiting and self.in_flight < int(self.limit):
            _, handed = heapq.heappop(self._waiting)
            if not handed.done():
                self.in_flight += 1
                handed.set_result(None)


# --- retry timing --------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a throttled or failed answer asks for, from `retry-after-ms`, `retry-after`
    (seconds or an HTTP date) or the `x-ratelimit-reset-*` durations (`1s`, `6m0s`, `20ms`)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                parsed = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):  # neither seconds nor a date: ignored
                parsed = None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - time.time())
    resets = [
        _duration(lowered[k])
        for k in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if k in lowered
    ]
    found = [r for r in resets if r is not None]
    return max(found) if found else None


def _duration(text: str) -> float | None:
    parts = _DURATION.findall(text)
    if not parts:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def backoff_s(attempt: int, base: float = 0.5, cap: float = 20.0) -> float:
    """Exponential backoff with full jitter (attempt 1 is the first retry)."""
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


# --- parsing -------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_answer(text: str) -> Any:
    """The JSON object in an answer: the whole text, else a fenced block, else the span from
    the first `{` to the last `}`. Raises ValueError when there is none."""
    try:  # nearly every answer: the whole text
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        if isinstance(value, dict):
            return value
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    shown = text.strip().replace("\n", " ")
    raise ValueError(f"no JSON object in the answer: {shown[:120]!r}")


def schema_instruction(name: str, schema: Mapping[str, Any]) -> str:
    """What the prompt says when the endpoint cannot enforce the schema itself."""
    return (
        f"Answer with one JSON object only (no prose, no code fence), named {name}, valid "
        f"against this JSON Schema:\n{orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()}"
    )


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema made acceptable to strict structured output: every object closed and
    every property required (pydantic's schemas leave both open). Read-only result: the same
    few schemas are converted once."""
    return _strict_and_check(schema)[0]


# The schema objects of a run's requests are few and long-lived, and each request's answer is
# checked against its schema: by identity first (the entry keeps the schema alive, so its id
# is not reused), so that a call costs neither encoding it nor a full check of the answer.
_BY_IDENTITY: dict[int, tuple[Mapping[str, Any], dict[str, Any], Any]] = {}


def _strict_and_check(
    schema: Mapping[str, Any],
) -> tuple[dict[str, Any], Callable[[Any], bool] | None]:
    entry = _BY_IDENTITY.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_BY_IDENTITY) >= 1024:
            _BY_IDENTITY.clear()
        strict = _strict(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
        entry = _BY_IDENTITY[id(schema)] = (schema, strict, quick_check(strict))
    return entry[1], entry[2]


@lru_cache(maxsize=256)
def _strict(encoded: bytes) -> dict[str, Any]:
    schema = orjson.loads(encoded)

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: fix(v) for k, v in node.items() if k not in ("title", "default")}
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            return node
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    fixed: dict[str, Any] = fix(dict(schema))
    return fixed


# --- the client ----------------------------------------------------------------------------


class JudgeUnavailable(Exception):
    """The judge cannot be used at all (no key for OpenAI, a budget without prices...)."""


@dataclass
class JudgeStats:
    calls: int = 0  # answered by the endpoint (paid)
    failed: int = 0  # gave up after retries
    retries: int = 0
    throttled: int = 0  # 429s received
    structured_fallback: bool = False


class JudgeClient:
    """Calls one endpoint for `JudgeRequest`s (async; one instance per event loop)."""

    def __init__(self, config: JudgeConfig, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        env = os.environ if environ is None else environ
        self._env = env
        self._structured = config.structured_output != "prompt"
        self.limit = AdaptiveLimit(config.concurrency, start=min(config.concurrency, 8))
        self.stats = JudgeStats()
        self._client: openai.AsyncOpenAI | None = None
        self._key_heads: dict[str, list[Any]] = {}
        self._azure = config.is_azure()
        self._prices: dict[str, Price | None] = {}

    # configuration

    def api_key(self) -> str | None:
        names = [self.config.api_key_env] if self.config.api_key_env else []
        if self.config.is_azure():
            names.append("AZURE_OPENAI_API_KEY")
        names.append("OPENAI_API_KEY")
        return next((self._env[n] for n in names if self._env.get(n)), None)

    def base_url(self) -> str | None:
        return self.config.base_url or self._env.get("OPENAI_BASE_URL") or None

    def check(self) -> None:
        """Refuse early what would fail every call."""
        if self.api_key() is None and self.base_url() is None and not self.config.is_azure():
            raise JudgeUnavailable(
                "the suite uses the LLM judge but no key is set: export OPENAI_API_KEY, or "
                "point the judge at an OpenAI-compatible endpoint (judge.base_url or "
                "OPENAI_BASE_URL; a local server needs no key)"
            )
        if self.config.max_cost_usd is not None:
            for model in (self.config.model, self.config.embedding_model):
                if self.config.price(model) is None:
                    raise JudgeUnavailable(
                        f"a judge cost budget needs the price of {model!r}: add it under "
                        "judge.prices (USD per million tokens: input, cached_input, output)"
                    )

    def client(self) -> openai.AsyncOpenAI:
        """The openai client (one per run, made on first use, on the judge's event loop)."""
        if self._client is None:
            self._client = self._new_client()
        return self._client

    def _new_client(self) -> openai.AsyncOpenAI:
        key = self.api_key() or "none"  # a local endpoint needs none; the client wants one
        common: dict[str, Any] = {
            "api_key": key,
            "max_retries": 0,  # retries are ours: they honour the headers and the limit
            "timeout": self.config.timeout_s,
            "default_headers": self.config.headers or None,
        }
        if self._azure:
            endpoint = self.config.base_url or self._env.get("AZURE_OPENAI_ENDPOINT") or ""
            return openai.AsyncAzureOpenAI(
                azure_endpoint=endpoint,
                api_version=self.config.api_version or self._env.get("OPENAI_API_VERSION"),
                http_client=judge_http_client(endpoint, self.config.timeout_s),
                **common,
            )
        base_url = self.base_url()
        return openai.AsyncOpenAI(
            base_url=base_url,
            http_client=judge_http_client(base_url or OPENAI_URL, self.config.timeout_s),
            **common,
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def cache_key(self, request: JudgeRequest) -> str:
        """Everything that changes the answer: endpoint family, model, parameters, request."""
        head = self._key_heads.get(request.kind)
        if head is None:  # the same for every request of a kind (of this client)
            chat = request.kind == "chat"
            model = self.config.model if chat else self.config.embedding_model
            params = (
                [self.config.temperature, self.config.seed, self.config.max_tokens] if chat else []
            )
            head = [PROMPT_FORMAT, self.config.family(), model, params]
            self._key_heads[request.kind] = head
        return _digest([*head, request.digest])

    def body(self, request: JudgeRequest) -> dict[str, Any]:
        """The request body as sent (directly or as a Batch API line)."""
        if request.kind == "embedding":
            return {
                "model": self.config.embedding_model,
                "input": request.text,
                "encoding_format": "float",
            }
        messages = [{"role": r, "content": c} for r, c in request.messages]
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        if request.schema is not None:
            if self._structured:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": request.schema_name,
                        "schema": strict_schema(request.schema),
                        "strict": True,
                    },
                }
            else:  # asked for in the static part, so that prefix caching still applies
                head = dict(messages[0])
                wanted = schema_instruction(request.schema_name, request.schema)
                head["content"] = f"{head['content']}\n\n{wanted}"
                body["messages"] = [head, *messages[1:]]
        return body

    def cost(self, model: str, usage: Usage, batch: bool = False) -> float | None:
        try:
            price = self._prices[model]
        except KeyError:
            price = self._prices[model] = self.config.price(model)
        if price is None:
            return None
        cached_price = price.cached_input if price.cached_input is not None else price.input
        fresh = max(0, usage.prompt_tokens - usage.cached_tokens)
        total = (
            fresh * price.input
            + usage.cached_tokens * cached_price
            + usage.completion_tokens * price.output
        ) / 1e6
        return total * price.batch_discount if batch else total

    # answers

    def read(self, request: JudgeRequest, payload: Mapping[str, Any], batch: bool = False) -> Any:
        """The value of a successful response body (raises ValueError when it does not fit)."""
        if request.kind == "embedding":
            data = payload.get("data")
            if not isinstance(data, list) or not data or not isinstance(data[0], dict):
                raise ValueError("the embeddings answer has no data")
            vector = data[0].get("embedding")
            if not isinstance(vector, list) or not all(isinstance(x, int | float) for x in vector):
                raise ValueError("the embedding is not a list of numbers")
            return vector
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("the answer has no choices")
        message = choices[0].get("message") or {}
        refusal = message.get("refusal") if isinstance(message, dict) else None
        if refusal:
            raise ValueError(f"the judge refused: {str(refusal)[:200]}")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise ValueError("the answer has no text")
        if request.schema is None:
            return {"text": content}
        value = parse_json_answer(content)
        schema, fits = _strict_and_check(request.schema)
        if fits is None or not fits(value):
            problems = check_arguments(value, schema)
            if problems:
                raise ValueError("the answer does not fit its schema: " + "; ".join(problems[:3]))
        return value

    def usage(self, model: str, payload: Mapping[str, Any], batch: bool = False) -> Usage:
        raw = payload.get("usage") or {}
        if not isinstance(raw, dict):
            raw = {}
        details = raw.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        usage = Usage(
            prompt_tokens=int(raw.get("prompt_tokens") or 0),
            cached_tokens=int(cached or 0),
            completion_tokens=int(raw.get("completion_tokens") or 0),
        )
        return Usage(
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
            self.cost(model, usage, batch),
        )

    async def ask(self, request: JudgeRequest) -> JudgeAnswer:
        """Answer one request, retrying what is worth retrying; never raises (but for
        cancellation)."""
        model = self.config.model if request.kind == "chat" else self.config.embedding_model
        problem = "no attempt made"
        ticket = self.limit.ticket()
        for attempt in range(1, self.config.max_attempts + 1):
            if attempt > 1:
                self.stats.retries += 1
            epoch = await self.limit.acquire(ticket)
            structured = self._structured  # what this attempt sends
            throttled = False
            wait: float | None = None
            try:
                payload = await self._post(request)
                try:
                    value = self.read(request, payload)
                except ValueError as exc:
                    problem = str(exc)
                    wait = backoff_s(attempt, base=0.1)
                else:
                    self.stats.calls += 1
                    return JudgeAnswer(
                        value=value,
                        model=str(payload.get("model") or model),
                        attempts=attempt,
                        usage=self.usage(model, payload),
                    )
            except openai.BadRequestError as exc:
                if structured and self._refuses_schema(request, exc):
                    self._structured = False
                    self.stats.structured_fallback = True
                    problem = "structured output refused; asking in the prompt"
                    wait = 0.0
                else:
                    problem = _describe(exc)
                    break  # the same request would be refused again
            except openai.APIStatusError as exc:
                problem = _describe(exc)
                throttled = exc.status_code == 429
                if throttled:
                    self.stats.throttled += 1
                if exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408:
                    hinted = retry_after_s(exc.response.headers)
                    wait = (
                        hinted * random.uniform(1.0, 1.1)
                        if hinted is not None
                        else backoff_s(attempt)
                    )
                else:
                    break  # 401, 403, 404...: retrying changes nothing
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                problem = _describe(exc)
                wait = backoff_s(attempt)
            except ValueError as exc:  # a body that is not JSON
                problem = f"the answer is not JSON ({exc})"
                wait = backoff_s(attempt, base=0.1)
            finally:
                await self.limit.release(epoch, throttled)
            if wait is None:
                break
            if attempt < self.config.max_attempts:
                await asyncio.sleep(wait)
        self.stats.failed += 1
        return JudgeAnswer(
            error=f"judge failed after {attempt} attempt{'s' if attempt > 1 else ''}: {problem}",
            model=model,
            attempts=attempt,
        )

    async def _post(self, request: JudgeRequest) -> dict[str, Any]:
        client = self.client()
        body = self.body(request)
        path = "/embeddings" if request.kind == "embedding" else "/chat/completions"
        # `object`: the parsed JSON as is, no response model built (little client CPU per call).
        if self._azure:  # Azure's client reads the model from the body to route the call
            payload = await client.post(path, cast_to=object, body=body)
        else:  # bytes: the client neither copies the body nor encodes it again
            payload = await client.post(path, cast_to=object, content=orjson.dumps(body))
        if not isinstance(payload, dict):
            raise ValueError(f"the answer is not a JSON object: {str(payload)[:80]!r}")
        return payload

    def _refuses_schema(self, request: JudgeRequest, exc: openai.BadRequestError) -> bool:
        if request.schema is None:
            return False
        if self.config.structured_output == "json_schema":
            return False
        text = str(exc).lower()
        return "response_format" in text or "json_schema" in text or "structured" in text


def _describe(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        message = exc.message if isinstance(exc.message, str) else str(exc)
        return f"HTTP {exc.status_code}: {message[:200]}"
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
