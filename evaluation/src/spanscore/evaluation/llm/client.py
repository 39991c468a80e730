"""`JudgeClient`: asks one OpenAI-compatible endpoint (chat completions, embeddings) as fast as
it allows, with retries; what still fails is an answer with an `error`, never an exception or
a hang."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from spanscore.evaluation.llm.answers import (
    parse_json_answer,
    schema_instruction,
    strict_and_check,
    strict_schema,
)
from spanscore.evaluation.llm.limits import AdaptiveLimit, backoff_s, retry_after_s
from spanscore.evaluation.llm.types import (
    OPENAI_URL,
    PROMPT_FORMAT,
    JudgeAnswer,
    JudgeConfig,
    JudgeRequest,
    Price,
    Usage,
    stable_digest,
)
from spanscore.evaluation.matching.schema_check import check_arguments

if TYPE_CHECKING:
    import openai

# `openai` and the http client (0.4 and 0.1 s to import) are imported by the methods that use
# them, when a judge is asked: a run whose suite judges nothing never imports them.

# --- the client ----------------------------------------------------------------------------


class JudgeUnavailable(Exception):
    """The judge cannot be used at all (no key for OpenAI, a budget without prices...)."""


@dataclass
class JudgeStats:
    calls: int = 0  # answered by the endpoint (paid)
    failed: int = 0  # gave up after retries
    retries: int = 0
    attempts: int = 0  # requests sent (or tried), retries included
    last_error: str | None = None  # why the latest attempt that failed did
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

    def endpoint(self) -> str:
        """The URL the judge's requests go to (what an operator checks when they fail)."""
        if self._azure:
            return self.config.base_url or self._env.get("AZURE_OPENAI_ENDPOINT") or ""
        return self.base_url() or OPENAI_URL

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
        import openai

        from spanscore.evaluation.llm.http import judge_http_client

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
            head = [PROMPT_FORMAT, self.config.cache_scope(self.endpoint()), model, params]
            self._key_heads[request.kind] = head
        return stable_digest([*head, request.digest])

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
        seed = request.seed if request.seed is not None else self.config.seed
        if seed is not None:
            body["seed"] = seed
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
        schema, fits = strict_and_check(request.schema)
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
        import openai

        model = self.config.model if request.kind == "chat" else self.config.embedding_model
        problem = "no attempt made"
        ticket = self.limit.ticket()
        # A 429 says "not now", not "wrong": while the limit probes the provider's capacity, the
        # same question can be refused several times in a row, so throttles are retried for
        # `max_throttled_s` from the first 429 (not from the question's wait for a slot), and
        # only the other failures spend `max_attempts` (and set the backoff's length).
        throttled_until: float | None = None
        attempt = failures = throttles = 0
        while True:
            attempt += 1
            if attempt > 1:
                self.stats.retries += 1
            epoch = await self.limit.acquire(ticket)
            self.stats.attempts += 1
            structured = self._structured  # what this attempt sends
            throttled = False
            wait: float | None = None
            try:
                payload = await self._post(request)
                try:
                    value = self.read(request, payload)
                except ValueError as exc:
                    problem = str(exc)
                    wait = backoff_s(failures + 1, base=0.1)
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
                    throttles += 1
                    if exc.code == "insufficient_quota":
                        break  # OpenAI's 429 for an account out of credit: no wait ends it
                if exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408:
                    hinted = retry_after_s(exc.response.headers)
                    wait = (
                        hinted * random.uniform(1.0, 1.1)
                        if hinted is not None
                        else backoff_s(throttles if throttled else failures + 1)
                    )
                else:
                    break  # 401, 403, 404...: retrying changes nothing
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                problem = _describe(exc)
                wait = backoff_s(failures + 1)
            except ValueError as exc:  # a body that is not JSON
                problem = f"the answer is not JSON ({exc})"
                wait = backoff_s(failures + 1, base=0.1)
            finally:
                await self.limit.release(epoch, throttled)
            if wait is None:
                break
            if throttled:
                if throttled_until is None:
                    throttled_until = time.monotonic() + self.config.max_throttled_s
                if time.monotonic() + wait > throttled_until:
                    break
            else:
                failures += 1
                if failures >= self.config.max_attempts:
                    break
            await asyncio.sleep(wait)
        self.stats.failed += 1
        self.stats.last_error = problem
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
    import openai

    if isinstance(exc, openai.APIStatusError):
        message = exc.message if isinstance(exc.message, str) else str(exc)
        return f"HTTP {exc.status_code}: {message[:200]}"
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
