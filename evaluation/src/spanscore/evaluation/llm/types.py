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
  `max_attempts` (a 429 is retried for `max_throttled_s` instead: it says "not now", and a
  question can be refused several times in a row while the limit probes); what still fails
  is an answer with an `error`, never an exception or a hang.
- tokens (prompt, cached prompt, completion) are read from the usage and priced from
  `PRICES` (USD per million tokens, overridable in the suite), at half price in batch mode.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

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
    max_attempts: int = Field(
        6, ge=1, description="tries per call, the first included; a 429 does not count"
    )
    max_throttled_s: float = Field(
        120.0, ge=0, description="how long a call is retried while it is throttled (429)"
    )
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

    def cache_scope(self, endpoint: str) -> str:
        """What of the endpoint (the URL requests go to) a cache key names: the judge's
        family, so that a judge's answers outlive a move of its server within the host."""
        return self.family()


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
    seed: int | None = None  # over the config's seed (a simulated user's trial samples anew)
    # The conversation whose scoring asks (not part of the question): its judge-cache entry
    # is erased with it (`spanscore erase`).
    asked_for: str = field(default="", compare=False)

    @cached_property
    def digest(self) -> str:
        return stable_digest(
            [
                self.kind,
                self.messages,
                self.schema_name,
                self.schema,
                self.text,
                self.prompt_version,
                *([] if self.seed is None else [self.seed]),
            ]
        )


def stable_digest(value: Any) -> str:
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
