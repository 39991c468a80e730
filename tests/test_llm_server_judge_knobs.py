"""The scripted server as a real, sometimes limited provider: what an LLM judge meets.

Capacity and 429s, no structured outputs, requests never answered, recording, prompt caching,
embeddings, and the Files and Batch APIs, all spoken to by the real `openai` client (sync and
async). Concurrency is made certain with gates and barriers in the policy, never with timing.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types import Batch

from spanscore.examples.llm_server import LLMRequest, Reply, ScriptedLLM, ScriptedPolicy

from .support.polling import wait_for

MODEL = "gpt-4.1-mini"
EMBEDDING_MODEL = "text-embedding-3-small"
HI: Any = [{"role": "user", "content": "hi"}]


def make_client(llm: ScriptedLLM, **options: Any) -> openai.OpenAI:
    options.setdefault("_strict_response_validation", True)
    options.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=llm.base_url, api_key="test", **options)


def make_async_client(llm: ScriptedLLM, **options: Any) -> openai.AsyncOpenAI:
    options.setdefault("_strict_response_validation", True)
    options.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", **options)


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(record=True) as server:
        yield server
    assert server.errors == []


@pytest.fixture
def client(llm: ScriptedLLM) -> Iterator[openai.OpenAI]:
    with make_client(llm) as c:
        yield c


class Gate:
    """A policy that answers only once opened, so its requests stay in flight meanwhile."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def __call__(self, request: LLMRequest) -> Reply:
        if not self.opened.wait(60):
            raise TimeoutError("the test never opened the gate")
        return "done"


class Meeting:
    """A policy whose requests answer in groups of `size`, each waiting for the whole group.

    A group passing proves that `size` requests were being answered at the same time.
    """

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=60)

    def __call__(self, request: LLMRequest) -> Reply:
        self.barrier.wait()
        return "met"


def chat_text(client: openai.OpenAI, messages: Any = HI, **options: Any) -> str:
    completion = client.chat.completions.create(model=MODEL, messages=messages, **options)
    return completion.choices[0].message.content or ""


# ---- capacity and rate limiting ----------------------------------------------------------


def test_requests_beyond_capacity_get_429_with_openai_headers() -> None:
    gate = Gate()
    with ScriptedLLM(gate, capacity=2, rate_limit_retry_ms=250) as llm, make_client(llm) as c:
        with ThreadPoolExecutor(5) as pool:
            try:
                futures = [pool.submit(chat_text, c) for _ in range(5)]
                # two requests hold the two slots, the other three are refused at once
                wait_for(lambda: llm.in_flight == 2 and llm.rate_limited == 3)
            finally:
                gate.opened.set()
        refused = [f.exception() for f in futures if f.exception() is not None]
        assert [f.result() for f in futures if f.exception() is None] == ["done", "done"]
        assert len(refused) == 3
        for error in refused:
            assert isinstance(error, openai.RateLimitError)
            assert error.code == "rate_limit_exceeded"
            assert error.type == "requests"
            headers = error.response.headers
            assert headers["retry-after"] == "1"  # whole seconds, rounded up
            assert headers["retry-after-ms"] == "250"
            assert headers["x-ratelimit-limit-requests"] == "2"
            assert headers["x-ratelimit-remaining-requests"] == "0"
            assert headers["x-ratelimit-reset-requests"] == "250ms"
        assert (llm.request_count, llm.chat_requests, llm.rate_limited) == (5, 2, 3)
        assert (llm.in_flight, llm.max_in_flight) == (0, 2)
        assert 3 <= llm.max_concurrent <= 5
    assert llm.errors == []


