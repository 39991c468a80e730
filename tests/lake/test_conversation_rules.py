"""One definition of a conversation: the SQL views and the Python builder agree on the cases
where they used to disagree (issue 12), and where a conversation's id came from (issue 11)."""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.collector.conversations import incoming_conversations
from spanscore.evaluation import open_lake
from spanscore.evaluation.trajectory.model import ModelCall
from spanscore.lake.schema.rules import KNOWN_CONVERSATIONS

from ..support import otlp_factory as f
from ..support.agreement import agree_all, builder_and_views_agree
from ..support.conversation_spans import (
    T0,
    as_log_record,
    chat_span,
    server_tool_span,
    tool_span,
)
from ..support.lake import query
from ..support.otlp_http import post, post_logs


def test_a_requested_call_that_never_ran_is_listed_by_both(
    collector: Collector, lake_dir: Path
) -> None:
    # The model asks for x and y; only x runs.
    x = {"id": "c-x", "name": "x", "arguments": {"a": 1}}
    y = {"id": "c-y", "name": "y", "arguments": {"b": 2}}
    post(
        collector,
        [
            chat_span("req-1", user="go", calls=[x, y], at=T0),
            tool_span("req-1", "x", call_id="c-x", arguments={"a": 1}, result="ok", at=T0 + 200),
            chat_span("req-1", user="go", results=[("c-x", "ok")], answer="done", at=T0 + 400),
        ],
    )
    t = builder_and_views_agree(lake_dir, "req-1")
    assert [(c.name, c.source) for c in t.tool_calls] == [
        ("x", "span+messages"),
        ("y", "messages"),
    ]


def test_a_model_call_without_a_user_message_does_not_start_a_turn(
    collector: Collector, lake_dir: Path
) -> None:
    # The middle call is chained (previous_response_id): its input holds no user message.
    a = {"id": "c-1", "name": "a", "arguments": {}}
    b = {"id": "c-2", "name": "b", "arguments": {}}
    post(
        collector,
        [
            chat_span("nouser-1", user="hello", calls=[a], at=T0),
            tool_span("nouser-1", "a", call_id="c-1", result=1, at=T0 + 200),
            chat_span("nouser-1", user=None, results=[("c-1", 1)], calls=[b], at=T0 + 400),
            tool_span("nouser-1", "b", call_id="c-2", result=2, at=T0 + 600),
            chat_span("nouser-1", user="hello", results=[("c-2", 2)], answer="hi", at=T0 + 800),
            chat_span("nouser-1", user="again", answer="yes", at=T0 + 1000),
        ],
    )
    t = builder_and_views_agree(lake_dir, "nouser-1")
    assert [turn.user_message for turn in t.turns] == ["hello", "again"]


def test_a_tool_span_without_call_id_or_arguments_takes_them_from_the_request(
    collector: Collector, lake_dir: Path
) -> None:
    calls = [
        {"id": "c-1", "name": "lookup", "arguments": {"q": "first"}},
        {"id": "c-2", "name": "lookup", "arguments": {"q": "second"}},
    ]
    post(
        collector,
        [
            chat_span("noid-1", user="find", calls=calls, at=T0),
            tool_span("noid-1", "lookup", result="r1", at=T0 + 200),
            tool_span("noid-1", "lookup", result="r2", at=T0 + 300),
            chat_span("noid-1", user="find", answer="found", at=T0 + 500),
        ],
    )
    t = builder_and_views_agree(lake_dir, "noid-1")
    assert [(c.arguments, c.result, c.call_id) for c in t.tool_calls] == [
        ({"q": "first"}, "r1", "c-1"),
        ({"q": "second"}, "r2", "c-2"),
    ]


