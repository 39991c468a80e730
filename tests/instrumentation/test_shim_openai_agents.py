"""The OpenAI Agents SDK shim: the real SDK (openai-agents 0.24.0, Responses API) against the
local ScriptedLLM, its traces turned into GenAI spans, exported over OTLP/HTTP to the real
collector; asserted with SQL over the lake and through the rebuilt trajectory."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, set_default_openai_api, set_default_openai_client
from agents.tool import function_tool
from agents.tracing import set_trace_processors
from openai import AsyncOpenAI
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanscore.collector import Collector
from spanscore.evaluation import load_trajectory, open_lake
from spanscore.evaluation.trajectory.model import Handoff
from spanscore.examples.customer_service.scripted import Conversation, Turn
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy
from spanscore.instrumentation import _versions
from spanscore.instrumentation import openai_agents as shim
from spanscore.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from ..support.agents_conversation import (
    AGENT,
    GROUP,
    MISSING,
    MODEL,
    ORDERS,
    PLAN,
    PRODUCTS,
    REPLY_1,
    REPLY_2,
    SEARCH,
    TURN_1,
    TURN_2,
    run_conversation,
)
from ..support.lake import query
from ..support.polling import wait_for


@pytest.fixture
def sdk_processors() -> Iterator[None]:
    """No other trace processor (the SDK's default one exports to OpenAI); restored after."""
    saved = list(shim.registered_processors())
    set_trace_processors([])
    yield
    OpenAIAgentsInstrumentor().uninstrument()
    set_trace_processors(saved)


@pytest.fixture
def exported(
    collector: Collector, lake_dir: Path, sdk_processors: None
) -> tuple[Path, list[dict[str, Any]]]:
    """The conversation run once, its spans in the lake; the executed tool calls."""
    provider = TracerProvider()
    endpoint = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    assert OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    with ScriptedLLM(ScriptedPolicy([PLAN])) as llm:
        executed = run_conversation(llm.base_url)
        assert not llm.errors, llm.errors
    assert provider.force_flush(30_000)
    provider.shutdown()
    # per run: workflow, task, agent, 2 turns, 2 model calls; and 3 tool calls
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans") == [(17,)])
    return lake_dir, executed


def test_tool_calls_carry_the_models_call_ids(
    exported: tuple[Path, list[dict[str, Any]]],
) -> None:
    lake, executed = exported
    assert [(c["name"], c["arguments"]) for c in executed] == [
        ("get_order", {"order_id": "ORD-1001"}),
        ("get_order", {"order_id": "ORD-9999"}),
        ("search_products", {"query": "keyboard", "max_price": 100.0}),
    ]
    ids = [c["id"] for c in executed]
    assert len(set(ids)) == 3
    assert all(ids)
    rows = query(
        lake,
        """SELECT operation, tool_name, tool_call_id, tool_arguments, tool_result, error_type,
                  conversation_id, status_code, status_message
           FROM spans WHERE operation = 'execute_tool' ORDER BY tool_call_id""",
    )
    got = sorted(
        (
            (op, name, call_id, json.loads(args), json.loads(result), error, conv, status, msg)
            for op, name, call_id, args, result, error, conv, status, msg in rows
        ),
        key=lambda r: ids.index(r[2]),
    )
    assert got == [
        (
            "execute_tool",
            "get_order",
            ids[0],
            {"order_id": "ORD-1001"},
            ORDERS["ORD-1001"],
            None,
            GROUP,
            "UNSET",
            None,
        ),
        (
            "execute_tool",
            "get_order",
            ids[1],
            {"order_id": "ORD-9999"},
            {"error": MISSING},  # what the failure function sent the model
            MISSING,  # the real error, not the SDK's generic message
            GROUP,
            "ERROR",
            f"Error running tool (non-fatal): {MISSING}",  # the SDK message, the error
        ),
        (
            "execute_tool",
            "search_products",
            ids[2],
            {"query": "keyboard", "max_price": 100.0},
            PRODUCTS,
            None,
            GROUP,
            "UNSET",
            None,
        ),
    ]
    # the ids are the ones the model's responses requested
    requested = query(
        lake,
        "SELECT tool_calls_requested FROM spans WHERE operation = 'chat' "
        "AND tool_calls_requested IS NOT NULL ORDER BY start_time_unix_nano",
    )
    assert [[c["id"] for c in json.loads(r[0])] for r in requested] == [ids[:2], ids[2:]]


def test_every_span_carries_the_group_id_and_the_sdk_structure(
    exported: tuple[Path, list[dict[str, Any]]],
) -> None:
    lake, _ = exported
    assert query(lake, "SELECT DISTINCT conversation_id FROM spans") == [(GROUP,)]
    rows = query(
        lake,
        """SELECT s.name, s.operation, s.agent_name, p.name
           FROM spans s LEFT JOIN spans p
             ON p.span_id = s.parent_span_id AND p.trace_id = s.trace_id
           ORDER BY s.start_time_unix_nano""",
    )
    # Each run: workflow > task > agent > turn N > (model call, the tools it requested).
    workflow, agent, chat = "invoke_workflow support", f"invoke_agent {AGENT}", f"chat {MODEL}"
    tool_1, tool_2 = "execute_tool get_order", "execute_tool search_products"
    run_start = [
        (workflow, "invoke_workflow", None, None),
        ("task support", None, None, workflow),
        (agent, "invoke_agent", AGENT, "task support"),
        ("turn 1", None, None, agent),
        (chat, "chat", None, "turn 1"),
    ]
    assert rows[:5] == run_start
    assert sorted(rows[5:7]) == [(tool_1, "execute_tool", None, "turn 1")] * 2  # parallel
    assert rows[7:] == [
        ("turn 2", None, None, agent),
        (chat, "chat", None, "turn 2"),
        *run_start,
        (tool_2, "execute_tool", None, "turn 1"),
        ("turn 2", None, None, agent),
        (chat, "chat", None, "turn 2"),
    ]
    assert query(lake, "SELECT count(DISTINCT trace_id) FROM spans") == [(2,)]
    usage = query(
        lake,
        """SELECT count(*) FROM spans WHERE operation = 'chat'
           AND attributes['gen_ai.usage.input_tokens'] IS NOT NULL
           AND attributes['gen_ai.provider.name'] = '"openai"'""",
    )
    assert usage == [(4,)]


def test_trajectory_of_the_two_turns(exported: tuple[Path, list[dict[str, Any]]]) -> None:
    lake, executed = exported
    ids = [c["id"] for c in executed]
    trajectory = load_trajectory(open_lake(lake), GROUP)
    assert trajectory is not None
    assert trajectory.warnings == []
    assert trajectory.agent_name == AGENT
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (TURN_1, REPLY_1),
        (TURN_2, REPLY_2),
    ]
    calls = [
        (t.index, c.name, c.arguments, c.call_id, c.result, c.error, c.source)
        for t in trajectory.turns
        for c in t.tool_calls
    ]
    both = "span+messages"  # the model's request joined to its tool span
    assert calls == [
        (0, "get_order", {"order_id": "ORD-1001"}, ids[0], ORDERS["ORD-1001"], None, both),
        (0, "get_order", {"order_id": "ORD-9999"}, ids[1], {"error": MISSING}, MISSING, both),
        (1, "search_products", SEARCH, ids[2], PRODUCTS, None, both),
    ]
    groups = [c.parallel_group for c in trajectory.tool_calls]
    assert groups[0] == groups[1] != groups[2]