@pytest.mark.parametrize(
    ("retry_ms", "retry_after", "reset"),
    [
        pytest.param(1, "1", "1ms", id="1ms"),
        pytest.param(999, "1", "999ms", id="under-a-second"),
        pytest.param(1000, "1", "1s", id="one-second"),
        pytest.param(1500, "2", "1.5s", id="rounded-up"),
        pytest.param(125_000, "125", "2m5s", id="minutes"),
    ],
)
def test_retry_after_headers_follow_the_knob(retry_ms: int, retry_after: str, reset: str) -> None:
    """Capacity 0 refuses every model request: a provider whose limit is used up elsewhere."""
    with ScriptedLLM(capacity=0, rate_limit_retry_ms=retry_ms) as llm, make_client(llm) as c:
        with pytest.raises(openai.RateLimitError) as caught:
            chat_text(c)
        headers = caught.value.response.headers
        assert headers["retry-after"] == retry_after
        assert headers["retry-after-ms"] == str(retry_ms)
        assert headers["x-ratelimit-reset-requests"] == reset
        assert [m.id for m in c.models.list()]  # only model requests are limited
        assert (llm.rate_limited, llm.max_in_flight, llm.max_concurrent) == (1, 0, 1)


def test_admitted_answers_carry_the_remaining_requests() -> None:
    with ScriptedLLM(capacity=3) as llm, make_client(llm) as c:
        raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=HI)
        assert raw.headers["x-ratelimit-limit-requests"] == "3"
        assert raw.headers["x-ratelimit-remaining-requests"] == "2"
        assert "retry-after" not in raw.headers


def test_a_client_retrying_429s_gets_through_once_a_slot_frees() -> None:
    gate = Gate()
    with (
        ScriptedLLM(gate, capacity=1, rate_limit_retry_ms=20) as llm,
        make_client(llm) as patient,
        make_client(llm, max_retries=1000) as retrying,
        ThreadPoolExecutor(2) as pool,
    ):
        try:
            first = pool.submit(chat_text, patient)
            wait_for(lambda: llm.in_flight == 1)
            second = pool.submit(chat_text, retrying)
            wait_for(lambda: llm.rate_limited >= 2)  # refused, retried after retry-after-ms
        finally:
            gate.opened.set()
        assert (first.result(timeout=60), second.result(timeout=60)) == ("done", "done")
        assert llm.request_count == 2 + llm.rate_limited
        assert (llm.chat_requests, llm.max_in_flight, llm.max_concurrent) == (2, 1, 2)


@pytest.mark.parametrize(
    ("limit", "calls"),
    [
        pytest.param(1, 5, id="one-at-a-time"),
        pytest.param(4, 24, id="four-at-a-time"),
        pytest.param(16, 16, id="all-at-once"),
    ],
)
def test_counters_see_exactly_the_clients_concurrency(limit: int, calls: int) -> None:
    """An async client holding at most `limit` requests open: the server's peaks are `limit`.

    The policy answers in groups of `limit`, so the peak is reached; the client's semaphore
    bounds it; the slot being given back before each answer is sent keeps the count exact.
    """
    with ScriptedLLM(Meeting(limit)) as llm:

        async def run() -> list[str]:
            semaphore = asyncio.Semaphore(limit)
            async with make_async_client(llm) as client:

                async def one() -> str:
                    async with semaphore:
                        done = await client.chat.completions.create(model=MODEL, messages=HI)
                        return done.choices[0].message.content or ""

                return await asyncio.gather(*(one() for _ in range(calls)))

        assert asyncio.run(run()) == ["met"] * calls
        assert (llm.max_in_flight, llm.max_concurrent, llm.in_flight) == (limit, limit, 0)
        assert (llm.request_count, llm.chat_requests, llm.rate_limited) == (calls, calls, 0)
    assert llm.errors == []


def test_many_parallel_async_calls_against_a_small_capacity() -> None:
    """Every call ends as an answer or a 429, and the counters agree with the client."""
    with ScriptedLLM(capacity=3, delay_s=0.02) as llm:

        async def run() -> list[object]:
            async with make_async_client(llm) as client:
                calls = [
                    client.chat.completions.create(model=MODEL, messages=HI) for _ in range(30)
                ]
                return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = asyncio.run(run())
        refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
        answered = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(refused) + len(answered) == 30
        assert (llm.rate_limited, llm.chat_requests) == (len(refused), len(answered))
        assert llm.max_in_flight <= 3
        assert llm.max_in_flight <= llm.max_concurrent <= 30

        async def with_retries() -> list[str]:
            async with make_async_client(llm, max_retries=1000) as client:
                calls = [
                    client.chat.completions.create(model=MODEL, messages=HI) for _ in range(20)
                ]
                return [c.choices[0].message.content or "" for c in await asyncio.gather(*calls)]

        llm.rate_limit_retry_ms = 10
        assert asyncio.run(with_retries()) == [ScriptedPolicy.fallback] * 20
        assert llm.chat_requests == len(answered) + 20
        assert llm.request_count == llm.chat_requests + llm.rate_limited
        assert llm.max_in_flight <= 3
    assert llm.errors == []