def test_a_retried_tool_span_joins_a_request_once(collector: Collector, lake_dir: Path) -> None:
    # The tool ran twice under the same call id (a retry). The first run is the requested call;
    # the second joins the next open request of the same name, and with none left it is a call
    # of its own, never a second copy of the first.
    calls = [
        {"id": "c-1", "name": "lookup", "arguments": {"q": "first"}},
        {"id": "c-2", "name": "lookup", "arguments": {"q": "second"}},
    ]
    post(
        collector,
        [
            chat_span("retry-1", user="find", calls=calls, at=T0),
            tool_span("retry-1", "lookup", call_id="c-1", result="timeout", at=T0 + 200),
            tool_span("retry-1", "lookup", call_id="c-1", result="r1", at=T0 + 300),
            tool_span("retry-1", "lookup", call_id="c-1", result="again", at=T0 + 400),
            chat_span("retry-1", user="find", answer="found", at=T0 + 600),
        ],
    )
    t = builder_and_views_agree(lake_dir, "retry-1")
    assert [(c.arguments, c.result, c.call_id, c.source) for c in t.tool_calls] == [
        ({"q": "first"}, "timeout", "c-1", "span+messages"),
        ({"q": "second"}, "r1", "c-2", "span+messages"),
        (None, "again", "c-1", "span"),
    ]


def test_a_call_id_requested_twice_is_one_call(collector: Collector, lake_dir: Path) -> None:
    # The same model response recorded by two spans (the second one repeats the output): the
    # call it requested ran once and is one call; the answer comes in a later model call.
    call = {"id": "c-1", "name": "lookup", "arguments": {"q": "x"}}
    post(
        collector,
        [
            chat_span("twice-1", user="find", calls=[call], at=T0),
            chat_span("twice-1", user="find", calls=[call], at=T0 + 50),
            tool_span("twice-1", "lookup", call_id="c-1", result="r1", at=T0 + 200),
            chat_span("twice-1", user="find", results=[("c-1", "r1")], answer="found", at=T0 + 400),
        ],
    )
    t = builder_and_views_agree(lake_dir, "twice-1")
    assert [(c.name, c.call_id, c.result, c.source) for c in t.tool_calls] == [
        ("lookup", "c-1", "r1", "span+messages")
    ]


def test_a_conversation_id_on_a_root_span_without_an_operation(
    collector: Collector, lake_dir: Path
) -> None:
    # An HTTP server span carries session.id; the GenAI spans below it carry only the trace.
    trace = bytes.fromhex("ab" * 16)
    root = f.span("POST /chat", trace_id=trace, attributes={"session.id": "sess-1"})
    root.kind = trace_pb2.Span.SPAN_KIND_SERVER
    root.start_time_unix_nano = T0
    root.end_time_unix_nano = T0 + 2000
    chat = chat_span(None, user="hi", calls=[{"id": "c", "name": "t", "arguments": {}}], at=T0 + 10)
    chat.trace_id = trace
    chat.parent_span_id = root.span_id
    tool = tool_span(None, "t", call_id="c", result="r", at=T0 + 200, trace_id=trace)
    tool.parent_span_id = root.span_id
    # Children exported before their root.
    post(collector, [chat, tool])
    post(collector, [root])
    t = builder_and_views_agree(lake_dir, "sess-1")
    assert [c.name for c in t.tool_calls] == ["t"]
    assert t.span_count == 3
    # Stored, not recomputed: the children were rewritten when their root was committed.
    assert query(lake_dir, "SELECT conversation_id, count(*) FROM spans GROUP BY ALL") == [
        ("sess-1", 3)
    ]


def _root_with_late_children(trace: bytes, session: str) -> tuple[trace_pb2.Span, ...]:
    root = f.span("POST /chat", trace_id=trace, attributes={"session.id": session})
    root.start_time_unix_nano, root.end_time_unix_nano = T0, T0 + 2000
    chat = chat_span(None, user="hi", answer="hello", at=T0 + 10, trace_id=trace)
    chat.parent_span_id = root.span_id
    return root, chat


