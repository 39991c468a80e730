"""A retried export is stored once, logs as spans (issue 16, item 9).

An exporter that loses the answer (a timeout, a collector killed between commit and answer)
sends the same export again. Spans were deduplicated by (trace_id, span_id); log records were
stored twice, so for producers that send their messages only as log events, `spanscore show`
printed `cancel_order, cancel_order` and the scores judged a call that never happened. A log
record's identity is its trace, span, times, event name and body.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.cli import main
from spanscore.collector import Collector

from ..support.lake import query
from ..support.otlp_wire import (
    TRANSPORTS,
    assert_clean_success,
    assert_partial,
    export,
    logs_request,
    make_log,
    make_span,
    new_span_id,
    new_trace_id,
    trace_request,
)

ALL_TRANSPORTS = (*TRANSPORTS, "http-json")
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "cancel_order", "arguments": '{"order_id": "ORD-7"}'},
}


def _record(span: Span, event: str, body: dict[str, Any]) -> LogRecord:
    record = LogRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        time_unix_nano=span.start_time_unix_nano + 1,
        observed_time_unix_nano=span.start_time_unix_nano + 2,
        event_name=event,
    )
    for key, value in body.items():
        kv = record.body.kvlist_value.values.add(key=key)
        kv.value.string_value = value if isinstance(value, str) else json.dumps(value)
    return record


def _conversation(conversation: str) -> tuple[list[Span], list[LogRecord]]:
    """A model call whose messages travel only as log events: it asks for cancel_order."""
    chat = make_span(
        "chat gpt",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.conversation.id": conversation},
    )
    records = [
        _record(chat, "gen_ai.user.message", {"content": "Cancel ORD-7"}),
        _record(chat, "gen_ai.choice", {"message": {"tool_calls": [CALL]}}),
    ]
    return [chat], records


@pytest.mark.parametrize("transport", ALL_TRANSPORTS)
def test_a_retried_logs_export_is_stored_once(
    collector: Collector, lake_dir: Path, transport: str
) -> None:
    spans, records = _conversation("conv-retry")
    assert_clean_success(export(collector, transport, trace_request(spans)))
    request = logs_request(*records)
    for _ in range(3):  # the first answer was lost; the exporter retried twice
        assert_clean_success(export(collector, transport, request, signal="logs"))
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(2,)]
    assert collector.stats.get("logs_duplicate") == 4
    calls = query(lake_dir, "SELECT tool_name FROM tool_calls WHERE conversation_id = 'conv-retry'")
    assert calls == [("cancel_order",)]
    shown = CliRunner().invoke(main, ["show", "conv-retry", "--lake", str(lake_dir)])
    assert shown.exit_code == 0, shown.output
    assert "→ cancel_order\n" in shown.output, shown.output  # was: → cancel_order, cancel_order
    assert shown.output.count("tool cancel_order") == 1, shown.output


def test_a_retry_after_a_restart_is_stored_once(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    # The collector died after committing but before answering: the new one remembers the
    # newest committed records (read back from the lake at start-up).
    first = make_collector()
    _, records = _conversation("conv-restart")
    request = logs_request(*records)
    assert_clean_success(export(first, "grpc", request, signal="logs"))
    first.stop()
    second = make_collector()
    assert_clean_success(export(second, "grpc", request, signal="logs"))
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(2,)]
    assert second.stats.get("logs_duplicate") == 2


def test_records_without_a_time_have_no_identity_and_are_all_kept(
    collector: Collector, lake_dir: Path
) -> None:
    # Two "retrying" lines with no time at all may be two events: never merged.
    untimed = make_log()
    untimed.ClearField("time_unix_nano")
    assert untimed.time_unix_nano == untimed.observed_time_unix_nano == 0
    request = logs_request(untimed, untimed)
    for _ in range(2):
        assert_clean_success(export(collector, "http", request, signal="logs"))
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(4,)]


def test_the_same_record_twice_in_one_request_is_stored_once_and_said_so(
    collector: Collector, lake_dir: Path
) -> None:
    record = make_log(trace_id=new_trace_id(), span_id=new_span_id())
    other = make_log(trace_id=record.trace_id, span_id=record.span_id)
    other.body.string_value = "a different body"
    for transport in ALL_TRANSPORTS:
        reply = export(collector, transport, logs_request(record, other, record), signal="logs")
        assert_partial(reply, 1, "log record 2", "as log record 0", "stored once")
    assert query(lake_dir, "SELECT count(*) FROM logs") == [(2,)]  # across requests too