# --- hand-offs --------------------------------------------------------------------------------

HANDOFF_GROUP = "agents-handoff-1"
HANDOFF_ASK = "Please refund order ORD-1001, it arrived broken."
HANDOFF_REPLY = "I refunded ORD-1001."
HANDOFF_PLAN = Conversation(
    HANDOFF_GROUP,
    "agents_handoff",
    [
        Turn(  # triage hands off (the SDK's transfer tool); billing calls refund_order
            HANDOFF_ASK,
            [[("transfer_to_billing", {})], [("refund_order", {"order_id": "ORD-1001"})]],
            HANDOFF_REPLY,
        )
    ],
)


def test_a_hand_off_is_a_step_of_its_turn(
    collector: Collector, lake_dir: Path, sdk_processors: None
) -> None:
    """Triage hands the conversation to billing, which calls a tool and answers: one turn with
    a hand-off from triage to billing, in the builder's trajectory and in the views alike."""
    from ..support.agreement import agree_all

    provider = TracerProvider()
    endpoint = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    assert OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    refunded: list[str] = []

    @function_tool
    def refund_order(order_id: str) -> str:
        """Refund an order"""
        refunded.append(order_id)
        return json.dumps({"order_id": order_id, "refunded": True})

    billing = Agent(name="billing", instructions="Refunds.", model=MODEL, tools=[refund_order])
    triage = Agent(name="triage", instructions="Route.", model=MODEL, handoffs=[billing])
    with ScriptedLLM(ScriptedPolicy([HANDOFF_PLAN])) as llm:
        set_default_openai_client(
            AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0),
            use_for_tracing=False,
        )
        set_default_openai_api("responses")
        config = RunConfig(group_id=HANDOFF_GROUP, workflow_name="support")
        result = asyncio.run(Runner.run(triage, HANDOFF_ASK, run_config=config))
        assert not llm.errors, llm.errors
    assert result.final_output == HANDOFF_REPLY
    assert result.last_agent.name == "billing"
    assert refunded == ["ORD-1001"]
    assert provider.force_flush(30_000)
    provider.shutdown()
    wait_for(
        lambda: query(lake_dir, "SELECT count(*) FROM spans WHERE operation = 'handoff'") == [(1,)]
    )
    # every span of the run is in (the workflow span ends last)
    wait_for(lambda: query(lake_dir, "SELECT count(*) FROM spans WHERE parent_span_id IS NULL"))

    [trajectory] = agree_all(lake_dir, [HANDOFF_GROUP])
    [turn] = trajectory.turns
    handoffs = [s for s in turn.steps if isinstance(s, Handoff)]
    assert [(h.from_agent, h.to_agent) for h in handoffs] == [("triage", "billing")]
    assert (turn.user_message, turn.final_response) == (HANDOFF_ASK, HANDOFF_REPLY)
    refund = next(c for c in turn.tool_calls if c.name == "refund_order")
    assert (refund.arguments, refund.result, refund.source) == (
        {"order_id": "ORD-1001"},
        {"order_id": "ORD-1001", "refunded": True},
        "span+messages",
    )
    # triage asks for the transfer, hands off; billing calls its tool, then answers
    assert [(type(s).__name__, getattr(s, "name", None)) for s in turn.steps] == [
        ("ModelCall", f"chat {MODEL}"),
        ("ToolCall", "transfer_to_billing"),
        ("Handoff", None),
        ("ModelCall", f"chat {MODEL}"),
        ("ToolCall", "refund_order"),
        ("ModelCall", f"chat {MODEL}"),
    ]
    assert query(
        lake_dir,
        "SELECT handoff_count, model_call_count FROM turns WHERE conversation_id = ?",
        [HANDOFF_GROUP],
    ) == [(1, 3)]