def test_a_root_exported_after_a_restart_still_resolves_its_children(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    trace = bytes.fromhex("cd" * 16)
    root, chat = _root_with_late_children(trace, "sess-restart")
    first = make_collector()
    post(first, [chat])
    first.stop(timeout=10)
    assert query(lake_dir, "SELECT conversation_id FROM spans") == [(trace.hex(),)]
    second = make_collector()  # remembers the newest traces of the lake
    post(second, [root])
    assert query(lake_dir, "SELECT DISTINCT conversation_id FROM spans") == [("sess-restart",)]


def test_maintenance_resolves_what_no_collector_saw_together(lake_dir: Path) -> None:
    # Two collectors behind a round-robin balancer: the child went to one, the root to the
    # other, so neither could resolve it. Maintenance does, once, and holds nothing else.
    from spanscore import lake

    trace = "ef" * 16
    con = lake.connect(lake_dir, create=True)
    try:
        rows = [
            (trace, "01" * 8, trace),
            (trace, "02" * 8, "sess-split"),
            ("aa" * 16, "03" * 8, "aa" * 16),
        ]
        for trace_id, span_id, conversation in rows:
            con.execute(
                "INSERT INTO spans (trace_id, span_id, name, conversation_id) "
                "VALUES (?, ?, 'x', ?)",
                [trace_id, span_id, conversation],
            )
        # On a cursor, as the collector's maintenance thread runs it.
        assert lake.maintain(con.cursor())["spans_resolved"] == 1
        assert lake.maintain(con.cursor())["spans_resolved"] == 0
        assert con.execute(
            "SELECT span_id, conversation_id FROM spans ORDER BY span_id"
        ).fetchall() == [("01" * 8, "sess-split"), ("02" * 8, "sess-split"), ("03" * 8, "aa" * 16)]
    finally:
        con.close()


def test_conversations_without_an_id_are_counted_and_warned_about(
    collector: Collector, lake_dir: Path, tmp_path: Path
) -> None:
    # An agent that forgot conversation(): each model call is a trace of its own.
    forgot = [chat_span(None, user=f"q{i}", answer="ok", at=T0 + i * 1000) for i in range(3)]
    post(collector, [*forgot, chat_span("kept-1", user="q", answer="ok", at=T0 + 5000)])
    runner = CliRunner()
    status = runner.invoke(
        main, ["status", "--endpoint", f"http://127.0.0.1:{collector.http_port}"]
    )
    assert status.exit_code == 0, status.output
    assert "spans_without_conversation_id" in status.output
    assert "3 of 4 spans carried no conversation id" in status.output
    sources = runner.invoke(
        main,
        ["sql", "--lake", str(lake_dir), "--format", "csv",
         "SELECT conversation_source, count(*) AS n FROM conversations GROUP BY ALL ORDER BY 1"],
    )  # fmt: skip
    assert sources.output == "conversation_source,n\nattribute,1\ntrace,3\n", sources.output
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "name": "ids",
                "scenarios": [
                    {
                        "id": "answers",
                        "assertions": [{"type": "response", "name": "ok", "keywords": ["ok"]}],
                    }
                ],
            }
        )
    )
    collector.stop(timeout=10)
    done = runner.invoke(
        main, ["evaluate", "--lake", str(lake_dir), "--suite", str(suite), "--settle", "0"]
    )
    assert done.exit_code == 0, done.output
    assert "3 of the 4 conversations in the window carried no conversation id" in done.output
    strict = runner.invoke(
        main,
        ["evaluate", "--lake", str(lake_dir), "--suite", str(suite), "--settle", "0",
         "--strict", "--since", "2020-01-01T00:00:00Z"],
    )  # fmt: skip
    assert strict.exit_code == 1, strict.output


def test_log_records_take_their_conversation_from_the_same_keys_as_spans(
    collector: Collector, lake_dir: Path
) -> None:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.logs.v1 import logs_pb2

    request = logs_service_pb2.ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for i, key in enumerate(("session.id", "traceloop.association.properties.session_id")):
        records.append(
            logs_pb2.LogRecord(
                time_unix_nano=T0 + i,
                event_name="gen_ai.user.message",
                attributes=[f.attr(key, f"by-{key}")],
            )
        )
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    conn.request(
        "POST", "/v1/logs", request.SerializeToString(), {"Content-Type": "application/x-protobuf"}
    )
    assert conn.getresponse().status == 200
    con = open_lake(lake_dir)
    stored = con.execute("SELECT conversation_id FROM logs ORDER BY 1").fetchall()
    assert stored == [
        ("by-session.id",),
        ("by-traceloop.association.properties.session_id",),
    ]


def test_a_tool_span_before_the_first_model_call_is_in_the_first_turn(
    collector: Collector, lake_dir: Path
) -> None:
    # A tool span that starts before any model call (a pre-fetch, or clocks a little apart):
    # the builder used to open a turn of its own for it, which the views never listed.
    call = {"id": "c-1", "name": "lookup", "arguments": {"q": "x"}}
    post(
        collector,
        [
            tool_span("early-1", "lookup", call_id="c-1", result="r", at=T0 - 50),
            chat_span("early-1", user="find", calls=[call], at=T0),
            chat_span("early-1", user="find", results=[("c-1", "r")], answer="found", at=T0 + 500),
        ],
    )
    t = builder_and_views_agree(lake_dir, "early-1")
    assert [turn.user_message for turn in t.turns] == ["find"]
    assert [(c.call_id, c.source) for c in t.tool_calls] == [("c-1", "span+messages")]


