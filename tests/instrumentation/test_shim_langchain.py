"""The LangChain / LangGraph shim: a real LangGraph ReAct agent (langgraph 1.2.22,
langchain-core 1.7.2) with langchain-openai's ChatOpenAI pointed at the local ScriptedLLM, its
tool runs turned into `execute_tool` spans by the global callback handler and its model calls
into `chat` spans by the OpenAI client shim; exported over OTLP/HTTP to the real collector and
asserted with SQL and through the rebuilt trajectory."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.tools import tool as lc_tool
from langchain_core.tracers import context as lc_context
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanscore.instrumentation as instrumentation
from spanscore.collector import Collector
from spanscore.evaluation import load_trajectory, open_lake
from spanscore.examples.customer_service.scripted import MODEL, Conversation, Turn
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy
from spanscore.instrumentation import langchain as shim
from spanscore.instrumentation.langchain import LangChainInstrumentor

from ..support.lake import query
from ..support.polling import wait_for

with warnings.catch_warnings():  # moved to `langchain.agents` (not installed), still shipped
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

THREAD = "lg-thread-1"
TURN_1 = "Where are my orders ORD-1001 and ORD-9999?"
TURN_2 = "Any keyboards under $100?"
REPLY_1 = "ORD-1001 has shipped; I could not find ORD-9999."
REPLY_2 = "The mechanical keyboard is $89."
SEARCH = {"query": "keyboard", "max_price": 100.0}
PLAN = Conversation(
    THREAD,
    "langchain_shim",
    [
        Turn(
            TURN_1,
            [[("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})]],
            REPLY_1,
        ),
        Turn(TURN_2, [[("search_products", SEARCH)]], REPLY_2),
    ],
)
ORDER = {"order_id": "ORD-1001", "status": "shipped"}
PRODUCTS = [{"name": "Mechanical keyboard", "price": 89.0}]
MISSING = "order ORD-9999 not found"


class ToolError(Exception):
    pass


@lc_tool
def get_order(order_id: str) -> dict[str, Any]:
    """Get order details by order ID"""
    if order_id != "ORD-1001":
        raise ToolError(f"order {order_id} not found")
    return ORDER


@lc_tool
def search_products(query: str, max_price: float | None = None) -> list[dict[str, Any]]:
    """Search the product catalog by keyword and optional price filter"""
    return PRODUCTS


def run_agent(base_url: str) -> list[Any]:
    """The two turns on one LangGraph thread; every message of the thread."""
    model = ChatOpenAI(model=MODEL, base_url=base_url, api_key="test", max_retries=0)  # type: ignore[arg-type]
    tools = ToolNode([get_order, search_products], handle_tool_errors=True)
    agent = create_react_agent(model, tools, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": THREAD}}
    state: Any = None
    for user in (TURN_1, TURN_2):
        state = agent.invoke({"messages": [{"role": "user", "content": user}]}, config)
    return list(state["messages"])


@pytest.fixture
def clean() -> Iterator[None]:
    yield
    instrumentation.uninstrument()
    LangChainInstrumentor().uninstrument()


@pytest.fixture
def exported(collector: Collector, lake_dir: Path, clean: None) -> tuple[Path, list[Any]]:
    instrumentation.instrument(
        tracer_provider=TracerProvider(), endpoint=f"http://127.0.0.1:{collector.http_port}"
    )
    assert LangChainInstrumentor().is_instrumented
    with ScriptedLLM(ScriptedPolicy([PLAN])) as llm:
        messages = run_agent(llm.base_url)
        assert not llm.errors, llm.errors
    instrumentation.uninstrument()
    # 4 model calls, 3 tool runs
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans") == [(7,)])
    # Each model call once, by the LangChain shim that sees it first (not by the openai one).
    assert query(
        lake_dir, "SELECT scope_name, count(*) FROM spans WHERE operation = 'chat' GROUP BY 1"
    ) == [("spanscore.instrumentation.langchain", 4)]
    return lake_dir, messages


def test_tool_spans_carry_call_ids_json_arguments_and_the_thread(
    exported: tuple[Path, list[Any]],
) -> None:
    lake, messages = exported
    tool_messages = [m for m in messages if m.type == "tool"]
    ids = [m.tool_call_id for m in tool_messages]
    assert len(set(ids)) == 3
    assert [m.status for m in tool_messages] == ["success", "error", "success"]
    rows = query(
        lake,
        """SELECT tool_name, tool_call_id, tool_arguments, tool_result, error_type,
                  status_code, conversation_id
           FROM spans WHERE operation = 'execute_tool'
           ORDER BY tool_name, tool_arguments->>'order_id'""",
    )
    got = [
        (name, call_id, json.loads(args), result and json.loads(result), *rest)
        for name, call_id, args, result, *rest in rows
    ]
    error = f"{__name__}.ToolError"
    assert got == [
        ("get_order", ids[0], {"order_id": "ORD-1001"}, ORDER, None, "UNSET", THREAD),
        ("get_order", ids[1], {"order_id": "ORD-9999"}, None, error, "ERROR", THREAD),
        # the arguments as JSON, never a repr; only those the model sent
        ("search_products", ids[2], SEARCH, PRODUCTS, None, "UNSET", THREAD),
    ]
    assert query(lake, "SELECT DISTINCT conversation_id FROM spans") == [(THREAD,)]


def test_trajectory_of_the_two_turns(exported: tuple[Path, list[Any]]) -> None:
    lake, messages = exported
    ids = [m.tool_call_id for m in messages if m.type == "tool"]
    trajectory = load_trajectory(open_lake(lake), THREAD)
    assert trajectory is not None
    assert trajectory.warnings == []
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (TURN_1, REPLY_1),
        (TURN_2, REPLY_2),
    ]
    calls = [
        (t.index, c.name, c.arguments, c.call_id, c.error, c.source)
        for t in trajectory.turns
        for c in t.tool_calls
    ]
    both = "span+messages"
    error = f"{__name__}.ToolError"
    assert calls == [
        (0, "get_order", {"order_id": "ORD-1001"}, ids[0], None, both),
        (0, "get_order", {"order_id": "ORD-9999"}, ids[1], error, both),
        (1, "search_products", SEARCH, ids[2], None, both),
    ]
    assert trajectory.tool_calls[0].result == ORDER
    assert MISSING in str(trajectory.tool_calls[1].result)  # what ToolNode sent the model
    groups = [c.parallel_group for c in trajectory.tool_calls]
    assert groups[0] == groups[1] != groups[2]


# --- a chat model that is not ChatOpenAI ------------------------------------------------------


def scripted_chat_model() -> Any:
    """A LangChain chat model of no provider the `openai` shim sees (as ChatAnthropic,
    ChatBedrock, ChatOllama are): langchain-core's own fake model, answering the plan's AI
    messages (tool calls with the provider's ids, Anthropic-style content blocks, usage)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    def calls(step: int, names: list[tuple[str, dict[str, Any]]]) -> AIMessage:
        return AIMessage(
            content=[{"type": "text", "text": "Let me check."}] if step == 0 else "",
            tool_calls=[
                {"name": n, "args": a, "id": f"toolu_{step}{i}", "type": "tool_call"}
                for i, (n, a) in enumerate(names)
            ],
            usage_metadata={"input_tokens": 20, "output_tokens": 5, "total_tokens": 25},
        )

    answers = iter(
        [
            calls(
                0,
                [("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})],
            ),
            AIMessage(content=REPLY_1),
            calls(1, [("search_products", SEARCH)]),
            AIMessage(content=[{"type": "text", "text": REPLY_2}]),
        ]
    )

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return ScriptedChatModel(messages=answers)


def test_a_chat_model_of_another_provider_is_recorded(
    collector: Collector, lake_dir: Path, clean: None
) -> None:
    """Before, only ChatOpenAI's calls were recorded (by the openai shim): with any other
    provider the conversation had tool calls but no user message, no answer, no turns."""
    instrumentation.instrument(
        tracer_provider=TracerProvider(), endpoint=f"http://127.0.0.1:{collector.http_port}"
    )
    tools = ToolNode([get_order, search_products], handle_tool_errors=True)
    agent = create_react_agent(scripted_chat_model(), tools, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": THREAD}}
    for user in (TURN_1, TURN_2):
        agent.invoke({"messages": [{"role": "user", "content": user}]}, config)
    instrumentation.uninstrument()
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans") == [(7,)])
    models = query(
        lake_dir,
        """SELECT name, user_message, tool_calls_requested, response_text, conversation_id
           FROM spans WHERE operation = 'chat' ORDER BY start_time_unix_nano""",
    )
    assert [(m[1], m[3], m[4]) for m in models] == [
        (TURN_1, "Let me check.", THREAD),
        (TURN_1, REPLY_1, THREAD),
        (TURN_2, None, THREAD),
        (TURN_2, REPLY_2, THREAD),
    ]
    assert json.loads(models[0][2]) == [
        {"id": "toolu_00", "name": "get_order", "arguments": {"order_id": "ORD-1001"}},
        {"id": "toolu_01", "name": "get_order", "arguments": {"order_id": "ORD-9999"}},
    ]
    trajectory = load_trajectory(open_lake(lake_dir), THREAD)
    assert trajectory is not None
    assert trajectory.warnings == []
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (TURN_1, REPLY_1),
        (TURN_2, REPLY_2),
    ]
    assert [(c.name, c.call_id, c.source) for c in trajectory.tool_calls] == [
        ("get_order", "toolu_00", "span+messages"),
        ("get_order", "toolu_01", "span+messages"),
        ("search_products", "toolu_10", "span+messages"),
    ]
    assert MISSING in (trajectory.tool_calls[1].error_message or "")
    assert trajectory.tool_calls[0].parallel_group == trajectory.tool_calls[1].parallel_group


# --- the handler alone ---------------------------------------------------------------------------


def test_instrument_is_idempotent_and_uninstrument_removes_the_hook(clean: None) -> None:
    before = list(lc_context._configure_hooks)
    assert LangChainInstrumentor().instrument(tracer_provider=TracerProvider())
    assert LangChainInstrumentor().instrument()  # a second call: warned, nothing added
    assert len(lc_context._configure_hooks) == len(before) + 1
    handler = LangChainInstrumentor._handler
    assert handler is not None
    LangChainInstrumentor().uninstrument()
    assert lc_context._configure_hooks == before
    assert not handler.enabled
    LangChainInstrumentor().uninstrument()  # a second call does nothing
    assert lc_context._configure_hooks == before


def test_a_failure_in_the_handler_never_reaches_the_agent(
    clean: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the shim")

    exporter = InMemorySpanExporter()
    instrumentation.instrument(tracer_provider=TracerProvider(), exporter=exporter)
    monkeypatch.setattr(shim, "tool_arguments", broken)
    monkeypatch.setattr(shim, "tool_output", broken)
    with (
        caplog.at_level(logging.WARNING, "spanscore.instrumentation"),
        ScriptedLLM(ScriptedPolicy([PLAN])) as llm,
    ):
        messages = run_agent(llm.base_url)
    assert [m.content for m in messages if m.type == "ai"][-1] == REPLY_2
    assert "bug in the shim" in caplog.text


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_spanscore_tool_used_as_a_langchain_tool_is_recorded_once(
    clean: None, is_async: bool
) -> None:
    """LangChain's handler sees the run first and records it; the `@tool` function it runs
    is not recorded again. Called outside LangChain, the same function is recorded."""
    import asyncio

    from spanscore.instrumentation import tool

    exporter = InMemorySpanExporter()
    instrumentation.instrument(tracer_provider=TracerProvider(), exporter=exporter)

    if is_async:

        @lc_tool
        @tool
        async def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up"""
            return {"order_id": order_id}

        call = {"name": "lookup", "args": {"order_id": "A1"}, "id": "call_1", "type": "tool_call"}
        asyncio.run(lookup.ainvoke(call))
        direct = asyncio.run(lookup.coroutine(order_id="B2"))  # type: ignore[misc]
    else:

        @lc_tool
        @tool
        def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up"""
            return {"order_id": order_id}

        call = {"name": "lookup", "args": {"order_id": "A1"}, "id": "call_1", "type": "tool_call"}
        lookup.invoke(call)
        direct = lookup.func(order_id="B2")  # type: ignore[misc]
    assert direct == {"order_id": "B2"}
    instrumentation.uninstrument()  # flushes
    spans = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert len(spans) == 2, [s.name for s in spans]
    through_langchain, called_directly = sorted(spans, key=lambda s: s.start_time or 0)
    assert (through_langchain.attributes or {}).get("gen_ai.tool.call.id") == "call_1"
    assert json.loads(str((called_directly.attributes or {})["gen_ai.tool.call.arguments"])) == {
        "order_id": "B2"
    }


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ({"a": 1}, ('{"a": 1}', None, None)),
        ("plain", ("plain", None, None)),
    ],
    ids=["value", "text"],
)
def test_tool_output(output: Any, expected: tuple[Any, ...]) -> None:
    assert shim.tool_output(output) == expected


def test_tool_output_of_tool_messages() -> None:
    from langchain_core.messages import ToolMessage

    ok = ToolMessage(content='{"a": 1}', tool_call_id="c1")
    failed = ToolMessage(content="Error: boom", tool_call_id="c2", status="error")
    assert shim.tool_output(ok) == ('{"a": 1}', "c1", None)
    assert shim.tool_output(failed) == ("Error: boom", "c2", "Error: boom")


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"thread_id": "t-1", "session_id": "s"}, "t-1"),
        ({"session_id": 7}, "7"),
        ({"thread_id": ""}, None),
        (None, None),
    ],
    ids=["thread", "session", "empty", "none"],
)
def test_conversation_of(metadata: Any, expected: str | None) -> None:
    assert shim.conversation_of(metadata) == expected