# --- the processor's own failures never reach the agent ----------------------------------------


@pytest.fixture
def memory(sdk_processors: None) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    yield exporter
    OpenAIAgentsInstrumentor().uninstrument()


def test_a_failure_in_the_processor_never_reaches_the_agent(
    memory: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("bug in the shim")

    monkeypatch.setattr(shim, "_function_end_attributes", broken)
    monkeypatch.setattr(shim, "_chat_end_attributes", broken)
    with (
        caplog.at_level(logging.WARNING, "spanscore.instrumentation"),
        ScriptedLLM(ScriptedPolicy([PLAN])) as llm,
    ):
        executed = run_conversation(llm.base_url)
    assert len(executed) == 3  # the agent ran to the end
    assert "bug in the shim" in caplog.text
    names = sorted({s.name for s in memory.get_finished_spans()})
    assert names == [  # spans are still ended, without what failed
        "chat",  # its model comes with the response: not read
        "execute_tool get_order",
        "execute_tool search_products",
        f"invoke_agent {AGENT}",
        "invoke_workflow support",
        "task support",
        "turn 1",
        "turn 2",
    ]


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda p: p.on_span_start(object()), id="span-start-junk"),
        pytest.param(lambda p: p.on_span_end(object()), id="span-end-junk"),
        pytest.param(lambda p: p.on_trace_start(None), id="trace-start-none"),
        pytest.param(lambda p: p.on_trace_end(object()), id="trace-end-junk"),
        pytest.param(lambda p: p.shutdown(), id="shutdown"),
        pytest.param(lambda p: p.force_flush(), id="flush"),
    ],
)
def test_processor_callbacks_never_raise(call: Callable[[Any], None]) -> None:
    processor = shim._make_processor(TracerProvider().get_tracer("t"))
    call(processor)  # the SDK guards its processors too; ours must not rely on it