def test_a_hand_off_without_model_calls_is_a_turn_of_its_trace(
    collector: Collector, lake_dir: Path
) -> None:
    handoff = f.span(
        "handoff billing",
        attributes={
            "gen_ai.operation.name": "handoff",
            "gen_ai.agent.name": "triage",
            "gen_ai.conversation.id": "handoff-only-1",
        },
    )
    handoff.start_time_unix_nano = T0
    handoff.end_time_unix_nano = T0 + 50
    post(collector, [handoff])
    t = builder_and_views_agree(lake_dir, "handoff-only-1")
    assert [[(s.kind, s.from_agent, s.to_agent) for s in turn.steps] for turn in t.turns] == [
        [("handoff", "triage", "billing")]
    ]


def test_tools_run_concurrently_join_their_requests_by_arguments(
    collector: Collector, lake_dir: Path
) -> None:
    # A framework ran the two requested calls concurrently (CrewAI): the second request's span
    # started first, and neither span carries a call id. By name and order they would cross;
    # their arguments say which is which.
    calls = [
        {"id": "c-1", "name": "get_order", "arguments": {"order_id": "A"}},
        {"id": "c-2", "name": "get_order", "arguments": {"order_id": "B"}},
    ]
    post(
        collector,
        [
            chat_span("concurrent-1", user="where?", calls=calls, at=T0),
            tool_span(
                "concurrent-1", "get_order", arguments={"order_id": "B"}, result="b", at=T0 + 200
            ),
            tool_span(
                "concurrent-1", "get_order", arguments={"order_id": "A"}, result="a", at=T0 + 210
            ),
            chat_span("concurrent-1", user="where?", answer="done", at=T0 + 500),
        ],
    )
    t = builder_and_views_agree(lake_dir, "concurrent-1")
    assert [(c.call_id, c.arguments, c.result) for c in t.tool_calls] == [
        ("c-1", {"order_id": "A"}, "a"),
        ("c-2", {"order_id": "B"}, "b"),
    ]


def _agent(conversation: str, *, user: str, answer: str, at: int, end: int) -> trace_pb2.Span:
    span = f.span(
        "invoke_agent support",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": conversation,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": user}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
        },
    )
    span.start_time_unix_nano = at
    span.end_time_unix_nano = end
    return span


def test_an_agent_span_with_the_messages_gives_the_turn_when_model_calls_have_none(
    collector: Collector, lake_dir: Path
) -> None:
    # Content captured on the agent's spans only: the model calls carry no messages. Each
    # agent span starts its turn and gives it the user message and the answer.
    post(
        collector,
        [
            _agent("agentmsg-1", user="where is A?", answer="A shipped", at=T0, end=T0 + 900),
            chat_span("agentmsg-1", user=None, at=T0 + 10),
            tool_span("agentmsg-1", "get_order", call_id="c-1", result="shipped", at=T0 + 200),
            chat_span("agentmsg-1", user=None, at=T0 + 400),
            _agent("agentmsg-1", user="thanks", answer="welcome", at=T0 + 1000, end=T0 + 1500),
            chat_span("agentmsg-1", user=None, at=T0 + 1010),
        ],
    )
    t = builder_and_views_agree(lake_dir, "agentmsg-1")
    assert [(turn.user_message, turn.final_response) for turn in t.turns] == [
        ("where is A?", "A shipped"),
        ("thanks", "welcome"),
    ]
    assert [[c.call_id for c in turn.tool_calls] for turn in t.turns] == [["c-1"], []]
    assert [sum(isinstance(s, ModelCall) for s in turn.steps) for turn in t.turns] == [2, 1]


