"""The OpenAI client shim and `@tool`: the instrumented plain tool loop of the example (the real
`openai` client, Chat Completions and Responses) against the local ScriptedLLM, exported over
OTLP/HTTP to the real collector; asserted with SQL over the lake and through the rebuilt
trajectory. Streams, failures, the shim's own failures and (un)instrumenting use an in-memory
exporter."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import spanscore.instrumentation as instrumentation
from spanscore.collector import Collector
from spanscore.evaluation import load_trajectory, open_lake
from spanscore.examples.customer_service import openai_loop
from spanscore.examples.customer_service.scripted import MODEL, Conversation, Turn
from spanscore.examples.customer_service.store import Store
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy
from spanscore.instrumentation import _tool, _versions, tool
from spanscore.instrumentation import openai_client as shim
from spanscore.instrumentation.openai_client import OpenAIInstrumentor

from ..support.lake import query
from ..support.polling import wait_for

CONVERSATION = "loop-conv-1"
TURN_1 = "Where are my orders ORD-1001 and ORD-9999?"
TURN_2 = "Any keyboards under $100?"
REPLY_1 = "ORD-1001 has shipped; I could not find ORD-9999."
REPLY_2 = "The mechanical keyboard is $89."
SEARCH = {"query": "keyboard", "max_price": 100.0}
PLAN = Conversation(
    CONVERSATION,
    "client_shim",
    [
        Turn(  # two parallel calls of the same tool, one of which fails
            TURN_1,
            [[("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})]],
            REPLY_1,
        ),
        Turn(TURN_2, [[("search_products", SEARCH)]], REPLY_2),
    ],
)
TOOL_ERROR = "spanscore.examples.customer_service.store.ToolError"
MISSING = "order ORD-9999 not found"


@pytest.fixture
def clean() -> Iterator[None]:
    _tool.forget_requested_calls()  # the calls earlier tests' models requested
    yield
    instrumentation.uninstrument()
    OpenAIInstrumentor().uninstrument()


def _run_loop(collector: Collector, api: str) -> list[dict[str, Any]]:
    instrumentation.instrument(
        tracer_provider=TracerProvider(), endpoint=f"http://127.0.0.1:{collector.http_port}"
    )
    assert OpenAIInstrumentor().is_instrumented
    with ScriptedLLM(ScriptedPolicy([PLAN])) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        transcript = openai_loop.run_conversation(client, Store(), PLAN, api=api)  # type: ignore[arg-type]
        assert not llm.errors, llm.errors
    instrumentation.uninstrument()  # flushes
    return [e for e in transcript if e["type"] == "tool_call"]


@pytest.fixture(params=["chat", "responses"])
def exported(
    request: pytest.FixtureRequest, collector: Collector, lake_dir: Path, clean: None
) -> tuple[Path, list[dict[str, Any]]]:
    """The two-turn conversation run once by the instrumented loop; the calls it executed."""
    calls = _run_loop(collector, request.param)
    # 4 model calls (2 per turn) and 3 tool calls
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans") == [(7,)])
    return lake_dir, calls


def test_tool_spans_carry_the_models_call_ids(
    exported: tuple[Path, list[dict[str, Any]]],
) -> None:
    lake, executed = exported
    store = Store()
    ids = [c["id"] for c in executed]
    assert [(c["name"], c["arguments"]) for c in executed] == [
        ("get_order", {"order_id": "ORD-1001"}),
        ("get_order", {"order_id": "ORD-9999"}),
        ("search_products", SEARCH),
    ]
    assert len(set(ids)) == 3
    rows = query(
        lake,
        """SELECT name, tool_name, tool_call_id, tool_arguments, tool_result, error_type,
                  status_code, status_message, conversation_id,
                  attributes->>'$."gen_ai.tool.type"'
           FROM spans WHERE operation = 'execute_tool' ORDER BY start_time_unix_nano""",
    )
    got = [
        (name, tool_name, call_id, json.loads(args), result and json.loads(result), *rest)
        for name, tool_name, call_id, args, result, *rest in rows
    ]
    assert got == [
        (
            "execute_tool get_order",
            "get_order",
            ids[0],
            {"order_id": "ORD-1001"},
            store.get_order("ORD-1001"),
            None,
            "UNSET",
            None,
            CONVERSATION,
            "function",
        ),
        (
            "execute_tool get_order",
            "get_order",
            ids[1],
            {"order_id": "ORD-9999"},
            None,  # it raised: no result
            TOOL_ERROR,
            "ERROR",
            MISSING,
            CONVERSATION,
            "function",
        ),
        (
            "execute_tool search_products",
            "search_products",
            ids[2],
            SEARCH,
            store.search_products(**SEARCH),  # type: ignore[arg-type]
            None,
            "UNSET",
            None,
            CONVERSATION,
            "function",
        ),
    ]


def test_model_calls_record_requests_tools_and_answers(
    exported: tuple[Path, list[dict[str, Any]]],
) -> None:
    lake, executed = exported
    ids = [c["id"] for c in executed]
    rows = query(
        lake,
        """SELECT name, kind, conversation_id, user_message, tool_calls_requested,
                  response_text, attributes->>'$."gen_ai.provider.name"',
                  attributes->>'$."gen_ai.response.model"',
                  attributes->>'$."gen_ai.usage.input_tokens"' IS NOT NULL,
                  attributes->>'$."gen_ai.tool.definitions"'
           FROM spans WHERE operation = 'chat' ORDER BY start_time_unix_nano""",
    )
    summary = [
        (name, kind, conv, user, requested and [c["id"] for c in json.loads(requested)], text)
        for name, kind, conv, user, requested, text, *_ in rows
    ]
    chat = f"chat {MODEL}"
    assert summary == [
        (chat, "CLIENT", CONVERSATION, TURN_1, ids[:2], None),
        (chat, "CLIENT", CONVERSATION, TURN_1, None, REPLY_1),
        (chat, "CLIENT", CONVERSATION, TURN_2, ids[2:], None),
        (chat, "CLIENT", CONVERSATION, TURN_2, None, REPLY_2),
    ]
    for *_, provider, model, usage, definitions in rows:
        assert (provider, model, usage) == ("openai", MODEL, True)
        names = [d.get("name") or d["function"]["name"] for d in json.loads(definitions)]
        assert "get_order" in names
        assert len(names) == 6
    requested = json.loads(rows[0][4])
    assert [(c["name"], c["arguments"]) for c in requested] == [
        ("get_order", {"order_id": "ORD-1001"}),
        ("get_order", {"order_id": "ORD-9999"}),
    ]


def test_trajectory_of_the_two_turns(exported: tuple[Path, list[dict[str, Any]]]) -> None:
    lake, executed = exported
    store = Store()
    ids = [c["id"] for c in executed]
    trajectory = load_trajectory(open_lake(lake), CONVERSATION)
    assert trajectory is not None
    assert trajectory.warnings == []
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (TURN_1, REPLY_1),
        (TURN_2, REPLY_2),
    ]
    calls = [
        (t.index, c.name, c.arguments, c.call_id, c.result, c.error, c.source)
        for t in trajectory.turns
        for c in t.tool_calls
    ]
    both = "span+messages"
    assert calls == [
        (0, "get_order", {"order_id": "ORD-1001"}, ids[0], store.get_order("ORD-1001"), None, both),
        # the failed call: its result is what the loop sent the model
        (0, "get_order", {"order_id": "ORD-9999"}, ids[1], {"error": MISSING}, TOOL_ERROR, both),
        (1, "search_products", SEARCH, ids[2], store.search_products(**SEARCH), None, both),  # type: ignore[arg-type]
    ]
    groups = [c.parallel_group for c in trajectory.tool_calls]
    assert groups[0] == groups[1] != groups[2]


# --- in memory: streams, failures, the shim's own failures --------------------------------------


@pytest.fixture
def memory(clean: None) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert OpenAIInstrumentor().instrument(tracer_provider=provider)
    _tool.use_tracer_provider(provider)
    yield exporter
    OpenAIInstrumentor().uninstrument()
    _tool.use_tracer_provider(None)


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(ScriptedPolicy([PLAN])) as server:
        yield server


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _requested(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    outputs = json.loads(_attributes(span)["gen_ai.output.messages"])
    return [
        (p["name"], p["arguments"])
        for m in outputs
        for p in m["parts"]
        if p["type"] == "tool_call" and p["id"]
    ]


ORDERS_REQUESTED = [
    ("get_order", {"order_id": "ORD-1001"}),
    ("get_order", {"order_id": "ORD-9999"}),
]


def _stream_sync(client: openai.OpenAI, api: str, how: str) -> int:
    """Consume a stream one of three ways; the number of chunks/events seen."""
    if api == "chat":
        stream: Any = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": TURN_1}],
            tools=openai_loop.CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    else:
        stream = client.responses.create(
            model=MODEL, input=TURN_1, tools=openai_loop.RESPONSES_TOOLS, stream=True
        )
    if how == "iterate":
        return sum(1 for _ in stream)
    if how == "with":
        with stream as s:
            return sum(1 for _ in s)
    next(stream)  # "close": read one, then close early
    stream.close()
    return 1


async def _stream_async(client: openai.AsyncOpenAI, api: str) -> int:
    if api == "chat":
        stream: Any = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": TURN_1}],
            tools=openai_loop.CHAT_TOOLS,
            stream=True,
        )
    else:
        stream = await client.responses.create(
            model=MODEL, input=TURN_1, tools=openai_loop.RESPONSES_TOOLS, stream=True
        )
    count = 0
    async with stream as s:
        async for _ in s:
            count += 1
    return count


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("how", ["iterate", "with", "async"])
def test_streams_pass_through_and_record_the_requested_calls(
    memory: InMemorySpanExporter, llm: ScriptedLLM, api: str, how: str
) -> None:
    with instrumentation.conversation("c-1"):  # its registry is shared with asyncio.run's task
        if how == "async":
            client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
            seen = asyncio.run(_stream_async(client, api))
        else:
            sync = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
            seen = _stream_sync(sync, api, how)
        # the calls it requested are remembered for the tools
        assert _tool.claim_call_id("get_order", {"order_id": "ORD-9999"}) is not None
    assert seen > 2
    (span,) = memory.get_finished_spans()
    assert span.name == f"chat {MODEL}"
    assert _requested(span) == ORDERS_REQUESTED
    assert _attributes(span)["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert json.loads(_attributes(span)["gen_ai.input.messages"])[0]["parts"][0] == {
        "type": "text",
        "content": TURN_1,
    }


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_parse_helpers_are_recorded_once(
    memory: InMemorySpanExporter, llm: ScriptedLLM, api: str, is_async: bool
) -> None:
    """`parse()` (structured outputs) posts by itself, not through `create`."""

    async def parse_async() -> Any:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        if api == "chat":
            return await client.chat.completions.parse(
                model=MODEL, messages=[{"role": "user", "content": TURN_1}]
            )
        return await client.responses.parse(model=MODEL, input=TURN_1)

    def parse_sync() -> Any:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        if api == "chat":
            return client.chat.completions.parse(
                model=MODEL, messages=[{"role": "user", "content": TURN_1}]
            )
        return client.responses.parse(model=MODEL, input=TURN_1)

    parsed = asyncio.run(parse_async()) if is_async else parse_sync()
    assert parsed is not None
    (span,) = memory.get_finished_spans()
    assert span.name == f"chat {MODEL}"
    assert _requested(span) == ORDERS_REQUESTED
    assert _attributes(span)["gen_ai.response.finish_reasons"] == ("tool_call",)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_the_stream_helper_is_recorded_once(
    memory: InMemorySpanExporter, llm: ScriptedLLM, api: str
) -> None:
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    if api == "chat":
        with client.chat.completions.stream(
            model=MODEL, messages=[{"role": "user", "content": TURN_1}]
        ) as stream:
            events = sum(1 for _ in stream)
            assert stream.get_final_completion().choices[0].message.tool_calls
    else:
        with client.responses.stream(model=MODEL, input=TURN_1) as stream:
            events = sum(1 for _ in stream)
            assert stream.get_final_response().output
    assert events > 2
    (span,) = memory.get_finished_spans()
    assert _requested(span) == ORDERS_REQUESTED


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_stream_closed_early_still_ends_its_span(
    memory: InMemorySpanExporter, llm: ScriptedLLM, api: str
) -> None:
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    assert _stream_sync(client, api, "close") == 1
    (span,) = memory.get_finished_spans()
    assert span.status.status_code is StatusCode.UNSET
    assert _attributes(span)["gen_ai.request.model"] == MODEL


def test_a_failed_model_call_raises_unchanged_and_is_recorded(
    memory: InMemorySpanExporter, llm: ScriptedLLM
) -> None:
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
    (span,) = memory.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert _attributes(span)["error.type"] == "openai.NotFoundError".replace(
        "openai.", f"{type(raised.value).__module__}."
    )
    assert span.name == "chat no-such-model"


def test_async_model_calls_are_recorded(memory: InMemorySpanExporter, llm: ScriptedLLM) -> None:
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)

    async def both() -> None:
        await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": TURN_1}],
            tools=openai_loop.CHAT_TOOLS,
        )
        await client.responses.create(model=MODEL, input=TURN_1, tools=openai_loop.RESPONSES_TOOLS)

    asyncio.run(both())
    spans = memory.get_finished_spans()
    assert [_requested(s) for s in spans] == [ORDERS_REQUESTED, ORDERS_REQUESTED]


def test_a_failure_in_the_shim_never_reaches_the_caller(
    memory: InMemorySpanExporter,
    llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the shim")

    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    messages: Any = [{"role": "user", "content": TURN_1}]
    with caplog.at_level(logging.WARNING, "spanscore.instrumentation"):
        monkeypatch.setattr(shim, "chat_completion_output", broken)
        completion = client.chat.completions.create(model=MODEL, messages=messages)
        assert len(completion.choices[0].message.tool_calls or []) == 2
        (span,) = memory.get_finished_spans()  # ended, without what failed
        assert "gen_ai.output.messages" not in _attributes(span)
        monkeypatch.setattr(shim, "request_attributes", broken)  # fails before the call
        completion = client.chat.completions.create(model=MODEL, messages=messages)
        assert len(completion.choices[0].message.tool_calls or []) == 2
    failures = [r for r in caplog.records if r.exc_info and "bug in the shim" in str(r.exc_info[1])]
    assert len(failures) == 2
    assert len(memory.get_finished_spans()) == 1  # the second call went unrecorded


def test_content_policy_applies_to_messages(clean: None, llm: ScriptedLLM) -> None:
    exporter = InMemorySpanExporter()
    instrumentation.instrument(
        tracer_provider=TracerProvider(), exporter=exporter, capture_messages=False
    )
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": TURN_1}], tools=openai_loop.CHAT_TOOLS
    )
    instrumentation.uninstrument()
    (span,) = exporter.get_finished_spans()
    attributes = _attributes(span)
    assert "gen_ai.input.messages" not in attributes
    assert "gen_ai.output.messages" not in attributes
    assert attributes["gen_ai.usage.output_tokens"] > 0


# --- instrument / uninstrument -------------------------------------------------------------------


def test_instrument_is_idempotent_and_uninstrument_restores(clean: None) -> None:
    from openai.resources.chat.completions import AsyncCompletions, Completions
    from openai.resources.responses import AsyncResponses, Responses

    classes = (Completions, AsyncCompletions, Responses, AsyncResponses)
    originals = [c.__dict__["create"] for c in classes]
    assert OpenAIInstrumentor().instrument(tracer_provider=TracerProvider())
    patched = [c.__dict__["create"] for c in classes]
    assert all(p is not o for p, o in zip(patched, originals, strict=True))
    assert all(p.__spanscore_original__ is o for p, o in zip(patched, originals, strict=True))
    assert OpenAIInstrumentor().instrument()  # a second call: warned, nothing wrapped twice
    assert [c.__dict__["create"] for c in classes] == patched
    OpenAIInstrumentor().uninstrument()
    assert [c.__dict__["create"] for c in classes] == originals
    OpenAIInstrumentor().uninstrument()  # a second call does nothing
    assert [c.__dict__["create"] for c in classes] == originals


def test_instrument_activates_the_client_shim_and_uninstrument_removes_it(clean: None) -> None:
    from openai.resources.chat.completions import Completions

    original = Completions.__dict__["create"]
    instrumentation.instrument(tracer_provider=TracerProvider(), exporter=InMemorySpanExporter())
    assert OpenAIInstrumentor().is_instrumented
    instrumentation.uninstrument()
    assert not OpenAIInstrumentor().is_instrumented
    assert Completions.__dict__["create"] is original


@pytest.mark.parametrize(
    ("version", "instrumented"),
    [("3.52.0", True), ("1.66.0", True), ("1.65.9", False), ("4.0.0", False)],
    ids=["tested", "oldest", "no-responses-api", "next-major"],
)
def test_supported_versions(
    version: str, instrumented: bool, monkeypatch: pytest.MonkeyPatch, clean: None
) -> None:
    monkeypatch.setattr(_versions.metadata, "version", lambda name: version)
    assert OpenAIInstrumentor().instrument() is instrumented


def test_with_the_agents_sdk_shim_model_calls_are_recorded_once(clean: None) -> None:
    pytest.importorskip("agents")
    from agents.tracing import set_trace_processors

    from spanscore.instrumentation import openai_agents

    from ..support.agents_conversation import PLAN as AGENTS_PLAN
    from ..support.agents_conversation import run_conversation as run_agents

    saved = list(openai_agents.registered_processors())
    set_trace_processors([])
    exporter = InMemorySpanExporter()
    try:
        instrumentation.instrument(tracer_provider=TracerProvider(), exporter=exporter)
        assert OpenAIInstrumentor().is_instrumented
        with ScriptedLLM(ScriptedPolicy([AGENTS_PLAN])) as server:
            run_agents(server.base_url)
        instrumentation.uninstrument()
    finally:
        set_trace_processors(saved)
    scopes = [
        s.instrumentation_scope.name if s.instrumentation_scope else None
        for s in exporter.get_finished_spans()
        if _attributes(s).get("gen_ai.operation.name") == "chat"
    ]
    assert scopes == ["spanscore.instrumentation.openai_agents"] * 4


# --- @tool ---------------------------------------------------------------------------------------


@pytest.fixture
def tools(clean: None) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tool.use_tracer_provider(provider)
    yield exporter
    _tool.use_tracer_provider(None)


def _tool_rows(exporter: InMemorySpanExporter) -> list[tuple[Any, ...]]:
    return [
        (
            s.name,
            _attributes(s).get("gen_ai.tool.call.id"),
            _attributes(s).get("gen_ai.tool.call.arguments"),
            _attributes(s).get("gen_ai.tool.call.result"),
            _attributes(s).get("error.type"),
            s.status.status_code.name,
        )
        for s in exporter.get_finished_spans()
    ]


class OutOfStock(Exception):
    pass


@tool
def get_order(order_id: str, verbose: bool = False) -> dict[str, Any]:
    if order_id == "ORD-9999":
        raise OutOfStock(f"order {order_id} not found")
    return {"order_id": order_id}


@tool(name="search")
async def search_products(query: str, **filters: Any) -> list[str]:
    await asyncio.sleep(0)
    return [query, *filters]


def test_tool_decorator_records_calls_linked_by_name_arguments_and_order(
    tools: InMemorySpanExporter,
) -> None:
    # one model response requested three calls (two of the same tool) and another tool
    _tool.remember_requested_calls(
        [
            ("call_a", "get_order", '{"order_id": "ORD-1"}'),
            ("call_b", "get_order", '{"order_id": "ORD-9999"}'),
            ("call_c", "search", '{"query": "mouse", "max_price": 30}'),
            ("call_d", "get_order", '{"order_id": "ORD-1"}'),
        ]
    )
    with pytest.raises(OutOfStock) as raised:  # executed out of order: matched by arguments
        get_order("ORD-9999")
    assert str(raised.value) == "order ORD-9999 not found"  # the user's exception, unchanged
    assert get_order(order_id="ORD-1") == {"order_id": "ORD-1"}
    assert asyncio.run(search_products("mouse", max_price=30)) == ["mouse", "max_price"]
    assert get_order("ORD-1") == {"order_id": "ORD-1"}  # the repeated call: in order
    assert get_order("ORD-2") == {"order_id": "ORD-2"}  # nothing pending: no call id
    error = f"{__name__}.OutOfStock"
    assert _tool_rows(tools) == [
        ("execute_tool get_order", "call_b", '{"order_id": "ORD-9999"}', None, error, "ERROR"),
        (
            "execute_tool get_order",
            "call_a",
            '{"order_id": "ORD-1"}',
            '{"order_id": "ORD-1"}',
            None,
            "UNSET",
        ),
        (
            "execute_tool search",
            "call_c",
            '{"query": "mouse", "max_price": 30}',
            '["mouse", "max_price"]',
            None,
            "UNSET",
        ),
        (
            "execute_tool get_order",
            "call_d",
            '{"order_id": "ORD-1"}',
            '{"order_id": "ORD-1"}',
            None,
            "UNSET",
        ),
        (
            "execute_tool get_order",
            None,
            '{"order_id": "ORD-2"}',
            '{"order_id": "ORD-2"}',
            None,
            "UNSET",
        ),
    ]
    pending = _tool.pending_calls()
    assert pending is not None
    assert len(pending) == 0


def test_tool_context_manager(tools: InMemorySpanExporter) -> None:
    with tool("cancel_order", call_id="call_x", arguments={"order_id": "ORD-1"}) as t:
        t.result = {"cancelled": True}
    with pytest.raises(KeyError), tool("lookup", arguments='{"email": "a@b.c"}'):
        raise KeyError("a@b.c")

    async def in_task() -> None:
        async with tool("verify", tool_type="extension") as t:
            t.result = "ok"

    asyncio.run(in_task())
    assert _tool_rows(tools) == [
        (
            "execute_tool cancel_order",
            "call_x",
            '{"order_id": "ORD-1"}',
            '{"cancelled": true}',
            None,
            "UNSET",
        ),
        ("execute_tool lookup", None, '{"email": "a@b.c"}', None, "KeyError", "ERROR"),
        ("execute_tool verify", None, None, "ok", None, "UNSET"),
    ]
    assert _attributes(tools.get_finished_spans()[2])["gen_ai.tool.type"] == "extension"


def test_tool_results_that_are_not_json_are_recorded_as_text(tools: InMemorySpanExporter) -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    with tool("t", arguments={"when": Opaque()}) as t:
        t.result = Opaque()
    ((_, _, arguments, result, _, _),) = _tool_rows(tools)
    assert (arguments, result) == ('{"when": "opaque"}', '"opaque"')


def test_the_registry_is_bounded() -> None:
    pending = _tool.PendingCalls(maxlen=3)
    pending.add([(f"call_{i}", "f", "{}") for i in range(5)])
    assert len(pending) == 3
    assert pending.claim("f") == "call_2"  # the oldest were dropped


def test_tool_telemetry_failures_never_reach_the_tool(
    tools: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the shim")

    monkeypatch.setattr(_tool, "claim_call_id", broken)
    with caplog.at_level(logging.WARNING, "spanscore.instrumentation"):
        assert get_order("ORD-1") == {"order_id": "ORD-1"}
        with pytest.raises(OutOfStock):
            get_order("ORD-9999")
    assert "bug in the shim" in caplog.text
