"""Scores back into OpenTelemetry: `gen_ai.evaluation.result` events sent by the SDK's real OTLP
log exporters (HTTP and gRPC) into a second spanscore collector, which stores log records;
their trace parenting, their attribute names against the semantic-conventions package, a
re-send, and an endpoint that is down (a warning, never a failed run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.semconv._incubating.attributes import error_attributes, gen_ai_attributes

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.evaluation import load_suite
from spanscore.evaluation.runs import export_otlp
from spanscore.evaluation.runs.export_otlp import (
    Target,
    evaluation_events,
    export_run,
    resolve_endpoint,
    send_events,
    spans_of,
    target_of,
)
from spanscore.evaluation.trajectory.load import load_trajectory
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

from ..support.conversation_spans import chat_span
from ..support.evaluation_runs import LATER, SUITE, run, write_suite
from ..support.lake import query
from ..support.otlp_http import post
from ..support.ports import free_port

CONVERSATIONS = 4


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A synthetic lake, its suite's file and one run of it (shared: each test adds runs or
    notes of its own, and reads only those)."""
    tmp_path = tmp_path_factory.mktemp("scored")
    lake = tmp_path / "source"
    build_lake(lake, CONVERSATIONS)
    suite_path = write_suite(tmp_path, SUITE)
    result = run(lake, load_suite(suite_path))
    assert result.score_count > 0
    return lake, result.run_id, suite_path


def _received(sink: Path) -> list[dict[str, Any]]:
    rows = query(
        sink,
        "SELECT trace_id, span_id, attributes::VARCHAR, severity_number, time_unix_nano "
        "FROM logs WHERE event_name = 'gen_ai.evaluation.result' ORDER BY time_unix_nano",
    )
    return [
        {"trace_id": t, "span_id": s, "attributes": json.loads(a), "severity": n, "time": ns}
        for t, s, a, n, ns in rows
    ]


def test_attribute_names_are_the_semantic_conventions() -> None:
    assert export_otlp.EVALUATION_NAME == gen_ai_attributes.GEN_AI_EVALUATION_NAME
    assert export_otlp.SCORE_VALUE == gen_ai_attributes.GEN_AI_EVALUATION_SCORE_VALUE
    assert export_otlp.SCORE_LABEL == gen_ai_attributes.GEN_AI_EVALUATION_SCORE_LABEL
    assert export_otlp.EXPLANATION == gen_ai_attributes.GEN_AI_EVALUATION_EXPLANATION
    assert export_otlp.CONVERSATION_ID == gen_ai_attributes.GEN_AI_CONVERSATION_ID
    assert export_otlp.ERROR_TYPE == error_attributes.ERROR_TYPE


