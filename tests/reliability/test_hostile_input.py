"""Hostile and unlucky input (issue 16, items 1 and 12): one bad span or record never costs
the others, and every value echoed back or stored is bounded.

Every test runs the real collector on loopback ports over a real lake on disk and talks to it
with real HTTP and gRPC clients.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.collector import Collector

from ..support.lake import query
from ..support.otlp_wire import (
    TRANSPORTS,
    assert_clean_success,
    assert_mentions,
    assert_partial,
    attr,
    export,
    hexes,
    logs_request,
    make_log,
    make_span,
    new_span_id,
    new_trace_id,
    span_ids,
    still_serving,
    trace_request,
)

ALL_TRANSPORTS = (*TRANSPORTS, "http-json")


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def _event(span: Span, name: str, payload: Any) -> Span:
    event = span.events.add(name=name, time_unix_nano=span.start_time_unix_nano)
    event.attributes.append(attr("gen_ai.event.content", json.dumps(payload)))
    return span


# Spans whose convention data is malformed. Each was a whole-request HTTP 500 / gRPC INTERNAL
# (issue 16, item 1); the mappers now read what they can and ignore what is not a message.
TOLERATED_SPANS: dict[str, Callable[[], Span]] = {
    # An OpenInference message index that is a digit to str.isdigit() but not to int().
    "openinference-superscript-index": lambda: make_span(
        "llm",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.input_messages.².message.role": "user",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hello",
        },
    ),
    # A deprecated GenAI event whose tool_calls is a number, not a list.
    "event-tool-calls-int": lambda: _event(
        make_span("chat", attributes={"gen_ai.operation.name": "chat"}),
        "gen_ai.assistant.message",
        {"tool_calls": 7},
    ),
    # A tool call whose function is a string, not an object.
    "event-function-string": lambda: _event(
        make_span("chat", attributes={"gen_ai.operation.name": "chat"}),
        "gen_ai.assistant.message",
        {"tool_calls": [{"id": "call-1", "function": "get_order"}]},
    ),
}


@pytest.mark.parametrize("case", list(TOLERATED_SPANS), ids=list(TOLERATED_SPANS))
def test_malformed_convention_data_does_not_sink_the_batch(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    sent: set[str] = set()
    for transport in ALL_TRANSPORTS:
        spans = [make_span("before"), TOLERATED_SPANS[case](), make_span("after")]
        assert_clean_success(export(collector, transport, trace_request(spans)))
        sent |= hexes(spans)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == sent | serving
    if case == "openinference-superscript-index":
        # What could be read still is: the well-formed message gives the user message.
        rows = query(lake_dir, "SELECT DISTINCT user_message FROM spans WHERE name = 'llm'")
        assert rows == [("hello",)]


def test_a_value_nested_too_deep_rejects_only_its_span(
    collector: Collector, lake_dir: Path
) -> None:
    # Tool arguments nested 300 deep inside a model's output messages: the span cannot be
    # stored as JSON (orjson stops at 254 levels). That span is rejected with the reason; the
    # spans around it are stored (OTLP partial success), over every transport.
    output = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "t", "arguments": _nested(300)}],
        }
    ]
    stored: set[str] = set()
    for transport in ALL_TRANSPORTS:
        deep = make_span(
            "chat deep",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.output.messages": "x"},
        )
        deep.attributes[-1].value.string_value = json.dumps(output)
        good = [make_span("before"), make_span("after")]
        reply = export(collector, transport, trace_request([good[0], deep, good[1]]))
        assert_partial(reply, 1, "span 1", "'chat deep'", "nested too deeply")
        stored |= hexes(good)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == stored | serving
    assert collector.stats.get("spans_unreadable") == len(ALL_TRANSPORTS)


def _linked_log() -> LogRecord:
    return make_log(trace_id=new_trace_id(), span_id=new_span_id())


def _log_with_payload(event_name: str, payload: Any) -> LogRecord:
    record = _linked_log()
    record.event_name = event_name
    record.body.CopyFrom(AnyValue(string_value=json.dumps(payload)))
    return record


BAD_LOG_PAYLOADS = {
    "tool-calls-int": ("gen_ai.assistant.message", {"tool_calls": 7}),
    "function-string": ("gen_ai.assistant.message", {"tool_calls": [{"function": "f"}]}),
    "choice-message-tool-calls-int": ("gen_ai.choice", {"message": {"tool_calls": 7}}),
}


@pytest.mark.parametrize("case", list(BAD_LOG_PAYLOADS), ids=list(BAD_LOG_PAYLOADS))
def test_malformed_log_events_do_not_sink_the_batch(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    event_name, payload = BAD_LOG_PAYLOADS[case]
    sent = 0
    for transport in ALL_TRANSPORTS:
        records = [_linked_log(), _log_with_payload(event_name, payload), _linked_log()]
        # The body as a string holding JSON, and as the attributes of the record.
        as_attrs = _linked_log()
        as_attrs.event_name = event_name
        as_attrs.ClearField("body")
        as_attrs.attributes.extend(
            attr(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in payload.items()
        )
        records.append(as_attrs)
        assert_clean_success(export(collector, transport, logs_request(*records), signal="logs"))
        sent += len(records)
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(sent,)]


def test_a_log_record_that_cannot_be_stored_rejects_only_itself(
    collector: Collector, lake_dir: Path
) -> None:
    for transport in ALL_TRANSPORTS:
        # An operation-details record whose requested tool call has arguments 300 deep.
        deep = make_log()
        deep.event_name = "gen_ai.client.inference.operation.details"
        deep.attributes.append(attr("gen_ai.input.messages", "[]"))
        deep.attributes.append(attr("gen_ai.output.messages", "x"))
        deep.attributes[-1].value.string_value = json.dumps(
            [{"role": "assistant", "parts": [{"type": "tool_call", "arguments": _nested(300)}]}]
        )
        reply = export(
            collector, transport, logs_request(_linked_log(), deep, _linked_log()), signal="logs"
        )
        assert_partial(reply, 1, "log record 1", "nested too deeply")
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(2 * len(ALL_TRANSPORTS),)]


# --- item 12: echoed values, keys, duplicates ---------------------------------------------


def test_echoed_values_are_truncated(collector: Collector, lake_dir: Path) -> None:
    # A rejected span with a 5 MiB name: the partial-success message quotes a prefix and says
    # how long the name was, so the answer stays small (gRPC clients refuse over 4 MiB).
    huge_name = "n" * (5 * 1024 * 1024)
    for transport in TRANSPORTS:
        bad = make_span(huge_name, span_id=b"\x01\x02\x03")
        good = make_span("good")
        reply = export(collector, transport, trace_request([bad, good]))
        assert_partial(reply, 1, "span 0", "span_id must be 8", f"({len(huge_name) + 2} chars)")
        assert len(reply.message.encode()) <= 1024, len(reply.message)
    serving = still_serving(collector)
    assert len(span_ids(lake_dir)) == len(TRANSPORTS) + len(serving)


def test_long_attribute_keys_are_dropped_and_said_so(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(max_attribute_key_length=64)
    long_key = "k" * (1024 * 1024)
    for transport in TRANSPORTS:
        span = make_span("long key", attributes={long_key: "v", "short": "s"})
        span.attributes.append(
            KeyValue(key="nested", value=AnyValue(kvlist_value={"values": [attr(long_key, 1)]}))
        )
        reply = export(collector, transport, trace_request([span]))
        assert_partial(reply, 0, "truncated or redacted")
        assert len(reply.message.encode()) <= 1024
    rows = query(lake_dir, "SELECT attributes, dropped_attributes_count, ingest_notes FROM spans")
    assert len(rows) == len(TRANSPORTS)
    for attributes, dropped, notes in rows:
        assert json.loads(attributes) == {"short": "s", "nested": {}}
        assert dropped == 1  # the top-level attribute; the nested key is noted
        assert_mentions(notes, f"key is {len(long_key)} chars (over the limit of 64)")
        assert len(notes) < 1024


def test_duplicate_span_ids_in_one_request_are_stored_once_and_said_so(
    collector: Collector, lake_dir: Path
) -> None:
    for transport in ALL_TRANSPORTS:
        first = make_span("first")
        again = make_span("again", trace_id=first.trace_id, span_id=first.span_id)
        other = make_span("other")
        reply = export(collector, transport, trace_request([first, again, other]))
        assert_partial(reply, 1, "span 1", "same trace_id and span_id as span 0", "stored once")
    names = query(lake_dir, "SELECT name, count(*) FROM spans GROUP BY name ORDER BY name")
    assert names == [("first", 3), ("other", 3)]