def test_an_agent_span_repeating_its_model_calls_changes_no_turn(
    collector: Collector, lake_dir: Path
) -> None:
    # Strands and ai 7 record the messages on the agent span and on each model call: the
    # turns are the same as from the model calls alone, and the model calls' answer wins.
    call = {"id": "c-1", "name": "get_order", "arguments": {"id": "A"}}
    post(
        collector,
        [
            _agent("agentdup-1", user="where?", answer="agent says", at=T0, end=T0 + 900),
            chat_span("agentdup-1", user="where?", calls=[call], at=T0 + 10),
            tool_span("agentdup-1", "get_order", call_id="c-1", result="ok", at=T0 + 200),
            chat_span(
                "agentdup-1", user="where?", results=[("c-1", "ok")], answer="ok", at=T0 + 400
            ),
            _agent("agentdup-1", user="where?", answer="again", at=T0 + 1000, end=T0 + 1500),
            chat_span("agentdup-1", user="where?", answer="again", at=T0 + 1010),
        ],
    )
    t = builder_and_views_agree(lake_dir, "agentdup-1")
    assert [(turn.user_message, turn.final_response) for turn in t.turns] == [
        ("where?", "ok"),
        ("where?", "again"),
    ]


def _inside(call: trace_pb2.Span, at: int) -> tuple[trace_pb2.Span, Any]:
    """A span inside the model call `call`, its messages sent again as a log record of it
    (Google ADK's legacy `generate_content` span inside its `call_llm` span)."""
    inner = trace_pb2.Span()
    inner.CopyFrom(call)
    inner.span_id = bytes(reversed(call.span_id))
    inner.parent_span_id = call.span_id
    inner.name = "generate_content gpt"
    record = as_log_record(inner)
    del inner.attributes[:]
    inner.attributes.append(f.attr("gen_ai.operation.name", "generate_content"))
    inner.start_time_unix_nano, inner.end_time_unix_nano = at, at + 50
    return inner, record


def test_log_records_of_a_span_inside_a_model_call_are_not_a_second_one(
    collector: Collector, lake_dir: Path
) -> None:
    # Google ADK's legacy schema with content capture on: each model call is a span with its
    # messages in its attributes, and the span inside it sends the same messages again as log
    # records. Read as a model call of its own, it split each turn in two, the first user
    # message came back as a third turn, and the call it asked for was listed twice.
    trace = bytes(range(1, 17))
    call = {"id": "c-1", "name": "cancel_order", "arguments": {"id": "A"}}
    calls = [
        chat_span("nested-1", user="cancel A", calls=[call], at=T0, trace_id=trace),
        chat_span("nested-1", user="cancel A", results=[("c-1", "ok")], answer="done", at=T0 + 400),
        chat_span("nested-1", user="thanks", answer="welcome", at=T0 + 1000),
    ]
    calls[1].trace_id = calls[2].trace_id = trace
    for model_call in calls:
        model_call.end_time_unix_nano = model_call.start_time_unix_nano + 150
    inner = [_inside(c, c.start_time_unix_nano + 10) for c in calls]
    tool = tool_span(None, "cancel_order", call_id="c-1", result="ok", at=T0 + 200, trace_id=trace)
    post(collector, [*calls, *(span for span, _ in inner), tool])
    post_logs(collector, [record for _, record in inner])
    assert query(lake_dir, "SELECT count(*) FROM logs WHERE response_text IS NOT NULL") == [(2,)]
    t = builder_and_views_agree(lake_dir, "nested-1")
    assert [(turn.user_message, turn.final_response) for turn in t.turns] == [
        ("cancel A", "done"),
        ("thanks", "welcome"),
    ]
    assert [(c.call_id, c.source) for c in t.tool_calls] == [("c-1", "span+messages")]
    assert [sum(isinstance(s, ModelCall) for s in turn.steps) for turn in t.turns] == [2, 1]
    assert query(lake_dir, "SELECT turn_count, tool_call_count FROM conversations") == [(2, 1)]


