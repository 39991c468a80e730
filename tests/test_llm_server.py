"""The scripted OpenAI-compatible server, spoken to by the real `openai` client.

Clients validate every answer strictly against the client's own models
(`_strict_response_validation=True`), so a field of the wrong shape fails here rather than in a
later test that uses the server.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from spanscore.examples.customer_service import Store
from spanscore.examples.customer_service.openai_loop import (
    CHAT_TOOLS,
    RESPONSES_TOOLS,
    run_conversation,
)
from spanscore.examples.customer_service.scripted import MODEL, Conversation, conversations
from spanscore.examples.llm_server import (
    DEFAULT_EMBEDDING_MODELS,
    DEFAULT_MODELS,
    ScriptedLLM,
    ScriptedPolicy,
)

PLANS = {plan.conversation_id: plan for plan in conversations()}
CALL_ID = re.compile(r"call_[0-9a-f]{8}_\d+")
Call = tuple[str, dict[str, Any]]


def filled(args: dict[str, Any]) -> dict[str, Any]:
    """A plan's arguments with "{code}" replaced by the code the customer received."""
    code = Store().expected_code(args.get("email", ""))
    return {k: code if v == "{code}" else v for k, v in args.items()}


def first_step(conversation_id: str | None) -> tuple[str, list[Call], str]:
    """(first user message, the calls the model should answer it with, or else its text)."""
    if conversation_id is None:
        return "What's the weather like?", [], ScriptedPolicy.fallback
    turn = PLANS[conversation_id].turns[0]
    return turn.user, [(name, filled(args)) for name, args in turn.steps[0]], ""


FIRST_STEPS = [
    pytest.param("cs-order-status-1", id="one-call"),
    pytest.param("cs-budget-search-1", id="parallel-calls"),
    pytest.param(None, id="text"),
]
STREAM = [pytest.param(False, id="json"), pytest.param(True, id="sse")]


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server
    assert server.errors == []


def make_client(llm: ScriptedLLM, **options: Any) -> openai.OpenAI:
    options.setdefault("_strict_response_validation", True)
    return openai.OpenAI(base_url=llm.base_url, api_key="test", **options)


@pytest.fixture
def client(llm: ScriptedLLM) -> Iterator[openai.OpenAI]:
    with make_client(llm, max_retries=0) as c:
        yield c


# ---- Chat Completions --------------------------------------------------------------------