def test_events_reach_a_collector_parented_to_the_spans_they_judge(
    scored: tuple[Path, str, Path], make_collector: Any, tmp_path: Path
) -> None:
    lake, run_id, _ = scored
    sink = tmp_path / "sink"
    collector: Collector = make_collector(lake=sink)
    con = connect(lake)
    try:
        expected = {
            (cid, scenario, metric): (value, passed)
            for cid, scenario, metric, value, passed in con.execute(
                "SELECT conversation_id, scenario_id, metric, value, passed FROM scores "
                "WHERE run_id = ?",
                [run_id],
            ).fetchall()
        }
        # The conversation's last GenAI step: its final model call, the one that answered.
        last_span = dict(
            con.execute(
                "SELECT conversation_id, arg_max(span_id, start_time_unix_nano) FROM spans "
                "WHERE operation = 'chat' GROUP BY 1"
            ).fetchall()
        )
        traces = dict(
            con.execute("SELECT DISTINCT conversation_id, trace_id FROM spans").fetchall()
        )
        endpoint = resolve_endpoint(f"http://127.0.0.1:{collector.http_port}/", {})
        outcome = export_run(con, run_id, *endpoint)
        facts = json.loads(
            con.execute("SELECT details FROM eval_runs WHERE run_id = ?", [run_id]).fetchone()[0]
        )
    finally:
        con.close()
    assert (outcome.sent, outcome.failed, outcome.unparented) == (len(expected), 0, 0)
    assert facts["export"]["sent"] == len(expected)
    received = _received(sink)  # acknowledged only once committed: no waiting
    assert len(received) == len(expected)
    names = {
        getattr(gen_ai_attributes, n) for n in dir(gen_ai_attributes) if n.startswith("GEN_AI_")
    }
    for event in received:
        attrs = event["attributes"]
        cid = attrs["gen_ai.conversation.id"]
        key = (cid, attrs.get("spanscore.scenario.id"), attrs["gen_ai.evaluation.name"])
        value, passed = expected.pop(key)
        assert attrs.get("gen_ai.evaluation.score.value") == value
        assert attrs.get("spanscore.evaluation.passed") == passed
        assert attrs["gen_ai.evaluation.score.label"] == ("pass" if passed else "fail")
        assert (event["trace_id"], event["span_id"]) == (traces[cid], last_span[cid])
        assert attrs["spanscore.run.id"] == run_id
        assert attrs["spanscore.suite.name"] == "synthetic"
        assert attrs["spanscore.suite.version"]
        assert event["severity"] == 9  # INFO
        assert all(k in names or k.startswith("spanscore.") for k in attrs), attrs
    assert not expected

    # Sent again, by the command and over gRPC this time: the same records, stored once.
    again = CliRunner().invoke(
        main,
        [
            "export",
            "--lake",
            str(lake),
            run_id[:8],
            "--endpoint",
            f"http://127.0.0.1:{collector.grpc_port}",
            "--format",
            "json",
        ],
        env={"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc"},
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["sent"] == len(received)
    assert len(_received(sink)) == len(received)


def test_an_endpoint_that_is_down_is_a_warning_and_the_run_stands(
    scored: tuple[Path, str, Path], tmp_path: Path
) -> None:
    lake, _, suite_path = scored
    down = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(
        main,
        [
            "evaluate",
            "--lake",
            str(lake),
            "--suite",
            str(suite_path),
            "--settle",
            "0s",
            "--since",
            "2023-01-01",
            "--until",
            LATER.isoformat(),
            "--rescore",
            "--workers",
            "1",
            "--export-otlp",
            down,
        ],
        env={"OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "1", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "1"},
    )
    assert result.exit_code == 0, result.output
    assert "could not be exported" in result.output
    assert "warning (the run's result stands): the run's metrics could not be" in result.output
    assert "spanscore export RUN" in result.output
    con = connect(lake, read_only=True)
    try:
        (details,) = con.execute(
            "SELECT details FROM eval_runs ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
    finally:
        con.close()
    export = json.loads(details)["export"]
    assert export["failed"] == export["events"] > 0
    assert export["sent"] == 0
    again = CliRunner().invoke(
        main,
        ["export", "--lake", str(lake), "latest", "--endpoint", down],
        env={"OTEL_EXPORTER_OTLP_LOGS_TIMEOUT": "1"},
    )
    assert again.exit_code == 1
    assert "could not be exported" in again.output


def test_a_verdict_about_one_call_or_turn_goes_to_its_span(scored: tuple[Path, str, Path]) -> None:
    lake, run_id, _ = scored
    con = connect(lake, read_only=True)
    try:
        cid = con.execute("SELECT min(conversation_id) FROM spans").fetchone()[0]
        trajectory = load_trajectory(con, cid)
        call = con.execute(
            "SELECT trace_id, span_id, tool_call_id FROM spans WHERE conversation_id = ? "
            "AND tool_call_id IS NOT NULL ORDER BY tool_call_id LIMIT 1",
            [cid],
        ).fetchone()
        first_model = con.execute(
            "SELECT trace_id, span_id FROM spans WHERE conversation_id = ? AND operation = 'chat' "
            "ORDER BY start_time_unix_nano LIMIT 1",
            [cid],
        ).fetchone()
        events = evaluation_events(con, run_id)
    finally:
        con.close()
    assert trajectory is not None
    spans = spans_of(trajectory)
    tool = Target(call[0], call[1])
    assert target_of(spans, {"call_id": call[2]}) == tool
    assert target_of(spans, {"calls": [{"index": 0, "call_id": call[2]}]}) == tool
    assert target_of(spans, {"span_id": call[1]}) == tool
    # Two calls named: a verdict about the conversation, parented to its last span.
    two = {"calls": [{"call_id": call[2]}, {"call_id": "other"}]}
    assert target_of(spans, two) == spans.last
    assert spans.last != tool
    assert target_of(spans, {"turn_index": 0}) is not None
    assert target_of(spans, {"turn_index": 0}).trace_id == first_model[0]
    assert target_of(None, {"call_id": call[2]}) is None
    # Each record at its commit time, a nanosecond per score before it: re-sent, the same.
    times = [e.time_unix_nano for e in events]
    assert times == sorted(set(times))


def test_endpoints_and_protocols_read_as_the_exporters_read_them() -> None:
    assert resolve_endpoint("http://c:4318", {}) == ("http://c:4318/v1/logs", "http/protobuf")
    assert resolve_endpoint("http://c:4318/v1/logs", {})[0] == "http://c:4318/v1/logs"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318/"}
    assert resolve_endpoint(None, env)[0] == "https://c:4318/v1/logs"
    env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"] = "https://logs:9/ingest"
    assert resolve_endpoint(None, env)[0] == "https://logs:9/ingest"
    assert resolve_endpoint(None, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == (
        "http://localhost:4317",
        "grpc",
    )
    with pytest.raises(export_otlp.ExportSettingsError, match="http/json"):
        resolve_endpoint(None, {"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json"})
    bad = CliRunner().invoke(
        main, ["export", "--lake", "x", "latest", "--endpoint", "collector:4318"]
    )
    assert bad.exit_code == 2
    assert "not a URL" in bad.output
    assert send_events([], "http://127.0.0.1:1/v1/logs").events == 0


def test_a_conversation_without_a_tool_call_has_its_events_on_its_first_span(
    make_collector: Any, lake_dir: Path, tmp_path: Path
) -> None:
    """An agent traced as its turns (`invoke_agent` spans with their messages), with no tool
    asked for, so no model or tool call step: every event of the conversation goes to its
    first span, in its trace, as every other conversation's do."""
    collector: Collector = make_collector()
    at = int(LATER.timestamp() * 1e9) - 10**12
    trace = bytes.fromhex("ab" * 16)
    turns = []
    for i, (said, answer) in enumerate((("hi", "hello"), ("bye", "goodbye"))):
        turn = chat_span("no-tools", user=said, answer=answer, at=at + i * 10**9, trace_id=trace)
        turn.name = "invoke_agent support"
        turn.attributes[0].value.string_value = "invoke_agent"  # gen_ai.operation.name
        turns.append(turn)
    post(collector, turns[::-1])
    suite = {"name": "plain", "metrics": [{"type": "response", "keywords": ["hello"]}]}
    result = run(lake_dir, load_suite(write_suite(tmp_path, suite)))
    assert result.score_count > 0
    con = connect(lake_dir)
    try:
        events = evaluation_events(con, result.run_id)
    finally:
        con.close()
    assert {e.target for e in events} == {Target(trace.hex(), turns[0].span_id.hex())}