def test_model_calls_started_in_the_same_millisecond_keep_their_order(
    collector: Collector, lake_dir: Path
) -> None:
    # The Vercel AI SDK on the OpenTelemetry JS SDK stamps milliseconds: a turn's agent span,
    # its first model call (asking for a tool) and its second (answering) may all start in the
    # same one. The second ends later; taken as the longer, enclosing span, it came first, its
    # answer closed the turn, and the first call started another turn (seen once in CI).
    ms = 1_000_000
    call = {"id": "c-1", "name": "search", "arguments": {"q": "keyboard"}}
    first = chat_span("samems-1", user="any keyboards?", calls=[call], at=T0)
    first.end_time_unix_nano = T0 + 130_000
    second = chat_span(
        "samems-1", user="any keyboards?", results=[("c-1", "$89")], answer="$89", at=T0
    )
    second.end_time_unix_nano = T0 + ms + 100_000
    tool = tool_span("samems-1", "search", call_id="c-1", result="$89", at=T0 + ms)
    post(
        collector,
        [
            _agent("samems-1", user="any keyboards?", answer="$89", at=T0, end=T0 + 2 * ms),
            second,
            first,
            tool,
        ],
    )
    t = builder_and_views_agree(lake_dir, "samems-1")
    assert [(turn.user_message, turn.final_response) for turn in t.turns] == [
        ("any keyboards?", "$89")
    ]
    assert [(c.call_id, c.source) for c in t.tool_calls] == [("c-1", "span+messages")]


def _mcp_send(tool: trace_pb2.Span, name: str) -> trace_pb2.Span:
    """The MCP SDK's own CLIENT span of a request, inside the caller's tool span."""
    send = f.span(
        f"MCP send tools/call {name}",
        trace_id=tool.trace_id,
        attributes={"mcp.method.name": "tools/call"},
    )
    send.kind = trace_pb2.Span.SPAN_KIND_CLIENT
    send.parent_span_id = tool.span_id
    send.start_time_unix_nano = tool.start_time_unix_nano + 5
    send.end_time_unix_nano = tool.end_time_unix_nano - 5
    return send


def test_an_mcp_servers_span_of_a_call_the_caller_records_is_not_a_second_call(
    collector: Collector, lake_dir: Path
) -> None:
    # An MCP server (the MCP SDK's) records each `tools/call` as a SERVER `execute_tool` span,
    # with neither arguments nor result, in the caller's trace (the context goes in `_meta`),
    # under the SDK's own CLIENT span, under the caller's tool span. The caller's span is the
    # call; the same tool called twice is two calls, each with its own server span.
    trace = os.urandom(16)
    calls = [
        {"id": "c-1", "name": "get_order", "arguments": {"order_id": "A"}},
        {"id": "c-2", "name": "get_order", "arguments": {"order_id": "B"}},
    ]
    tools = [
        tool_span(
            "mcp-1",
            "get_order",
            call_id=c["id"],
            arguments=c["arguments"],
            result=result,
            at=at,
            trace_id=trace,
        )
        for c, result, at in [(calls[0], "a", T0 + 200), (calls[1], "b", T0 + 400)]
    ]
    for tool in tools:
        tool.kind = trace_pb2.Span.SPAN_KIND_CLIENT
    sends = [_mcp_send(tool, "get_order") for tool in tools]
    servers = [
        server_tool_span(
            "get_order",
            at=s.start_time_unix_nano + 5,
            end=s.end_time_unix_nano - 5,
            trace_id=trace,
            parent=s.span_id,
        )
        for s in sends
    ]
    post(
        collector,
        [
            chat_span("mcp-1", user="where?", calls=calls, at=T0, trace_id=trace),
            *servers,  # exported first: the server's process ends its spans first
            *sends,
            *tools,
            chat_span("mcp-1", user="where?", answer="done", at=T0 + 600, trace_id=trace),
        ],
    )
    t = builder_and_views_agree(lake_dir, "mcp-1")
    assert [(c.name, c.call_id, c.arguments, c.result, c.source) for c in t.tool_calls] == [
        ("get_order", "c-1", {"order_id": "A"}, "a", "span+messages"),
        ("get_order", "c-2", {"order_id": "B"}, "b", "span+messages"),
    ]
    assert t.span_count == 8  # the server's spans are the conversation's spans still