# --- instrument / uninstrument -----------------------------------------------------------------


def test_instrument_is_idempotent_and_uninstrument_restores(sdk_processors: None) -> None:
    other = shim._make_processor(TracerProvider().get_tracer("other"))
    set_trace_processors([other])
    before = list(shim.registered_processors())
    instrumentor = OpenAIAgentsInstrumentor()
    assert instrumentor.instrument(tracer_provider=TracerProvider())
    assert OpenAIAgentsInstrumentor().instrument()  # a second call: warned, nothing added
    added = [p for p in shim.registered_processors() if p not in before]
    assert len(added) == 1
    assert instrumentor.is_instrumented
    instrumentor.uninstrument()
    assert list(shim.registered_processors()) == before
    assert not added[0].enabled
    OpenAIAgentsInstrumentor().uninstrument()  # a second call does nothing
    assert list(shim.registered_processors()) == before
    assert instrumentor.instrument()  # and again, after
    assert len(list(shim.registered_processors())) == 2


@pytest.mark.parametrize(
    ("version", "instrumented"),
    [("0.24.0", True), ("0.24.7", True), ("0.23.9", False), ("1.0.0", False)],
    ids=["tested", "patch", "too-old", "next-major"],
)
def test_supported_versions(
    version: str, instrumented: bool, monkeypatch: pytest.MonkeyPatch, sdk_processors: None
) -> None:
    monkeypatch.setattr(_versions.metadata, "version", lambda name: version)
    assert OpenAIAgentsInstrumentor().instrument() is instrumented


# --- pure helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"message": "Error running tool", "data": {"tool_name": "t", "error": "boom"}},
            ("boom", "Error running tool: boom"),
        ),
        ({"message": "Error getting response", "data": None}, ("Error getting response",) * 2),
        # structured data is kept as JSON, never as a Python repr
        (
            {"message": "m", "data": {"error": {"code": 1}}},
            ('{"code": 1}', 'm: {"code": 1}'),
        ),
        ({"message": "", "data": None}, ("error", "error")),
    ],
    ids=["tool", "no-data", "structured", "empty"],
)
def test_error_attributes(error: dict[str, Any], expected: tuple[str, str]) -> None:
    assert shim.error_attributes(error) == expected


def test_responses_input_groups_parallel_calls_and_results() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": '{"a": 2}'},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    assert shim.responses_input_messages(items) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": 1}},
                {"type": "tool_call", "id": "c2", "name": "f", "arguments": {"a": 2}},
            ],
        },
        {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": "c1", "response": "1"},
                {"type": "tool_call_response", "id": "c2", "response": "2"},
            ],
        },
        {"role": "assistant", "parts": [{"type": "text", "content": "done"}]},
    ]


