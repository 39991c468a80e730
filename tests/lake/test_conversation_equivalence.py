"""The views and the builder rebuild the same conversations from any span set (issue 12): the
same turns, tool calls (name, arguments, result, error, call id, parallel group) and counts,
whatever the arrival order, the split into traces and exports, the order concurrent tools
ran in, agent spans with or without the turn's messages, messages sent as log records, an MCP
server's spans of the calls (with or without the caller's), and what the producer left out."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.collector import Collector
from spanscore.evaluation import open_lake
from spanscore.lake.schema.rules import LOG_RECORD_CONTENT

from ..support import otlp_factory as f
from ..support.agreement import agree_all
from ..support.conversation_spans import (
    T0,
    as_log_record,
    chat_span,
    server_tool_span,
    tool_span,
)
from ..support.otlp_http import post, post_logs

_ids = itertools.count(1)


@dataclass
class Case:
    conversation: str
    exports: list[list[trace_pb2.Span]]
    records: list[logs_pb2.LogRecord]
    logs_first: bool


@st.composite
def span_sets(draw: st.DrawFn) -> Case:
    """One conversation's spans, shuffled and split into exports, and the log records that
    carry some model calls' messages instead of their spans."""
    conversation = f"eq-{next(_ids)}-{os.urandom(3).hex()}"
    # Where the conversation id is: on every GenAI span, only on one span of each trace, or
    # only on a root span without a GenAI operation (an HTTP server span's session.id).
    placement = draw(st.sampled_from(["every", "one", "root"]))
    trace_per_turn = placement == "root" or draw(st.booleans())
    spans: list[trace_pb2.Span] = []
    records: list[logs_pb2.LogRecord] = []
    trace = os.urandom(16)
    root: trace_pb2.Span | None = None
    clock = itertools.count(T0, 100)
    calls = itertools.count(1)
    for turn in range(draw(st.integers(1, 3))):
        if trace_per_turn and turn:
            trace = os.urandom(16)
        if placement == "root":
            root = f.span("POST /chat", trace_id=trace, attributes={"session.id": conversation})
            root.kind = trace_pb2.Span.SPAN_KIND_SERVER
            root.start_time_unix_nano = next(clock)
            spans.append(root)
        user = draw(st.sampled_from(["hello", "again", f"question {turn}"]))
        pending_results: list[tuple[str, Any]] = []
        model_calls = draw(st.integers(1, 3))
        # An agent span around the turn, maybe with the turn's messages (some producers
        # capture content only there; others repeat it on every model call too).
        agent_span: trace_pb2.Span | None = None
        if draw(st.integers(0, 2)) == 0:
            agent_attributes: dict[str, object] = {"gen_ai.operation.name": "invoke_agent"}
            if draw(st.booleans()):
                agent_attributes["gen_ai.input.messages"] = json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": user}]}]
                )
                agent_attributes["gen_ai.output.messages"] = json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": f"a{turn}"}]}]
                )
            if placement == "every":
                agent_attributes["gen_ai.conversation.id"] = conversation
            agent_span = f.span("invoke_agent support", trace_id=trace, attributes=agent_attributes)
            agent_span.start_time_unix_nano = next(clock)
            spans.append(agent_span)
        for step in range(model_calls):
            # The first call of a turn has the user message (turn 0 may lack it); later ones
            # may lack it (chained calls, capture off).
            has_user = draw(st.booleans()) if step or not turn else True
            requested: list[dict[str, Any]] = []
            if step < model_calls - 1:
                for _ in range(draw(st.integers(1, 3))):
                    n = next(calls)
                    call: dict[str, Any] = {"name": draw(st.sampled_from(["a", "b"]))}
                    call["arguments"] = {"n": n}
                    if draw(st.integers(0, 4)):  # mostly with a call id
                        call["id"] = f"{conversation}-c{n}"
                    requested.append(call)
            chat = chat_span(
                conversation if placement == "every" else None,
                user=user if has_user else None,
                calls=requested,
                results=pending_results if draw(st.booleans()) else [],
                answer=None if requested else f"answer {turn}.{step}",
                at=next(clock),
                trace_id=trace,
            )
            spans.append(chat)
            if draw(st.integers(0, 3)) == 0:
                # The messages as a log record of the span (producers that send them as events)
                records.append(as_log_record(chat))
            pending_results = []
            # a framework may run the calls of one response concurrently: in any order
            if len(requested) > 1 and draw(st.booleans()):
                requested = list(draw(st.permutations(requested)))
            for call in requested:
                ran = draw(st.sampled_from(["span", "span without id", "bare span", "no span"]))
                result = f"r-{call['arguments']['n']}"
                if call.get("id") and draw(st.booleans()):
                    pending_results.append((call["id"], result))
                if ran == "no span":
                    if draw(st.integers(0, 3)) == 0:  # only the MCP server's side recorded it
                        at = next(clock)
                        spans.append(
                            server_tool_span(call["name"], at=at, end=at + 80, trace_id=trace)
                        )
                    continue
                tool = tool_span(
                    conversation if placement == "every" else None,
                    call["name"],
                    at=next(clock),
                    call_id=call.get("id") if ran == "span" else None,
                    arguments=None if ran == "bare span" else call["arguments"],
                    result=result if draw(st.booleans()) else None,
                    trace_id=trace,
                )
                if draw(st.integers(0, 5)) == 0:
                    tool.status.code = trace_pb2.Status.STATUS_CODE_ERROR
                    tool.status.message = "boom"
                spans.append(tool)
                if draw(st.integers(0, 3)) == 0:  # the MCP server's side of the call, within
                    spans.append(
                        server_tool_span(
                            call["name"],
                            at=tool.start_time_unix_nano + 10,
                            end=tool.end_time_unix_nano - 10,
                            trace_id=trace,
                            parent=tool.span_id,
                        )
                    )
            if draw(st.integers(0, 5)) == 0:  # a tool span no model call asked for
                spans.append(
                    tool_span(
                        conversation if placement == "every" else None,
                        "c",
                        at=next(clock),
                        arguments={"x": 1},
                        result="extra",
                        trace_id=trace,
                    )
                )
            if draw(st.integers(0, 5)) == 0:  # an agent hand-off
                attributes: dict[str, object] = {
                    "gen_ai.operation.name": "handoff",
                    "gen_ai.agent.name": "triage",
                }
                if placement == "every":
                    attributes["gen_ai.conversation.id"] = conversation
                handoff = f.span("handoff billing", trace_id=trace, attributes=attributes)
                handoff.start_time_unix_nano = next(clock)
                handoff.end_time_unix_nano = handoff.start_time_unix_nano + 50
                spans.append(handoff)
        if agent_span is not None:
            agent_span.end_time_unix_nano = next(clock)
        if root is not None:
            root.end_time_unix_nano = next(clock)
    for span in spans:
        if span.end_time_unix_nano < span.start_time_unix_nano:
            span.end_time_unix_nano = span.start_time_unix_nano + 50
        if placement == "root" and span.name != "POST /chat":
            span.parent_span_id = next(
                r.span_id for r in spans if r.name == "POST /chat" and r.trace_id == span.trace_id
            )
    if placement == "one":
        # Only one span of each trace carries the id: the others learn it from their trace.
        # (in order of appearance: a set of random ids would draw in another order on replay)
        for trace_id in dict.fromkeys(s.trace_id for s in spans):
            carrier = draw(st.sampled_from([s for s in spans if s.trace_id == trace_id]))
            carrier.attributes.append(f.attr("gen_ai.conversation.id", conversation))
    order = draw(st.permutations(spans))  # any arrival order: children before roots too
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(order) - 1)), max_size=2)))
    exports = [list(order[a:b]) for a, b in itertools.pairwise([0, *cuts, len(order)]) if a < b]
    return Case(conversation, exports, records, logs_first=draw(st.booleans()))


@pytest.mark.slow
def test_views_and_builder_rebuild_the_same_conversations(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector()

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(span_sets(), min_size=1, max_size=6))
    def check(cases: list[Case]) -> None:
        # Log records before their spans, or after; the conversations of one example arrive
        # interleaved, export by export.
        before = [r for c in cases if c.logs_first for r in c.records]
        after = [r for c in cases if not c.logs_first for r in c.records]
        if before:
            post_logs(collector, before)
        for exports in itertools.zip_longest(*(c.exports for c in cases)):
            for export in exports:
                if export:
                    post(collector, export)
        if after:
            post_logs(collector, after)
        agree_all(lake_dir, [c.conversation for c in cases])

    check()
    con = open_lake(lake_dir)
    try:
        found = con.execute(f"SELECT count(*) FROM logs WHERE {LOG_RECORD_CONTENT}").fetchone()
    finally:
        con.close()
    assert found is not None
    assert found[0] > 0, "no log record carried messages: none of them was checked"