def test_an_mcp_servers_span_is_the_call_where_nothing_else_records_it(
    collector: Collector, lake_dir: Path
) -> None:
    # The server's span is the only record of its call: where the caller records no tool
    # span (an agent whose MCP client is not instrumented); inside another tool's span (a
    # tool whose code calls an MCP server); inside a span of the same tool in another trace
    # (the context was not propagated: nothing says it is the same call).
    def conversation(
        name: str, requested: str, *, around: str | None, same_trace: bool
    ) -> list[trace_pb2.Span]:
        trace = os.urandom(16)
        call = {"id": "c-1", "name": requested, "arguments": {"q": "x"}}
        spans = [chat_span(name, user="go", calls=[call], at=T0, trace_id=trace)]
        if around is not None:
            spans.append(
                tool_span(
                    name,
                    around,
                    call_id="c-1",
                    arguments={"q": "x"},
                    result="outer",
                    at=T0 + 200,
                    trace_id=trace,
                )
            )
        server = server_tool_span(
            "search", at=T0 + 210, end=T0 + 290, trace_id=trace if same_trace else os.urandom(16)
        )
        if not same_trace:
            server.attributes.append(f.attr("gen_ai.conversation.id", name))
        spans += [server, chat_span(name, user="go", answer="done", at=T0 + 400, trace_id=trace)]
        return spans

    post(
        collector,
        [
            *conversation("mcp-alone", "search", around=None, same_trace=True),
            *conversation("mcp-inside", "research", around="research", same_trace=True),
            *conversation("mcp-elsewhere", "search", around="search", same_trace=False),
        ],
    )
    alone, inside, elsewhere = agree_all(lake_dir, ["mcp-alone", "mcp-inside", "mcp-elsewhere"])
    assert [(c.name, c.call_id, c.arguments, c.result, c.source) for c in alone.tool_calls] == [
        ("search", "c-1", {"q": "x"}, None, "span+messages")  # the request's arguments
    ]
    assert [(c.name, c.result, c.source) for c in inside.tool_calls] == [
        ("research", "outer", "span+messages"),
        ("search", None, "span"),
    ]
    assert [(c.name, c.result, c.source) for c in elsewhere.tool_calls] == [
        ("search", "outer", "span+messages"),
        ("search", None, "span"),
    ]


# The writer applies `schema.KNOWN_CONVERSATIONS` to each export with Arrow, not SQL: both must
# pick the same conversation per trace, and see the same traces lacking one.
_TRACES = st.sampled_from(["t1", "t2", "t3"])
_CONVERSATIONS = st.sampled_from(["a", "b", "Z", "é", "ab", "c-1"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_TRACES, st.one_of(st.none(), _CONVERSATIONS)), min_size=1))
def test_the_writer_knows_each_traces_conversation_as_the_sql_rule_does(
    spans: list[tuple[str, str | None]],
) -> None:
    # None: the span carries no conversation id, and its trace id stands in
    table = pa.table(
        {
            "trace_id": [t for t, _ in spans],
            "conversation_id": [t if c is None else c for t, c in spans],
        }
    )
    con = duckdb.connect()
    try:
        con.register("incoming", table)
        known = dict(con.execute(KNOWN_CONVERSATIONS.format(spans="incoming")).fetchall())
    finally:
        con.close()
    lacking = {t for t, c in spans if c is None}
    expected = sorted((t, known.get(t), t in lacking) for t in {t for t, _ in spans})
    assert sorted(incoming_conversations(table)) == expected


@pytest.mark.parametrize(
    "order",
    [
        "records, child, root",  # the usual: records while the span runs, the root last
        "records, root, child",
        "child, records, root",
        "root, child, records",
        "child, root, records",
    ],
)
def test_log_records_are_stored_with_their_spans_conversation(
    collector: Collector, lake_dir: Path, order: str
) -> None:
    # The views join a record to its span on the conversation too, so that a filter on one
    # reaches the records (schema.RESOLVE_RECORDS): a record stored before its trace's id
    # was known is resolved when it is, in the same commit, as the trace's spans are.
    trace = bytes.fromhex("ce" * 16)
    root, chat = _root_with_late_children(trace, "sess-records")
    record = as_log_record(chat)
    parts = {"records": lambda: post_logs(collector, [record])}
    parts |= {"root": lambda: post(collector, [root]), "child": lambda: post(collector, [chat])}
    for part in order.split(", "):
        parts[part]()
    assert query(lake_dir, "SELECT conversation_id FROM logs") == [("sess-records",)]
    trajectory = builder_and_views_agree(lake_dir, "sess-records")
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [("hi", "hello")]