# ---- servers without structured outputs --------------------------------------------------

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "verdict",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"score": {"type": "number"}},
            "required": ["score"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize(
    ("structured_output", "response_format", "refused"),
    [
        pytest.param(False, SCHEMA, True, id="no-structured-output-json-schema"),
        pytest.param(False, {"type": "json_object"}, False, id="no-structured-output-json"),
        pytest.param(False, None, False, id="no-structured-output-text"),
        pytest.param(True, SCHEMA, False, id="structured-output-json-schema"),
    ],
)
def test_structured_output_knob(
    structured_output: bool, response_format: dict[str, Any] | None, refused: bool
) -> None:
    with ScriptedLLM(structured_output=structured_output) as llm, make_client(llm) as c:
        options = {"response_format": response_format} if response_format else {}
        if not refused:
            assert chat_text(c, **options) == ScriptedPolicy.fallback
            return
        with pytest.raises(openai.BadRequestError) as caught:
            chat_text(c, **options)
        assert caught.value.param == "response_format"
        assert caught.value.type == "invalid_request_error"
        assert "'json_schema' is not supported" in caught.value.message
        assert llm.chat_requests == 0


def test_no_structured_output_in_the_responses_api() -> None:
    with ScriptedLLM(structured_output=False) as llm, make_client(llm) as c:
        text_format: Any = {"format": {**SCHEMA["json_schema"], "type": "json_schema"}}
        with pytest.raises(openai.BadRequestError) as caught:
            c.responses.create(model=MODEL, input="hi", text=text_format)
        assert caught.value.param == "text.format"
        json_format: Any = {"format": {"type": "json_object"}}
        assert c.responses.create(model=MODEL, input="hi", text=json_format).output_text


# ---- requests that never get an answer ---------------------------------------------------


def test_hung_requests_end_by_the_clients_timeout_and_are_answered_once_released() -> None:
    with ScriptedLLM(hang_first=4) as llm:

        async def run() -> list[object]:
            async with make_async_client(llm, timeout=0.5) as client:
                calls = [client.chat.completions.create(model=MODEL, messages=HI) for _ in range(4)]
                return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = asyncio.run(run())
        assert all(isinstance(o, openai.APITimeoutError) for o in outcomes), outcomes
        assert (llm.held, llm.hang_first, llm.in_flight, llm.max_concurrent) == (4, 0, 0, 0)
        with make_client(llm) as c:
            assert chat_text(c) == ScriptedPolicy.fallback  # the fifth request is answered
        llm.hang_first = 0  # the held requests are answered (to clients long gone)
        wait_for(lambda: llm.held == 0 and llm.chat_requests == 5)
        assert llm.request_count == 5
    assert llm.errors == []


def test_closing_the_server_drops_held_requests_without_hanging() -> None:
    llm = ScriptedLLM(hang_first=3).start()
    with make_client(llm, timeout=120) as c, ThreadPoolExecutor(3) as pool:
        try:
            futures = [pool.submit(chat_text, c) for _ in range(3)]
            wait_for(lambda: llm.held == 3)
        finally:
            closing = threading.Thread(target=llm.close)
            closing.start()
            closing.join(60)
        assert not closing.is_alive(), "close() hung"
        for future in futures:
            assert isinstance(future.exception(timeout=60), openai.APIConnectionError)
    assert llm.chat_requests == 0


# ---- recording ---------------------------------------------------------------------------


def test_recorded_bodies_show_what_was_sent(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    client.chat.completions.create(
        model=MODEL,
        messages=HI,
        temperature=0,
        seed=7,
        response_format={"type": "json_object"},
    )
    client.embeddings.create(model=EMBEDDING_MODEL, input="hello", encoding_format="float")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-0", messages=HI)
    chat, embedding, unknown = llm.recorded
    assert chat == {
        "path": "/v1/chat/completions",
        "batch_id": None,
        "body": {
            "messages": HI,
            "model": MODEL,
            "response_format": {"type": "json_object"},
            "seed": 7,
            "temperature": 0,
        },
    }
    assert (embedding["path"], embedding["body"]["input"]) == ("/v1/embeddings", "hello")
    assert unknown["body"]["model"] == "gpt-0"  # read, then refused: still recorded


def test_nothing_is_recorded_unless_asked() -> None:
    with ScriptedLLM() as llm, make_client(llm) as c:
        chat_text(c)
        assert llm.recorded == []
        llm.record = True
        chat_text(c, temperature=0.5)
        assert [r["body"]["temperature"] for r in llm.recorded] == [0.5]


def test_recording_is_complete_under_concurrency() -> None:
    with ScriptedLLM(record=True) as llm:

        async def run() -> None:
            async with make_async_client(llm) as client:
                await asyncio.gather(
                    *(
                        client.chat.completions.create(model=MODEL, messages=HI, seed=i)
                        for i in range(40)
                    )
                )

        asyncio.run(run())
        assert sorted(r["body"]["seed"] for r in llm.recorded) == list(range(40))


# ---- prompt caching ----------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You grade answers. Reply with a score."}
ASK = {"role": "user", "content": "Grade: the capital of France is Paris."}
ANSWERED = {"role": "assistant", "content": "5"}
AGAIN = {"role": "user", "content": "Explain why."}
OTHER = {"role": "user", "content": "Grade: two plus two is five."}


def test_cached_tokens_count_the_longest_known_run_of_leading_messages(
    client: openai.OpenAI,
) -> None:
    def usage(messages: list[Any], model: str = MODEL) -> tuple[int, int]:
        done = client.chat.completions.create(model=model, messages=messages)
        assert done.usage is not None
        assert done.usage.prompt_tokens_details is not None
        cached = done.usage.prompt_tokens_details.cached_tokens or 0
        return cached, done.usage.prompt_tokens

    assert usage([SYSTEM, ASK])[0] == 0  # the first request
    repeated, prompt = usage([SYSTEM, ASK])
    assert repeated == prompt > 0  # the same prompt again (no tools): all of it is cached
    longer, longer_prompt = usage([SYSTEM, ASK, ANSWERED, AGAIN])
    assert longer == repeated < longer_prompt  # the conversation goes on: its start is cached
    system_only, _ = usage([SYSTEM, OTHER])
    assert 0 < system_only < repeated  # only the system message is shared
    edited = {**ASK, "content": ASK["content"] + " "}
    assert usage([SYSTEM, edited])[0] == system_only  # whole messages only
    assert usage([ASK, SYSTEM])[0] == 0  # a different first message
    assert usage([SYSTEM, ASK], model="gpt-4o")[0] == 0  # another model has its own cache
    assert usage([SYSTEM, ASK, ANSWERED, AGAIN])[0] == longer_prompt


def test_cached_tokens_in_streams_and_the_responses_api(client: openai.OpenAI) -> None:
    chat_text(client, [SYSTEM, ASK])
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[SYSTEM, ASK],
        stream=True,
        stream_options={"include_usage": True},
    )
    *_, last = list(stream)
    assert last.usage is not None
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == last.usage.prompt_tokens
    first = client.responses.create(model=MODEL, instructions="Be brief.", input="hi")
    second = client.responses.create(model=MODEL, instructions="Be brief.", input="hi")
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens_details.cached_tokens == second.usage.input_tokens


# ---- embeddings --------------------------------------------------------------------------


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # the vectors are unit vectors


def embeddings(client: openai.OpenAI, texts: list[str], **options: Any) -> list[list[float]]:
    options.setdefault("encoding_format", "float")
    done = client.embeddings.create(model=EMBEDDING_MODEL, input=texts, **options)
    assert [d.index for d in done.data] == list(range(len(texts)))
    assert done.usage.prompt_tokens == done.usage.total_tokens > 0
    return [d.embedding for d in done.data]


@pytest.mark.parametrize(
    ("first", "second", "similar"),
    [
        pytest.param("The cat sat on the mat", "The cat sat on the red mat", True, id="one-more"),
        pytest.param("Refund my order please", "Please refund my order", True, id="reordered"),
        pytest.param(
            "The customer asked for a refund and the agent issued it",
            "The agent issued the refund the customer asked for",
            True,
            id="rephrased",
        ),
        pytest.param(
            "The cat sat on the mat", "Quarterly revenue grew in Europe", False, id="unrelated"
        ),
        pytest.param("hello", "world", False, id="one-word-each"),
    ],
)
def test_embeddings_are_unit_vectors_close_for_texts_sharing_words(
    client: openai.OpenAI, first: str, second: str, similar: bool
) -> None:
    a, b, again = embeddings(client, [first, second, first])
    assert len(a) == len(b) == 256
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-5) for v in (a, b))
    assert a == again
    if similar:
        assert cosine(a, b) > 0.8
    else:
        assert abs(cosine(a, b)) < 0.2