def chat(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One chat completion, streamed or not, reduced to what both must agree on."""
    if not stream:
        completion = client.chat.completions.create(
            model=MODEL, messages=messages, tools=CHAT_TOOLS
        )
        choice = completion.choices[0]
        assert completion.usage is not None
        calls = [
            (c.id, c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or []
            if c.type == "function"
        ]
        return {
            "id": completion.id,
            "model": completion.model,
            "text": choice.message.content or "",
            "calls": calls,
            "finish": choice.finish_reason,
            "usage": completion.usage.to_dict(),
        }
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *body, last = chunks
    assert last.choices == []  # the usage chunk comes last
    assert last.usage is not None
    assert {c.id for c in chunks} == {last.id}
    assert body[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in body)
    assembled: dict[int, dict[str, str]] = {}
    for chunk in body:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = assembled.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    assert [c.choices[0].finish_reason for c in body[:-1]] == [None] * (len(body) - 1)
    return {
        "id": last.id,
        "model": last.model,
        "text": text,
        "calls": [
            (c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(assembled.items())
        ],
        "finish": body[-1].choices[0].finish_reason,
        "usage": last.usage.to_dict(),
    }


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("conversation_id", FIRST_STEPS)
def test_chat_completion_answers_the_plan(
    client: openai.OpenAI, conversation_id: str | None, stream: bool
) -> None:
    user, calls, text = first_step(conversation_id)
    got = chat(client, [{"role": "user", "content": user}], stream)
    assert got["id"].startswith("chatcmpl-")
    assert got["model"] == MODEL
    assert [(name, args) for _, name, args in got["calls"]] == calls
    assert all(CALL_ID.fullmatch(call_id) for call_id, _, _ in got["calls"])
    assert len({call_id for call_id, _, _ in got["calls"]}) == len(calls)
    assert got["text"] == text
    assert got["finish"] == ("tool_calls" if calls else "stop")
    usage = got["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.parametrize("conversation_id", FIRST_STEPS)
def test_chat_stream_says_what_the_json_answer_says(
    client: openai.OpenAI, conversation_id: str | None
) -> None:
    user, _, _ = first_step(conversation_id)
    messages = [{"role": "user", "content": user}]
    plain, streamed = chat(client, messages, False), chat(client, messages, True)
    # The second request repeats the first one's messages: they come from the prompt cache.
    assert plain["usage"]["prompt_tokens_details"].pop("cached_tokens") == 0
    assert streamed["usage"]["prompt_tokens_details"].pop("cached_tokens") > 0
    assert {**plain, "id": ""} == {**streamed, "id": ""}


def test_chat_follow_up_with_tool_results_gets_the_next_step(client: openai.OpenAI) -> None:
    turn = PLANS["cs-order-status-1"].turns[0]
    messages: list[Any] = [{"role": "user", "content": turn.user}]
    for step in turn.steps:
        got = chat(client, messages, stream=False)
        assert [(name, args) for _, name, args in got["calls"]] == [
            (name, filled(args)) for name, args in step
        ]
        calls = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in got["calls"]
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "{}"} for c in calls]
    assert chat(client, messages, stream=True)["text"] == turn.reply


# ---- Responses ---------------------------------------------------------------------------


def respond(client: openai.OpenAI, items: Any, stream: bool, **options: Any) -> dict[str, Any]:
    """One Responses API call, streamed or not, reduced to what both must agree on."""
    if not stream:
        response = client.responses.create(
            model=MODEL, input=items, tools=RESPONSES_TOOLS, **options
        )
    else:
        events = list(
            client.responses.create(
                model=MODEL, input=items, tools=RESPONSES_TOOLS, stream=True, **options
            )
        )
        kinds = [e.type for e in events]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        deltas: dict[int, str] = {}
        for e in events:
            if e.type in ("response.function_call_arguments.delta", "response.output_text.delta"):
                deltas[e.output_index] = deltas.get(e.output_index, "") + e.delta
        completed = events[-1]
        assert completed.type == "response.completed"
        response = completed.response
        for index, item in enumerate(response.output):
            if item.type == "function_call":
                assert deltas[index] == item.arguments
            elif item.type == "message" and item.content[0].type == "output_text":
                assert deltas[index] == item.content[0].text
    assert response.usage is not None
    return {
        "id": response.id,
        "model": response.model,
        "status": response.status,
        "text": response.output_text,
        "calls": [
            (item.call_id, item.name, json.loads(item.arguments))
            for item in response.output
            if item.type == "function_call"
        ],
        "usage": response.usage.to_dict(),
        "output": response.output,
    }


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("conversation_id", FIRST_STEPS)
def test_responses_answers_the_plan(
    client: openai.OpenAI, conversation_id: str | None, stream: bool
) -> None:
    user, calls, text = first_step(conversation_id)
    got = respond(client, user, stream)
    assert got["id"].startswith("resp_")
    assert (got["model"], got["status"]) == (MODEL, "completed")
    assert [(name, args) for _, name, args in got["calls"]] == calls
    assert all(CALL_ID.fullmatch(call_id) for call_id, _, _ in got["calls"])
    assert got["text"] == text
    usage = got["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0


@pytest.mark.parametrize("conversation_id", FIRST_STEPS)
def test_responses_stream_helper_accumulates_the_json_answer(
    client: openai.OpenAI, conversation_id: str | None
) -> None:
    user, _, _ = first_step(conversation_id)
    plain = client.responses.create(model=MODEL, input=user, tools=RESPONSES_TOOLS)
    with client.responses.stream(model=MODEL, input=user, tools=RESPONSES_TOOLS) as stream:
        final = stream.get_final_response()
    assert final.output_text == plain.output_text
    assert [(i.type, getattr(i, "call_id", None)) for i in final.output] == [
        (i.type, getattr(i, "call_id", None)) for i in plain.output
    ]


@pytest.mark.parametrize(
    "chained", [pytest.param(False, id="full-input"), pytest.param(True, id="chained")]
)
def test_responses_follow_up_with_function_call_outputs(
    client: openai.OpenAI, chained: bool
) -> None:
    """Tool results go back as function_call_output items, after the output or chained to it."""
    turn = PLANS["cs-cancel-1"].turns[0]
    items: list[Any] = [{"role": "user", "content": turn.user}]
    previous: dict[str, Any] = {}
    for step in turn.steps:
        got = respond(client, items, stream=chained, **previous)
        assert [(name, args) for _, name, args in got["calls"]] == [
            (name, filled(args)) for name, args in step
        ]
        outputs = [
            {"type": "function_call_output", "call_id": call_id, "output": "{}"}
            for call_id, _, _ in got["calls"]
        ]
        if chained:
            items, previous = outputs, {"previous_response_id": got["id"]}
        else:
            items += [*got["output"], *outputs]
    assert respond(client, items, stream=False, **previous)["text"] == turn.reply


# ---- the async client, models, errors ----------------------------------------------------


def test_async_client(llm: ScriptedLLM) -> None:
    user, calls, _ = first_step("cs-budget-search-1")

    async def talk() -> tuple[list[Any], Any]:
        async with openai.AsyncOpenAI(
            base_url=llm.base_url, api_key="test", _strict_response_validation=True
        ) as client:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": user}],
                tools=CHAT_TOOLS,
                stream=True,
            )
            chunks = [chunk async for chunk in stream]
            async with client.responses.stream(
                model=MODEL, input=user, tools=RESPONSES_TOOLS
            ) as events:
                response = await events.get_final_response()
            return chunks, response

    chunks, response = asyncio.run(talk())
    names = [d.function.name for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert [n for n in names if n] == [name for name, _ in calls]
    assert [(i.name, json.loads(i.arguments)) for i in response.output] == calls


def test_models_list(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models] == [*DEFAULT_MODELS, *DEFAULT_EMBEDDING_MODELS]
    assert all(m.object == "model" for m in models)


def _call_then_user() -> list[Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_order", "arguments": "{}"},
    }
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "user", "content": "well?"},
    ]


BAD_REQUESTS: list[Any] = [
    pytest.param(
        lambda c: c.chat.completions.create(model=MODEL, messages=[]),
        openai.BadRequestError,
        "messages",
        id="no-messages",
    ),
    pytest.param(
        lambda c: c.chat.completions.create(
            model=MODEL, messages=[{"role": "wizard", "content": "hi"}]
        ),
        openai.BadRequestError,
        "messages[0].role",
        id="unknown-role",
    ),
    pytest.param(
        lambda c: c.chat.completions.create(
            model=MODEL, messages=[{"role": "tool", "tool_call_id": "call_1", "content": "{}"}]
        ),
        openai.BadRequestError,
        "messages.[0].role",
        id="tool-result-without-call",
    ),
    pytest.param(
        lambda c: c.chat.completions.create(model=MODEL, messages=_call_then_user()),
        openai.BadRequestError,
        "messages",
        id="call-without-result",
    ),
    pytest.param(
        lambda c: c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[{"type": "function"}]
        ),
        openai.BadRequestError,
        "tools[0].function",
        id="tool-without-function",
    ),
    pytest.param(
        lambda c: c.responses.create(
            model=MODEL,
            input=[{"type": "function_call_output", "call_id": "call_9", "output": "{}"}],
        ),
        openai.BadRequestError,
        "input",
        id="output-without-call",
    ),
    pytest.param(
        lambda c: c.responses.create(model=MODEL, input="hi", previous_response_id="resp_404"),
        openai.BadRequestError,
        "previous_response_id",
        id="unknown-previous-response",
    ),
    pytest.param(
        lambda c: c.chat.completions.create(
            model="gpt-0", messages=[{"role": "user", "content": "hi"}]
        ),
        openai.NotFoundError,
        None,
        id="unknown-model",
    ),
    pytest.param(
        lambda c: c.get("/assistants/nope", cast_to=object),
        openai.NotFoundError,
        None,
        id="unknown-path",
    ),
]


@pytest.mark.parametrize(("request_", "error", "param"), BAD_REQUESTS)
def test_bad_requests_get_the_api_errors(
    client: openai.OpenAI,
    request_: Callable[[openai.OpenAI], object],
    error: type[openai.APIStatusError],
    param: str | None,
) -> None:
    with pytest.raises(error) as caught:
        request_(client)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["param"] == param
    assert body["message"]


def test_a_body_that_is_not_json_gets_400(llm: ScriptedLLM) -> None:
    request = urllib.request.Request(
        llm.base_url + "/chat/completions",
        data=b"{not json",
        headers={"content-type": "application/json", "authorization": "Bearer test"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 400
    assert json.load(caught.value)["error"]["type"] == "invalid_request_error"


# ---- knobs for unreliable providers ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retries", "error"),
    [
        pytest.param(500, 2, None, id="500-retried"),
        pytest.param(429, 2, None, id="429-retried"),
        pytest.param(500, 0, openai.InternalServerError, id="500-raised"),
        pytest.param(429, 0, openai.RateLimitError, id="429-raised"),
    ],
)
def test_failing_first_requests(
    status: int, retries: int, error: type[openai.APIStatusError] | None
) -> None:
    with (
        ScriptedLLM(fail_first=2, fail_status=status) as llm,
        make_client(llm, max_retries=retries) as client,
    ):
        messages: Any = [{"role": "user", "content": "hi"}]
        if error is None:
            completion = client.chat.completions.create(model=MODEL, messages=messages)
            assert completion.choices[0].message.content == ScriptedPolicy.fallback
            assert llm.request_count == 3
        else:
            with pytest.raises(error):
                client.chat.completions.create(model=MODEL, messages=messages)
            assert llm.request_count == 1


def test_delay_beyond_the_client_timeout() -> None:
    with ScriptedLLM(delay_s=1.5) as llm, make_client(llm, timeout=0.5, max_retries=0) as client:
        messages: Any = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model=MODEL, messages=messages)
        llm.delay_s = 0
        assert client.chat.completions.create(model=MODEL, messages=messages).choices
        assert llm.request_count == 2


def test_garbage_bodies() -> None:
    with ScriptedLLM(garbage_first=2) as llm:
        messages: Any = [{"role": "user", "content": "hi"}]
        with make_client(llm, max_retries=0, _strict_response_validation=False) as lenient:
            # Without strict validation the openai client hands back the body as a str.
            got: object = lenient.chat.completions.create(model=MODEL, messages=messages)
            assert isinstance(got, str)
            assert "Bad Gateway" in got
        with make_client(llm, max_retries=0) as client:
            with pytest.raises(openai.APIResponseValidationError):
                client.chat.completions.create(model=MODEL, messages=messages)
            assert client.chat.completions.create(model=MODEL, messages=messages).choices
        assert llm.request_count == 3


# ---- the example agent's tool loop over every plan ---------------------------------------


def expected_transcript(plan: Conversation) -> list[Any]:
    events: list[Any] = []
    for turn in plan.turns:
        events.append(("user", turn.user))
        for step, calls in enumerate(turn.steps):
            events += [("tool_call", step, name, filled(args)) for name, args in calls]
        events.append(("assistant", turn.reply))
    return events


def projected(transcript: list[dict[str, Any]]) -> list[Any]:
    return [
        ("tool_call", e["step"], e["name"], e["arguments"])
        if e["type"] == "tool_call"
        else (e["type"], e["text"])
        for e in transcript
    ]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("plan", list(PLANS.values()), ids=list(PLANS))
def test_run_conversation_replays_every_plan(
    client: openai.OpenAI, plan: Conversation, api: Any
) -> None:
    transcript = run_conversation(client, Store(), plan, api=api)
    assert projected(transcript) == expected_transcript(plan)
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert len({e["id"] for e in calls}) == len(calls)
    for e in calls:
        assert (e["result"] is None) == (e["error"] is not None)


def test_run_conversation_reports_tool_errors(client: openai.OpenAI) -> None:
    transcript = run_conversation(client, Store(), PLANS["cs-missing-order-1"])
    failed = [e for e in transcript if e["type"] == "tool_call" and e["error"]]
    assert [(e["name"], e["error"]) for e in failed] == [("get_order", "order ORD-9999 not found")]


# ---- running it by hand ------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_command_line_serves_until_stopped(stop: signal.Signals) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "spanscore.examples.llm_server", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:\d+/v1", process.stdout.readline())
        assert found, "the server did not print its base URL"
        with openai.OpenAI(base_url=found.group(0), api_key="test", max_retries=0) as client:
            assert MODEL in [m.id for m in client.models.list()]
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
        assert "GET /v1/models" in stderr  # verbose: one line per request
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