def test_instrument_registers_the_shim_when_agents_is_installed(sdk_processors: None) -> None:
    import spanscore.instrumentation as instrumentation

    provider = instrumentation.instrument(
        tracer_provider=TracerProvider(), exporter=InMemorySpanExporter()
    )
    try:
        assert OpenAIAgentsInstrumentor().is_instrumented
        assert len(list(shim.registered_processors())) == 1
        assert provider is not None
    finally:
        instrumentation.uninstrument()
    assert not OpenAIAgentsInstrumentor().is_instrumented
    assert list(shim.registered_processors()) == []


# --- privacy: what content the shim records ------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "kind", "value", "expected"),
    [
        # captured as is by default
        ({}, "tool_arguments", '{"email": "a@b.c"}', '{"email": "a@b.c"}'),
        # a kind switched off records nothing
        ({"tool_results": False}, "tool_results", '{"ok": true}', None),
        # key patterns, nested, JSON text stays JSON text
        (
            {"redact_keys": ("email", "*token*")},
            "tool_arguments",
            '{"email": "a@b.c", "auth": {"api_token": "t"}, "n": 1}',
            '{"email": "[REDACTED]", "auth": {"api_token": "[REDACTED]"}, "n": 1}',
        ),
        # inside messages too (a tool_call part's arguments)
        (
            {"redact_keys": ("card_number",)},
            "messages",
            '[{"parts": [{"arguments": {"card_number": "4111"}}]}]',
            '[{"parts": [{"arguments": {"card_number": "[REDACTED]"}}]}]',
        ),
        # a value that is not JSON is passed to the hook as text
        (
            {"redactor": lambda kind, v: v.replace("secret", "***")},
            "tool_results",
            "a secret",
            "a ***",
        ),
        # a failing hook records nothing, never the raw value
        ({"redactor": lambda kind, v: 1 / 0}, "tool_arguments", '{"pin": 1234}', None),
    ],
    ids=["default", "switched-off", "key-patterns", "in-messages", "hook-text", "hook-fails"],
)
def test_content_policy(policy: dict[str, Any], kind: str, value: Any, expected: Any) -> None:
    from spanscore.instrumentation import ContentPolicy

    assert ContentPolicy(**policy).record(kind, value) == expected  # type: ignore[arg-type]


def test_content_switches_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from spanscore.instrumentation import ContentPolicy

    monkeypatch.setenv("SPANSCORE_CAPTURE_TOOL_RESULTS", "false")
    monkeypatch.setenv("SPANSCORE_REDACT_KEYS", "email, phone")
    policy = ContentPolicy.from_environment()
    assert (policy.tool_arguments, policy.tool_results, policy.redact_keys) == (
        True,
        False,
        ("email", "phone"),
    )
    # arguments win over the environment
    assert ContentPolicy.from_environment(capture_tool_results=True).tool_results is True


def test_the_shim_applies_the_policy_before_export(
    collector: Collector, lake_dir: Path, sdk_processors: None
) -> None:
    import spanscore.instrumentation as instrumentation

    provider = TracerProvider()
    instrumentation.instrument(
        tracer_provider=provider,
        endpoint=f"http://127.0.0.1:{collector.http_port}",
        redact=["order_id"],
        capture_tool_results=False,
    )
    try:
        with ScriptedLLM(ScriptedPolicy([PLAN])) as llm:
            run_conversation(llm.base_url)
    finally:
        instrumentation.uninstrument()
    rows = query(
        lake_dir,
        "SELECT tool_arguments, tool_result FROM spans WHERE operation = 'execute_tool'",
    )
    assert rows
    for arguments, result in rows:
        assert result is None
        assert "ORD-" not in (arguments or "")
    # Tool-call arguments inside the recorded model messages are redacted too.
    chats = query(
        lake_dir,
        """SELECT attributes->>'$."gen_ai.input.messages"',
                  attributes->>'$."gen_ai.output.messages"'
           FROM spans WHERE operation = 'chat'""",
    )
    arguments = [
        part["arguments"]
        for pair in chats
        for text in pair
        if text
        for message in json.loads(text)
        for part in message["parts"]
        if part["type"] == "tool_call" and part["name"] == "get_order"
    ]
    assert arguments
    assert all(a == {"order_id": "[REDACTED]"} for a in arguments)