def test_embeddings_are_the_same_in_every_encoding_and_on_every_server(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    texts = ["refund my order", "where is my parcel?"]
    floats = embeddings(client, texts)
    # Without encoding_format the openai client asks for base64 and decodes it to floats;
    # strict validation would refuse the base64 string before that decoding.
    with make_client(llm, _strict_response_validation=False) as lenient:
        decoded = lenient.embeddings.create(model=EMBEDDING_MODEL, input=texts)
    assert llm.recorded[-1]["body"]["encoding_format"] == "base64"
    assert [d.embedding for d in decoded.data] == floats
    with ScriptedLLM() as other, make_client(other) as elsewhere:
        assert embeddings(elsewhere, texts) == floats


def test_embedding_dimensions_and_the_async_client(llm: ScriptedLLM) -> None:
    async def run() -> list[int]:
        async with make_async_client(llm) as client:
            done = await client.embeddings.create(
                model="text-embedding-3-large",
                input=["one", "two", "three"],
                dimensions=64,
                encoding_format="float",
            )
            return [len(d.embedding) for d in done.data]

    assert asyncio.run(run()) == [64, 64, 64]


BAD_EMBEDDINGS: list[Any] = [
    pytest.param({"input": ""}, "input", id="empty-string"),
    pytest.param({"input": []}, "input", id="no-input"),
    pytest.param({"input": [[1, 2, 3]]}, "input", id="token-array"),
    pytest.param({"input": "hi", "dimensions": 0}, "dimensions", id="zero-dimensions"),
    pytest.param({"input": "hi", "dimensions": 10_000}, "dimensions", id="too-many-dimensions"),
    pytest.param({"input": "hi", "encoding_format": "binary"}, "encoding_format", id="format"),
]


@pytest.mark.parametrize(("options", "param"), BAD_EMBEDDINGS)
def test_bad_embedding_requests(client: openai.OpenAI, options: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=EMBEDDING_MODEL, **{"encoding_format": "float", **options})
    assert caught.value.param == param
    assert caught.value.message


@pytest.mark.parametrize(
    ("model", "enabled"),
    [
        pytest.param(MODEL, True, id="chat-model"),
        pytest.param("text-embedding-9", True, id="unknown-model"),
        pytest.param(EMBEDDING_MODEL, False, id="chat-only-server"),
    ],
)
def test_embeddings_not_found(model: str, enabled: bool) -> None:
    with ScriptedLLM(embeddings=enabled) as llm, make_client(llm) as c:
        with pytest.raises(openai.NotFoundError):
            c.embeddings.create(model=model, input="hi", encoding_format="float")
        assert (EMBEDDING_MODEL in [m.id for m in c.models.list()]) == enabled


# ---- files -------------------------------------------------------------------------------


def test_files_upload_retrieve_content_list_delete(client: openai.OpenAI) -> None:
    data = b'{"a": 1}\r\n{"b":\n 2}\x00\xff binary\r\n--not-a-boundary\n'
    uploaded = client.files.create(file=("input.jsonl", data), purpose="batch")
    assert (uploaded.filename, uploaded.bytes, uploaded.purpose) == (
        "input.jsonl",
        len(data),
        "batch",
    )
    assert uploaded.id.startswith("file-")
    assert client.files.retrieve(uploaded.id) == uploaded
    assert client.files.content(uploaded.id).content == data
    other = client.files.create(file=("notes.txt", b"notes"), purpose="user_data")
    assert [f.id for f in client.files.list()] == [other.id, uploaded.id]  # newest first
    assert [f.id for f in client.files.list(purpose="batch")] == [uploaded.id]
    deleted = client.files.delete(uploaded.id)
    assert (deleted.id, deleted.deleted) == (uploaded.id, True)
    for gone in (client.files.retrieve, client.files.content, client.files.delete):
        with pytest.raises(openai.NotFoundError):
            gone(uploaded.id)


def test_a_file_purpose_the_api_does_not_know_is_refused(client: openai.OpenAI) -> None:
    purpose: Any = "homework"
    with pytest.raises(openai.BadRequestError) as caught:
        client.files.create(file=("x.txt", b"x"), purpose=purpose)
    assert caught.value.param == "purpose"


# ---- batches -----------------------------------------------------------------------------

FINAL = ("completed", "failed", "cancelled", "expired")


def jsonl(items: list[Any]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


def chat_line(custom_id: str, messages: Any, model: str = MODEL) -> dict[str, Any]:
    body = {"model": model, "messages": messages}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def submit(
    client: openai.OpenAI, lines: list[Any] | bytes, endpoint: Any = "/v1/chat/completions"
) -> Batch:
    data = lines if isinstance(lines, bytes) else jsonl(lines)
    uploaded = client.files.create(file=("batch.jsonl", data), purpose="batch")
    return client.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,
        completion_window="24h",
        metadata={"suite": "judge"},
    )


def finished(client: openai.OpenAI, batch_id: str) -> Batch:
    def done() -> Batch | None:
        batch = client.batches.retrieve(batch_id)
        return batch if batch.status in FINAL else None

    result: Batch = wait_for(done, timeout=60)
    return result


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_chat_batch_is_answered_like_direct_requests_without_capacity() -> None:
    """Capacity 0 refuses every direct request; batch lines are not limited."""
    with ScriptedLLM(capacity=0, record=True) as llm, make_client(llm) as c:
        lines = [
            chat_line("ok-1", [SYSTEM, ASK]),
            chat_line("bad-role", [{"role": "wizard", "content": "hi"}]),
            chat_line("ok-2", [SYSTEM, OTHER]),
        ]
        created = submit(c, lines)
        assert (created.status, created.metadata, created.endpoint) == (
            "validating",
            {"suite": "judge"},
            "/v1/chat/completions",
        )
        batch = finished(c, created.id)
        assert batch.status == "completed"
        assert batch.model == MODEL
        assert batch.request_counts is not None
        assert batch.request_counts.to_dict() == {"total": 3, "completed": 2, "failed": 1}
        times = [batch.created_at, batch.in_progress_at, batch.finalizing_at, batch.completed_at]
        assert None not in times
        assert times == sorted(times)
        output = read_lines(c, batch.output_file_id)
        assert [line["custom_id"] for line in output] == ["ok-1", "ok-2"]
        assert all(line["error"] is None for line in output)
        assert all(line["response"]["status_code"] == 200 for line in output)
        bodies = [line["response"]["body"] for line in output]
        (failed,) = read_lines(c, batch.error_file_id)
        assert failed["custom_id"] == "bad-role"
        assert failed["response"]["status_code"] == 400
        assert failed["response"]["body"]["error"]["param"] == "messages[0].role"
        assert batch.usage is not None
        assert batch.usage.input_tokens == sum(b["usage"]["prompt_tokens"] for b in bodies)
        assert batch.usage.output_tokens == sum(b["usage"]["completion_tokens"] for b in bodies)
        assert (llm.batches_created, llm.batch_requests) == (1, 3)
        assert (llm.chat_requests, llm.rate_limited) == (0, 0)
        batch_lines = [r for r in llm.recorded if r["batch_id"] == batch.id]
        assert [r["body"] for r in batch_lines] == [line["body"] for line in lines]

        llm.capacity = None  # the same request made directly gets the same answer and usage
        direct = c.chat.completions.create(model=MODEL, messages=[SYSTEM, ASK]).to_dict()
        for key in ("choices", "model"):
            assert direct[key] == bodies[0][key]
        assert direct["usage"]["prompt_tokens"] == bodies[0]["usage"]["prompt_tokens"]
    assert llm.errors == []


def test_an_embeddings_batch(client: openai.OpenAI) -> None:
    texts = {"a": "refund my order", "b": "track my parcel"}
    lines = [
        {
            "custom_id": key,
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": EMBEDDING_MODEL, "input": text},
        }
        for key, text in texts.items()
    ]
    batch = finished(client, submit(client, lines, endpoint="/v1/embeddings").id)
    assert (batch.status, batch.error_file_id) == ("completed", None)
    output = read_lines(client, batch.output_file_id)
    vectors = [line["response"]["body"]["data"][0]["embedding"] for line in output]
    assert vectors == embeddings(client, list(texts.values()))


LINE = chat_line("one", HI)
INVALID_FILES: list[Any] = [
    pytest.param(b'{"custom_id": "one"\n', "invalid_json_line", 1, id="not-json"),
    pytest.param(jsonl([LINE, LINE]), "duplicate_custom_id", 2, id="duplicate-custom-id"),
    pytest.param(jsonl([{**LINE, "method": "GET"}]), "invalid_method", 1, id="get"),
    pytest.param(
        jsonl([LINE, {**LINE, "custom_id": "two", "url": "/v1/embeddings"}]),
        "mismatched_endpoint",
        2,
        id="other-endpoint",
    ),
    pytest.param(
        jsonl([{**LINE, "custom_id": ""}]), "missing_required_parameter", 1, id="no-custom-id"
    ),
    pytest.param(
        jsonl([{**LINE, "body": {"messages": HI}}]),
        "missing_required_parameter",
        1,
        id="no-model",
    ),
    pytest.param(
        jsonl([LINE, chat_line("two", HI, model="gpt-4o")]), "mismatched_model", 2, id="two-models"
    ),
    pytest.param(b"\n\n", "empty_file", None, id="empty"),
]


@pytest.mark.parametrize(("data", "code", "line"), INVALID_FILES)
def test_an_invalid_input_file_fails_the_batch_naming_the_line(
    llm: ScriptedLLM, client: openai.OpenAI, data: bytes, code: str, line: int | None
) -> None:
    batch = finished(client, submit(client, data).id)
    assert batch.status == "failed"
    assert batch.failed_at is not None
    assert batch.errors is not None
    assert batch.errors.data is not None
    assert [(e.code, e.line) for e in batch.errors.data] == [(code, line)]
    assert batch.errors.data[0].message
    assert (batch.output_file_id, batch.error_file_id, llm.batch_requests) == (None, None, 0)


BAD_BATCHES: list[Any] = [
    pytest.param({"input_file_id": "file-404"}, openai.NotFoundError, "id", id="no-such-file"),
    pytest.param(
        {"endpoint": "/v1/completions"}, openai.BadRequestError, "endpoint", id="endpoint"
    ),
    pytest.param(
        {"completion_window": "1h"}, openai.BadRequestError, "completion_window", id="window"
    ),
    pytest.param(
        {"metadata": {"n": 1}}, openai.BadRequestError, "metadata", id="metadata-not-strings"
    ),
    pytest.param({"purpose": "user_data"}, openai.BadRequestError, "input_file_id", id="purpose"),
]


@pytest.mark.parametrize(("change", "error", "param"), BAD_BATCHES)
def test_bad_batch_creations(
    llm: ScriptedLLM,
    client: openai.OpenAI,
    change: dict[str, Any],
    error: type[openai.APIStatusError],
    param: str,
) -> None:
    purpose = change.get("purpose", "batch")
    uploaded = client.files.create(file=("in.jsonl", jsonl([LINE])), purpose=purpose)
    options: Any = {
        "input_file_id": uploaded.id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        **{key: value for key, value in change.items() if key != "purpose"},
    }
    with pytest.raises(error) as caught:
        client.batches.create(**options)
    assert caught.value.param == param
    assert llm.batches_created == 0


def test_held_batches_stay_in_progress_until_released_or_cancelled() -> None:
    with ScriptedLLM(hold_batches=True) as llm, make_client(llm) as c:
        kept, dropped = submit(c, [LINE]), submit(c, [LINE])
        for batch in (kept, dropped):
            wait_for(lambda b=batch: c.batches.retrieve(b.id).status == "in_progress")
        assert llm.batch_requests == 0

        cancelling = c.batches.cancel(dropped.id)
        assert cancelling.status in ("cancelling", "cancelled")
        cancelled = finished(c, dropped.id)
        assert cancelled.status == "cancelled"
        assert cancelled.cancelling_at is not None
        assert cancelled.cancelled_at is not None
        assert cancelled.request_counts is not None
        assert cancelled.request_counts.completed == 0
        assert cancelled.output_file_id is None
        assert c.batches.cancel(dropped.id).status == "cancelled"  # cancelling again is harmless
        assert c.batches.retrieve(kept.id).status == "in_progress"

        llm.hold_batches = False
        completed = finished(c, kept.id)
        assert completed.status == "completed"
        assert llm.batch_requests == 1
        with pytest.raises(openai.BadRequestError, match="completed"):
            c.batches.cancel(kept.id)
    assert llm.errors == []


def test_a_batch_waits_its_delay_and_closing_the_server_ends_held_batches() -> None:
    llm = ScriptedLLM(batch_delay_s=3600).start()
    try:
        with make_client(llm) as c:
            batch = submit(c, [LINE])
            wait_for(lambda: c.batches.retrieve(batch.id).status == "in_progress")
            llm.hold_batches = True
            llm.batch_delay_s = 0  # read when a batch starts: this one still waits its hour
            held = submit(c, [LINE])
            wait_for(lambda: c.batches.retrieve(held.id).status == "in_progress")
    finally:
        closing = threading.Thread(target=llm.close)
        closing.start()
        closing.join(60)
    assert not closing.is_alive(), "close() hung on waiting batches"
    assert llm.batch_requests == 0


def test_batches_list_pages_newest_first(client: openai.OpenAI) -> None:
    ids = [submit(client, [LINE]).id for _ in range(3)]
    for batch_id in ids:
        finished(client, batch_id)
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[:0:-1]
    assert page.has_more is True
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # auto-pagination
    assert [b.id for b in client.batches.list(after=ids[1])] == ids[:1]
    with pytest.raises(openai.BadRequestError):
        client.batches.list(limit=0)


def test_batch_objects_validate_against_the_async_client(llm: ScriptedLLM) -> None:
    async def run() -> Batch:
        async with make_async_client(llm) as client:
            uploaded = await client.files.create(file=("in.jsonl", jsonl([LINE])), purpose="batch")
            batch = await client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            while batch.status not in FINAL:
                await asyncio.sleep(0.02)
                batch = await client.batches.retrieve(batch.id)
            return batch

    batch = asyncio.run(asyncio.wait_for(run(), timeout=60))
    assert batch.status == "completed"
    assert batch.metadata is None


# ---- running it by hand ------------------------------------------------------------------


def test_command_line_capacity_and_delay() -> None:
    """--capacity 0 refuses every model request at once; --delay-ms delays everything else."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spanscore.examples.llm_server",
            "--port",
            "0",
            "--capacity",
            "0",
            "--delay-ms",
            "60000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+/v1", process.stdout.readline())
        assert found, "the server did not print its base URL"
        with openai.OpenAI(base_url=found.group(0), api_key="test", max_retries=0, timeout=1) as c:
            with pytest.raises(openai.RateLimitError):
                c.chat.completions.create(model=MODEL, messages=HI)
            with pytest.raises(openai.APITimeoutError):
                c.models.list()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