def test_log_records_stored_before_a_restart_are_resolved_after_it(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    trace = bytes.fromhex("cf" * 16)
    root, chat = _root_with_late_children(trace, "sess-records-restart")
    first = make_collector()
    post_logs(first, [as_log_record(chat)])
    post(first, [chat])
    first.stop(timeout=10)
    assert query(lake_dir, "SELECT conversation_id FROM logs") == [(trace.hex(),)]
    second = make_collector()  # remembers the traces of the newest records stored without one
    post(second, [root])
    assert query(lake_dir, "SELECT conversation_id FROM logs") == [("sess-records-restart",)]
    assert [
        t.user_message for t in builder_and_views_agree(lake_dir, "sess-records-restart").turns
    ] == ["hi"]


def test_maintenance_gives_log_records_their_spans_conversation(lake_dir: Path) -> None:
    # What no collector saw together: a record stored by one collector, its span by another;
    # a record whose span carries another conversation than the rest of its trace, and came
    # later; a record of a span never stored keeps what it was given.
    from spanscore import lake

    con = lake.connect(lake_dir, create=True)
    try:
        spans = [("t1", "a", "sess-1"), ("t1", "b", "sess-2"), ("t2", "c", "t2")]
        records = [("t1", "a", "t1"), ("t1", "b", "sess-1"), ("t2", "c", "t2"), ("t3", "d", "t3")]
        for table, rows in (("spans", spans), ("logs", records)):
            for trace_id, span_id, conversation in rows:
                con.execute(
                    f"INSERT INTO {table} (trace_id, span_id, conversation_id, user_message) "
                    "VALUES (?, ?, ?, 'hi')",
                    [trace_id, span_id, conversation],
                )
        con.execute("BEGIN")
        lake.include_log_records_in_views(con)  # as the collector's writer does
        con.execute("COMMIT")
        # On a cursor, as the collector's maintenance thread runs it.
        assert lake.maintain(con.cursor())["records_resolved"] == 2
        assert lake.maintain(con.cursor())["records_resolved"] == 0
        assert con.execute(
            "SELECT span_id, conversation_id FROM logs ORDER BY span_id"
        ).fetchall() == [("a", "sess-1"), ("b", "sess-2"), ("c", "t2"), ("d", "t3")]
    finally:
        con.close()


def test_views_read_log_records_from_the_first_one_about_a_span(
    collector: Collector, lake_dir: Path
) -> None:
    """While no log record says anything about a span, the views leave log records out (a
    third of a point query's time); the commit that stores the first such record gives the
    lake the views that read them, so that no snapshot has one and views without them."""
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.logs.v1 import logs_pb2

    from spanscore.lake import LakeError, connect, schema
    from spanscore.lake.migrate import has_views, view_marks

    span = chat_span("by-log-record", user=None, at=T0)
    post(collector, [span])
    about = {"trace_id": span.trace_id, "span_id": span.span_id}
    # An application's own log line in the span: it says nothing about the model call.
    plain = logs_pb2.LogRecord(
        time_unix_nano=T0 + 10, body=common_pb2.AnyValue(string_value="looking up"), **about
    )
    post_logs(collector, [plain])
    con = open_lake(lake_dir)
    assert has_views(view_marks(con), schema.VIEWS_WITHOUT_LOG_RECORDS)
    con.close()

    user = logs_pb2.LogRecord(
        time_unix_nano=T0 + 20,
        event_name="gen_ai.user.message",
        body=common_pb2.AnyValue(
            kvlist_value=common_pb2.KeyValueList(values=[f.attr("content", "from a record")])
        ),
        **about,
    )
    post_logs(collector, [user])
    con = open_lake(lake_dir)
    assert has_views(view_marks(con), schema.VIEWS)
    got = con.execute(
        "SELECT first_user_message, turn_count FROM conversations WHERE conversation_id = ?",
        ["by-log-record"],
    ).fetchall()
    assert got == [("from a record", 1)]
    snapshots = [r[0] for r in con.execute("SELECT snapshot_id FROM lake.snapshots()").fetchall()]
    con.close()
    builder_and_views_agree(lake_dir, "by-log-record")
    # Every snapshot whose log records say something about a span has the views reading them.
    with_records = 0
    for snapshot in snapshots:
        try:
            at = connect(lake_dir, snapshot=snapshot)
        except LakeError:  # before the collector made its tables
            continue
        try:
            found = at.execute(
                f"SELECT EXISTS (SELECT 1 FROM logs WHERE {schema.LOG_RECORD_CONTENT})"
            ).fetchone()
            if found and found[0]:
                with_records += 1
                assert has_views(view_marks(at), schema.VIEWS), snapshot
        finally:
            at.close()
    assert with_records > 0, "no snapshot had a log record about a span: nothing was checked"
