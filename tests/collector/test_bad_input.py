"""Bad input over OTLP/HTTP and OTLP/gRPC: refused with the right code and a clear message,
partially accepted where the framing is sound (OTLP partial success), and never a reason for
the collector to stop serving. Every test runs a real collector over a real lake on disk.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.collector import Collector

from ..support.lake import query
from ..support.otlp_wire import (
    JSON,
    PROTOBUF,
    TRANSPORTS,
    assert_clean_success,
    assert_mentions,
    assert_partial,
    assert_refused,
    export,
    grpc_export,
    hexes,
    http_request,
    logs_request,
    make_log,
    make_span,
    new_span_id,
    new_trace_id,
    post,
    post_raw,
    span_ids,
    still_serving,
    trace_request,
)

TOKEN = "s3cret"


# --- whole-request refusals: the framing is broken -------------------------------------------


def _valid_body() -> bytes:
    spans = [make_span("a"), make_span("b", attributes={"k": "v" * 50})]
    return trace_request(spans).SerializeToString()


MALFORMED: dict[str, tuple[Callable[[], bytes], str]] = {
    # Not protobuf at all: "t" is a tag with the END_GROUP wire type and no group open.
    "garbage": (lambda: b"this is not protobuf \x00\xff\xfe\x01", "malformed protobuf"),
    # The high bit set on every byte: a varint that never ends.
    "endless-varint": (lambda: b"\xff" * 32, "malformed protobuf"),
    # A valid request cut in the middle: the outer length prefix runs past the end.
    "truncated-half": (lambda: (b := _valid_body())[: len(b) // 2], "truncated protobuf"),
    # Cut right after the first tag byte: the length varint itself is missing.
    "truncated-after-tag": (lambda: _valid_body()[:1], "truncated protobuf"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_broken_protobuf_is_refused_whole(collector: Collector, lake_dir: Path, case: str) -> None:
    make_body, fragment = MALFORMED[case]
    body = make_body()
    for transport in TRANSPORTS:
        assert_refused(export(collector, transport, body), "invalid", fragment)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


HTTP_FRAMING = {
    # An exporter set to the wrong protocol: 415 names the two accepted types.
    "text-plain": ({"Content-Type": "text/plain"}, 415, ("text/plain", PROTOBUF, JSON)),
    # No Content-Type at all.
    "no-content-type": ({}, 415, ("(none)", PROTOBUF)),
    # A compression the collector cannot undo.
    "brotli": ({"Content-Type": PROTOBUF, "Content-Encoding": "br"}, 415, ("encoding", "br")),
    # Says gzip, is not gzip.
    "fake-gzip": ({"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}, 400, ("not valid gzip",)),
    # Real gzip, cut short: the inflater never reaches the end of the stream.
    "truncated-gzip": (
        {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"},
        400,
        ("gzip body is truncated",),
    ),
}


@pytest.mark.parametrize("case", list(HTTP_FRAMING), ids=list(HTTP_FRAMING))
def test_http_content_type_and_encoding_are_checked(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    headers, status, fragments = HTTP_FRAMING[case]
    body = _valid_body()
    if case == "truncated-gzip":
        body = gzip.compress(body)[:-12]
    reply = post(collector, body, content_type=None, headers=headers)
    assert reply.status == status, reply
    assert reply.rpc_code == code_pb2.INVALID_ARGUMENT
    assert_mentions(reply.message, *fragments)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


# --- size limits -----------------------------------------------------------------------------

LIMIT = 4096


def _big_body(size: int = 2 * LIMIT) -> bytes:
    body = trace_request([make_span("big", attributes={"blob": "x" * size})]).SerializeToString()
    assert len(body) > LIMIT
    return body


def _chunked(body: bytes, size: int = 1024) -> bytes:
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
    )
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    )
    return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


OVERSIZED = [
    # Content-Length over the limit: refused before the body is read.
    pytest.param("http", 2 * LIMIT, "over the limit of 4096 bytes", id="http-content-length"),
    # No Content-Length (chunked): refused once the chunks add up past the limit.
    pytest.param("http-chunked", 2 * LIMIT, "over the limit of 4096 bytes", id="http-chunked"),
    # A small gzip body that inflates far past the limit (a zip bomb): refused while inflating.
    pytest.param(
        "http-gzip-bomb", 0, "decompressed body is over the limit of 4096 bytes", id="gzip-bomb"
    ),
    # gRPC: grpc's own max_receive_message_length, which the collector sets to the limit.
    pytest.param("grpc", 2 * LIMIT, "larger than max", id="grpc"),
    # gRPC with gzip: the limit applies to the inflated message, so a zip bomb is refused too.
    pytest.param("grpc-gzip-bomb", 0, "larger than max", id="grpc-gzip-bomb"),
    # An exporter's real oversized batch is megabytes: it writes the whole body, then reads the
    # answer. The 413 must reach it (RFC 9112 9.6: close in stages, draining the unread body),
    # or the exporter sees a broken connection, a retryable network error, and sends it again.
    pytest.param(
        "http",
        24 * 1024 * 1024,
        "over the limit of 4096 bytes",
        id="http-content-length-megabytes",
    ),
]


@pytest.mark.parametrize(("how", "size", "fragment"), OVERSIZED)
def test_oversized_request_is_refused(
    make_collector: Callable[..., Collector], lake_dir: Path, how: str, size: int, fragment: str
) -> None:
    collector = make_collector(max_request_bytes=LIMIT)
    if how == "grpc":
        reply = export(collector, "grpc", _big_body(size))
        assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED, reply
    elif how == "grpc-gzip-bomb":
        reply = grpc_export(collector, b"\x00" * (1024 * 1024), compression=grpc.Compression.Gzip)
        assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED, reply
    else:
        if how == "http-chunked":
            reply = post_raw(collector, _chunked(_big_body(size)))
        elif how == "http-gzip-bomb":
            bomb = gzip.compress(b"\x00" * (1024 * 1024))  # 1 KiB that inflates to 1 MiB
            assert len(bomb) < LIMIT
            reply = post(collector, bomb, headers={"Content-Encoding": "gzip"})
        else:
            reply = post(collector, _big_body(size))
        assert reply.status == 413, reply
        assert reply.rpc_code == code_pb2.INVALID_ARGUMENT
    assert_mentions(reply.message, fragment)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


# --- partial success: sound framing, some spans unreadable or invalid -------------------------

PLACEHOLDER = "@@PLACEHOLDER@@"
BAD_UTF8 = b"\xff\xfe\xc3\x28" + b"-" * (len(PLACEHOLDER) - 4)  # same length: framing intact

UTF8_SPOTS: dict[str, Callable[[], Span]] = {
    # A string attribute value: the usual way a producer leaks raw bytes.
    "attribute-value": lambda: make_span("bad", attributes={"k": PLACEHOLDER}),
    # The span name itself.
    "span-name": lambda: make_span(PLACEHOLDER),
}


@pytest.mark.parametrize("spot", list(UTF8_SPOTS), ids=list(UTF8_SPOTS))
def test_invalid_utf8_rejects_only_that_span(
    collector: Collector, lake_dir: Path, spot: str
) -> None:
    stored: set[str] = set()
    for transport in TRANSPORTS:
        good = [make_span("good 0"), make_span("good 2")]
        # The bad span opens the second resource group: its index (1) counts across groups.
        request = trace_request([good[0]], [UTF8_SPOTS[spot](), good[1]]).SerializeToString()
        assert request.count(PLACEHOLDER.encode()) == 1
        reply = export(collector, transport, request.replace(PLACEHOLDER.encode(), BAD_UTF8))
        assert_partial(reply, 1, "span 1", "UTF-8")
        stored |= hexes(good)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == stored | serving


BAD_IDS = {
    # Each guards the lake's invariant: ids are 32/16 lowercase hex digits, never all zero.
    "trace-id-5-bytes": ({"trace_id": b"\x05" * 5}, ("trace_id", "16", "got 5 bytes")),
    "span-id-3-bytes": ({"span_id": b"\x03" * 3}, ("span_id", "8", "got 3 bytes")),
    "trace-id-all-zero": ({"trace_id": bytes(16)}, ("trace_id", "non-zero")),
    "parent-span-id-4-bytes": ({"parent_span_id": b"\x04" * 4}, ("parent_span_id", "got 4")),
}


@pytest.mark.parametrize("case", list(BAD_IDS), ids=list(BAD_IDS))
def test_ids_of_the_wrong_length_reject_only_that_span(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    bad_fields, fragments = BAD_IDS[case]
    stored: set[str] = set()
    for transport in TRANSPORTS:
        good = [make_span("good 0"), make_span("good 2")]
        bad = make_span("bad")
        for name, value in bad_fields.items():
            setattr(bad, name, value)
        reply = export(collector, transport, trace_request([good[0], bad, good[1]]))
        assert_partial(reply, 1, "span 1 ('bad')", *fragments)
        stored |= hexes(good)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == stored | serving


@pytest.mark.parametrize("encoding", ["protobuf", "json"], ids=["protobuf", "json"])
def test_each_problem_names_the_span_by_its_position(
    collector: Collector, lake_dir: Path, encoding: str
) -> None:
    # Two kinds of bad span in one request (one the decoder rejects, one the flattener
    # rejects): both are counted, the good ones stored, and each reason points at its span.
    good = [new_span_id(), new_span_id()]
    if encoding == "protobuf":
        unreadable = make_span("unreadable", attributes={"k": PLACEHOLDER})
        bad_id = make_span("bad id", span_id=b"\x03" * 3)
        spans = [make_span("good 0", span_id=good[0]), unreadable]
        spans += [make_span("good 2", span_id=good[1]), bad_id]
        body = trace_request(spans).SerializeToString()
        reply = export(collector, "http", body.replace(PLACEHOLDER.encode(), BAD_UTF8))
    else:
        doc = json_request(
            json_span(spanId=good[0].hex()),
            json_span(spanId=new_span_id().hex(), traceId="zz" * 16),
            json_span(spanId=good[1].hex()),
            json_span(spanId=new_span_id().hex(), traceId="abcd", name="bad id"),
        )
        reply = post(collector, json.dumps(doc).encode(), content_type=JSON)
    assert reply.ok, reply
    assert reply.rejected == 2, reply
    assert span_ids(lake_dir) == {g.hex() for g in good}
    assert_mentions(reply.message, "span 1", "span 3 ('bad id')")
    assert "span 2" not in reply.message, reply.message  # span 2 was fine


OUT_OF_RANGE = {
    # uint32 in OTLP, INTEGER (int32) in the lake.
    "dropped-attributes-count-uint32-max": ("dropped_attributes_count", 2**32 - 1),
    # fixed64 in OTLP, BIGINT (int64) in the lake.
    "start-time-past-int64": ("start_time_unix_nano", 2**64 - 1),
}


@pytest.mark.parametrize("case", list(OUT_OF_RANGE), ids=list(OUT_OF_RANGE))
def test_out_of_range_number_does_not_sink_the_batch(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    # A value that is valid protobuf but does not fit the lake's column must cost at most its
    # own span (rejected with a reason, or stored clamped with a note), never the export.
    name, value = OUT_OF_RANGE[case]
    stored: set[str] = set()
    for transport in TRANSPORTS:
        good = [make_span("good 0"), make_span("good 2")]
        bad = make_span("out of range")
        setattr(bad, name, value)
        reply = export(collector, transport, trace_request([good[0], bad, good[1]]))
        assert reply.ok, reply
        if reply.rejected:
            assert_partial(reply, 1, "span 1", name)
        else:
            stored.add(bad.span_id.hex())
        stored |= hexes(good)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == stored | serving


# --- limits: stored, truncated, and said so --------------------------------------------------


def test_limits_truncate_and_say_so(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    # 10,000 attributes keep the first 512 (max_attributes); a value over max_attribute_length
    # keeps its first 64 characters; both are noted in ingest_notes and the response warns.
    collector = make_collector(max_attribute_length=64)
    sent: dict[str, str] = {}
    for transport in TRANSPORTS:
        many = make_span("many", attributes={f"k{i}": i for i in range(10_000)})
        many.dropped_attributes_count = 3  # the producer's own drops add to the collector's
        long = make_span("long", attributes={"prompt": "p" * 1000, "short": "s"})
        plain = make_span("plain", attributes={"k": "v"})
        reply = export(collector, transport, trace_request([many, long, plain]))
        assert_partial(reply, 0, "truncated", "ingest_notes")
        sent |= {s.span_id.hex(): s.name for s in (many, long, plain)}
    serving = still_serving(collector)
    rows = query(
        lake_dir,
        "SELECT span_id, attributes, dropped_attributes_count, ingest_notes FROM spans",
    )
    assert {r[0] for r in rows} == set(sent) | serving
    for span_id, attributes, dropped, notes in rows:
        name = sent.get(span_id)
        if name == "many":
            assert json.loads(attributes) == {f"k{i}": i for i in range(512)}
            assert dropped == 3 + 10_000 - 512
            assert_mentions(notes, "dropped 9488 attributes over the limit of 512")
        elif name == "long":
            assert json.loads(attributes) == {"prompt": "p" * 64, "short": "s"}
            assert dropped == 0
            assert_mentions(notes, "truncated a value of 1000 chars to 64")
        else:
            assert (dropped, notes) == (0, None)


# --- authentication --------------------------------------------------------------------------

WRONG_AUTH = {
    "missing": None,  # no Authorization header / metadata at all
    "wrong-token": "Bearer nope",
    "no-scheme": TOKEN,  # the right token without "Bearer "
}


@pytest.mark.parametrize("case", list(WRONG_AUTH), ids=list(WRONG_AUTH))
def test_missing_or_wrong_token_is_refused(
    make_collector: Callable[..., Collector], lake_dir: Path, case: str
) -> None:
    collector = make_collector(token=TOKEN)
    authorization = WRONG_AUTH[case]
    body = _valid_body()
    headers = {"Authorization": authorization} if authorization is not None else {}
    reply = post(collector, body, headers=headers)
    assert_refused(reply, "unauthenticated", "bearer token")
    assert reply.headers.get("www-authenticate", "").startswith("Bearer")
    reply = grpc_export(collector, body, authorization=authorization)
    assert_refused(reply, "unauthenticated", "bearer token")
    serving = still_serving(collector, token=TOKEN)
    assert span_ids(lake_dir) == serving


@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {TOKEN}", f"bearer {TOKEN}"],
    ids=["canonical", "lower-case-scheme"],
)
def test_right_token_is_accepted(
    make_collector: Callable[..., Collector], lake_dir: Path, authorization: str
) -> None:
    # The auth scheme is case-insensitive (RFC 9110 11.1).
    collector = make_collector(token=TOKEN)
    spans = [make_span("over http"), make_span("over grpc")]
    body = trace_request([spans[0]]).SerializeToString()
    assert_clean_success(post(collector, body, headers={"Authorization": authorization}))
    body = trace_request([spans[1]]).SerializeToString()
    assert_clean_success(grpc_export(collector, body, authorization=authorization))
    assert span_ids(lake_dir) == hexes(spans)


def test_health_is_open_and_status_needs_the_token(
    make_collector: Callable[..., Collector],
) -> None:
    # Load balancers probe /health without credentials; /status shows counters: guarded.
    collector = make_collector(token=TOKEN)
    status, headers, body = http_request(collector, "GET", "/health")
    assert (status, json.loads(body)["status"]) == (200, "ok")
    status, headers, body = http_request(collector, "GET", "/status")
    assert status == 401
    assert headers.get("www-authenticate", "").startswith("Bearer")
    assert_mentions(json.loads(body)["message"], "bearer token")
    status, headers, body = http_request(
        collector, "GET", "/status", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200
    assert headers["content-type"] == JSON
    assert json.loads(body)["status"] == "ok"


# --- OTLP/JSON -------------------------------------------------------------------------------

JSON_TRACE_ID = "5b8efff798038103d269b633813fc60c"
JSON_SPAN_ID = "eee19b7ec3c1b174"
JSON_PARENT_ID = "eee19b7ec3c1b173"


def json_span(**overrides: Any) -> dict[str, Any]:
    span = {
        "traceId": JSON_TRACE_ID,
        "spanId": JSON_SPAN_ID,
        "parentSpanId": JSON_PARENT_ID,
        "name": "json span",
        "kind": 3,
        "startTimeUnixNano": "1700000000000000001",  # 64-bit ints travel as strings
        "endTimeUnixNano": "1700000000123456789",
        "attributes": [
            {"key": "n", "value": {"intValue": "42"}},
            {"key": "big", "value": {"intValue": "9007199254740993"}},  # 2**53 + 1: no floats
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "d", "value": {"doubleValue": 1.5}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "arr", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
        ],
        "status": {"code": 2, "message": "boom"},
    }
    span.update(overrides)
    return span


def json_request(*spans: Any) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]
                },
                "scopeSpans": [{"scope": {"name": "json-scope", "version": "0.1"}, "spans": spans}],
            }
        ]
    }


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_otlp_json_is_stored_with_exact_values(
    collector: Collector, lake_dir: Path, compressed: bool
) -> None:
    body = json.dumps(json_request(json_span())).encode()
    headers = {"Content-Encoding": "gzip"} if compressed else {}
    body = gzip.compress(body) if compressed else body
    reply = post(collector, body, content_type=JSON, headers=headers)
    assert_clean_success(reply)
    assert reply.headers["content-type"] == JSON
    serving = still_serving(collector)
    rows = query(
        lake_dir,
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_time_unix_nano, "
        "end_time_unix_nano, status_code, status_message, service_name, scope_name, "
        "scope_version, attributes FROM spans WHERE span_id NOT IN (SELECT unnest(?))",
        [sorted(serving)],
    )
    assert len(rows) == 1
    assert rows[0][:12] == (
        JSON_TRACE_ID,
        JSON_SPAN_ID,
        JSON_PARENT_ID,
        "json span",
        "CLIENT",
        1_700_000_000_000_000_001,
        1_700_000_000_123_456_789,
        "ERROR",
        "boom",
        "json-svc",
        "json-scope",
        "0.1",
    )
    assert json.loads(rows[0][12]) == {
        "n": 42,
        "big": 2**53 + 1,
        "s": "x",
        "d": 1.5,
        "b": True,
        "arr": ["a"],
    }


BAD_JSON_SPANS = {
    # OTLP/JSON ids are hex: a non-hex id is that span's problem only.
    "non-hex-trace-id": ({"traceId": "zz" * 16}, ("'zzzz", "not hex")),
    # Base64 (protobuf's generic JSON mapping) where OTLP/JSON wants hex.
    "base64-span-id": ({"spanId": "7uGbfsPBsXQ="}, ("'7uGbfsPBsXQ='", "not hex")),
    # Hex of the wrong length: caught after decoding, like a protobuf id.
    "short-hex-trace-id": ({"traceId": "abcd"}, ("trace_id", "got 2 bytes")),
}


@pytest.mark.parametrize("case", list(BAD_JSON_SPANS), ids=list(BAD_JSON_SPANS))
def test_otlp_json_bad_span_is_partial_success(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    overrides, fragments = BAD_JSON_SPANS[case]
    good = [new_span_id().hex(), new_span_id().hex()]
    spans = [
        json_span(spanId=good[0]),
        json_span(**{"spanId": new_span_id().hex(), "name": "bad", **overrides}),
        json_span(spanId=good[1]),
    ]
    reply = post(collector, json.dumps(json_request(*spans)).encode(), content_type=JSON)
    assert_partial(reply, 1, "span 1", *fragments)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == set(good) | serving


MALFORMED_JSON = [
    # Cut off mid-document.
    pytest.param(b'{"resourceSpans": [', "not valid JSON", id="truncated"),
    # Valid JSON, but not an object.
    pytest.param(b"[1, 2]", "JSON object", id="array"),
    # JSON must be UTF-8.
    pytest.param(b'{"resourceSpans": ["\xff\xfe"]}', "UTF-8", id="invalid-utf8"),
    # resourceSpans is a repeated field: an object is as wrong as a string, and a producer
    # whose every export is silently answered 200 with nothing stored never learns why.
    pytest.param(
        b'{"resourceSpans": {}}',
        "must be an array",
        id="resource-spans-object",
    ),
]


@pytest.mark.parametrize(("body", "fragment"), MALFORMED_JSON)
def test_malformed_json_is_refused_with_a_json_error(
    collector: Collector, lake_dir: Path, body: bytes, fragment: str
) -> None:
    reply = post(collector, body, content_type=JSON)
    assert reply.status == 400, reply
    assert reply.headers["content-type"] == JSON
    assert set(json.loads(reply.body)) == {"code", "message"}
    assert reply.rpc_code == code_pb2.INVALID_ARGUMENT
    assert_mentions(reply.message, fragment)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


# --- endpoints -------------------------------------------------------------------------------

UNKNOWN_PATHS = {
    # A signal's path misspelt.
    "post-typo": ("POST", "/v1/trace"),
    # A typo in a GET.
    "get-unknown": ("GET", "/nope"),
}


@pytest.mark.parametrize("case", list(UNKNOWN_PATHS), ids=list(UNKNOWN_PATHS))
def test_unknown_path_is_404(collector: Collector, lake_dir: Path, case: str) -> None:
    method, path = UNKNOWN_PATHS[case]
    body = _valid_body() if method == "POST" else None
    headers = {"Content-Type": PROTOBUF} if method == "POST" else {}
    status, headers, data = http_request(collector, method, path, body, headers)
    assert status == 404
    if method == "POST":
        reply = status_pb2.Status.FromString(data)
        assert reply.code == code_pb2.NOT_FOUND
        assert_mentions(reply.message, path)
    else:
        assert_mentions(json.loads(data)["error"], path)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


def test_metrics_are_answered_with_a_partial_success_and_not_stored(
    collector: Collector,
) -> None:
    """Not an outage (404): a success that rejects every point, and says why."""
    from spanscore.collector.metrics_refused import NOT_STORED

    gauge = {"name": "g", "gauge": {"dataPoints": [{"asDouble": 1.0}, {"asDouble": 2.0}]}}
    request = {"resourceMetrics": [{"scopeMetrics": [{"metrics": [gauge]}]}]}
    status, headers, data = http_request(
        collector, "POST", "/v1/metrics", json.dumps(request).encode(), {"Content-Type": JSON}
    )
    assert (status, headers["content-type"]) == (200, JSON), data
    partial = json.loads(data)["partialSuccess"]
    assert partial == {"rejectedDataPoints": "2", "errorMessage": NOT_STORED}
    status, _, data = http_request(
        collector, "POST", "/v1/metrics", b"{not json", {"Content-Type": JSON}
    )
    assert status == 400, data
    assert collector.stats.get("metrics_exports_not_stored") == 1


def test_health_answers_ok(collector: Collector) -> None:
    # The probe every deployment uses: 200, JSON, status ok.
    status, headers, body = http_request(collector, "GET", "/health")
    assert status == 200
    assert headers["content-type"] == JSON
    assert json.loads(body)["status"] == "ok"


# --- OTLP logs -------------------------------------------------------------------------------

LOG_TRANSPORTS = ("http", "http-json", "grpc")


@pytest.mark.parametrize("transport", LOG_TRANSPORTS, ids=LOG_TRANSPORTS)
def test_logs_are_stored_with_their_ids_and_bad_ids_unlinked(
    collector: Collector, lake_dir: Path, transport: str
) -> None:
    # A GenAI event record joins its span through trace_id/span_id. A record whose span_id has
    # the wrong length is kept but not linked to any span, as logs.proto says receivers SHOULD
    # treat it; the warning and its ingest_notes say so.
    trace_id, span_id = new_trace_id(), new_span_id()
    record = make_log(trace_id=trace_id, span_id=span_id)
    assert_clean_success(export(collector, transport, logs_request(record), signal="logs"))
    good = [make_log(trace_id=new_trace_id(), span_id=new_span_id()) for _ in range(2)]
    bad = make_log(trace_id=new_trace_id(), span_id=b"\x07" * 3)
    reply = export(collector, transport, logs_request(good[0], bad, good[1]), signal="logs")
    assert reply.ok, reply
    assert reply.rejected == 0
    assert "unlinked" in reply.message
    serving = still_serving(collector)
    rows = query(
        lake_dir,
        "SELECT trace_id, span_id, event_name, body, conversation_id, service_name, "
        "time_unix_nano FROM logs",
    )
    assert (
        trace_id.hex(),
        span_id.hex(),
        "gen_ai.user.message",
        '"where is ORD-1?"',
        "conv-logs",
        "bad-input-logs",
        1_700_000_000_500_000_000,
    ) in rows
    assert {(r[0], r[1]) for r in rows} == {
        (r.trace_id.hex(), r.span_id.hex()) for r in (record, *good)
    } | {(bad.trace_id.hex(), None)}
    notes = query(lake_dir, "SELECT ingest_notes FROM logs WHERE span_id IS NULL")
    assert notes == [("ignored an invalid span_id (3 bytes)",)]
    assert span_ids(lake_dir) == serving
