"""Structure-aware fuzzing of the decoders and the convention mappers (issue 16).

Requests are drawn as OTLP messages whose framing is valid but whose content is hostile (see
`otlp_strategies`), then sent as protobuf, as OTLP/JSON and as mutated bytes. The contract:

- a request is refused whole only with `BadRequest` (a clear 400), never another exception;
- otherwise every item is either stored or rejected with a reason (nothing vanishes), and
  the partial-success message stays small;
- the mappers read any attribute values without raising.

The last property runs through a real collector over HTTP: no input gets a 500.
Longer runs: `tests/reliability/fuzz_atheris.py`. Every crash found is a case in
`REGRESSIONS` below.
"""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanscore.collector import Collector, load_config
from spanscore.collector.conventions import Extractor, log_record_messages
from spanscore.collector.pool import flatten_request

from ..support.decoder_contract import FLATTENER, check_contract, items_in
from ..support.otlp_strategies import (
    JSON_TEXT,
    JSON_VALUES,
    json_junk,
    keys,
    logs_requests,
    mutated,
    otlp_json,
    trace_requests,
)

FUZZ = settings(
    max_examples=150,
    deadline=None,  # a loaded machine is slow, not wrong
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SIGNALS = {"spans": trace_requests(), "logs": logs_requests()}


@pytest.mark.parametrize("signal", list(SIGNALS))
@FUZZ
@given(data=st.data())
def test_valid_framing_hostile_content(signal: str, data: st.DataObject) -> None:
    request = data.draw(SIGNALS[signal])
    sent = items_in(request, signal)
    check_contract(signal, request.SerializeToString(), as_json=False, sent=sent)
    check_contract(signal, json.dumps(otlp_json(request)).encode(), as_json=True, sent=sent)


@pytest.mark.parametrize("signal", list(SIGNALS))
@FUZZ
@given(data=st.data())
def test_mutated_protobuf_is_refused_or_read(signal: str, data: st.DataObject) -> None:
    body = data.draw(SIGNALS[signal]).SerializeToString()
    check_contract(signal, data.draw(mutated(body)), as_json=False)


SHAPE_KEYS = {
    "spans": ("resourceSpans", "scopeSpans", "spans"),
    "logs": ("resourceLogs", "scopeLogs", "logRecords"),
}


@pytest.mark.parametrize("signal", list(SIGNALS))
@FUZZ
@given(data=st.data())
def test_json_of_any_shape_is_refused_or_read(signal: str, data: st.DataObject) -> None:
    document = data.draw(json_junk(SHAPE_KEYS[signal]))
    check_contract(signal, json.dumps(document).encode(), as_json=True)


ATTRIBUTE_VALUES = JSON_VALUES | JSON_TEXT


MAPPER_INPUTS = {
    "attrs": st.dictionaries(keys(), ATTRIBUTE_VALUES, max_size=10),
    "events": st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(
                    ["gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message"]
                )
                | st.text(max_size=5),
                "attributes": st.dictionaries(keys(), ATTRIBUTE_VALUES, max_size=4),
            }
        ),
        max_size=3,
    ),
    "name": st.sampled_from(["chat m", "execute_tool t", "invoke_agent a", ""]),
    "body": st.none() | ATTRIBUTE_VALUES,
    "event_name": st.none() | st.sampled_from(["gen_ai.choice", "gen_ai.assistant.message"]),
}


def check_mappers(
    attrs: dict[str, Any],
    events: list[dict[str, Any]],
    name: str,
    body: Any,
    event_name: str | None,
) -> None:
    out = Extractor("custom.conversation").extract(attrs, name, True, None, "t" * 32, events)
    assert isinstance(out[0], str)  # a conversation id, always
    log_record_messages(event_name, attrs, body)


@FUZZ
@given(**MAPPER_INPUTS)
def test_the_mappers_read_any_values(
    attrs: dict[str, Any],
    events: list[dict[str, Any]],
    name: str,
    body: Any,
    event_name: str | None,
) -> None:
    check_mappers(attrs, events, name, body, event_name)


# Crashes found by fuzzing (or by hand, as the issue reported them), kept as regressions.
REGRESSIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # int("²") after "²".isdigit(): the whole export failed with HTTP 500.
    "openinference-superscript-index": (
        "spans",
        {"openinference.span.kind": "LLM", "llm.input_messages.².message.role": "user"},
    ),
    # OpenLLMetry's indexed prompts, same trap.
    "traceloop-superscript-index": (
        "spans",
        {"traceloop.span.kind": "task", "gen_ai.prompt.³.role": "user"},
    ),
    # A deprecated GenAI event payload whose tool_calls is a number.
    "choice-tool-calls-int": ("logs", {"message": '{"tool_calls": 7}'}),
    # ... whose function is a string.
    "assistant-function-string": ("logs", {"tool_calls": '[{"function": "f"}]'}),
}


@pytest.mark.parametrize("case", list(REGRESSIONS), ids=list(REGRESSIONS))
def test_regressions(case: str) -> None:
    signal, attrs = REGRESSIONS[case]
    if signal == "spans":
        Extractor().extract(attrs, "chat", False, None, "t" * 32, [])
    else:
        log_record_messages("gen_ai.choice", attrs, None)
        log_record_messages("gen_ai.assistant.message", attrs, None)


def test_regression_an_exception_type_that_is_not_text() -> None:
    """Found by fuzzing in CI: a failed span whose exception event's `exception.type` is an int
    failed the whole batch (Arrow: expected bytes, got int); it is stored as text."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "execute_tool f"
    span.status.code = 2  # ERROR
    event = span.events.add()
    event.name = "exception"
    attribute = event.attributes.add()
    attribute.key, attribute.value.int_value = "exception.type", 0
    flat = flatten_request(FLATTENER, "spans", request.SerializeToString(), False)
    assert (flat.rows, flat.rejected) == (1, 0)
    check_contract("spans", request.SerializeToString(), False, sent=1)


# --- through the real collector ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """One collector for every example (a collector per example would take minutes)."""
    lake = tmp_path_factory.mktemp("fuzz") / "lake"
    overrides = {
        "lake": str(lake),
        "grpc_port": 0,
        "http_port": 0,
        "workers": 0,
        "maintenance_interval_s": 0,
        "max_attributes": 6,
        "max_attribute_length": 64,
    }
    collector = Collector(load_config(overrides=overrides, environ={})).start()
    yield collector
    collector.stop(timeout=30)


def _post(collector: Collector, path: str, body: bytes, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=120)
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@settings(FUZZ, max_examples=40)
@given(
    request=trace_requests() | logs_requests(),
    encoding=st.sampled_from(["protobuf", "json", "gzip", "mutated"]),
    data=st.data(),
)
def test_no_input_gets_a_500(
    shared_collector: Collector, request: Any, encoding: str, data: st.DataObject
) -> None:
    path = "/v1/traces" if request.DESCRIPTOR.name == "ExportTraceServiceRequest" else "/v1/logs"
    headers = {"Content-Type": "application/x-protobuf"}
    body = request.SerializeToString()
    if encoding == "json":
        body, headers["Content-Type"] = json.dumps(otlp_json(request)).encode(), "application/json"
    elif encoding == "gzip":
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    elif encoding == "mutated":
        body = data.draw(mutated(body))
    status = _post(shared_collector, path, body, headers)
    assert status in (200, 400), status
    assert shared_collector.stats.get("refused_internal") == 0
