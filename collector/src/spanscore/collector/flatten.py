"""OTLP messages to Arrow record batches shaped like the lake's `spans` and `logs` tables.

This is the collector's hot path: one pass over the protobuf objects per span, one tuple per row,
one transpose into columns, Arrow conversion. Attribute maps become JSON with orjson. Invalid
spans (ids of the wrong length) are rejected one by one, with a reason, for OTLP partial success.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from spanscore.lake import schema

from .conventions import Extractor, log_record_messages

SPANS_SCHEMA = schema.arrow_schema(schema.SPANS)
LOGS_SCHEMA = schema.arrow_schema(schema.LOGS)

_KINDS = {
    0: "UNSPECIFIED",
    1: "INTERNAL",
    2: "SERVER",
    3: "CLIENT",
    4: "PRODUCER",
    5: "CONSUMER",
}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class Limits:
    """What the collector accepts per span or record; beyond it, it truncates and says so."""

    max_attributes: int = 512
    max_value_length: int = 256 * 1024
    redact_patterns: tuple[str, ...] = ()

    def redactor(self) -> re.Pattern[str] | None:
        """One regex for all key patterns (`*` is a wildcard; matching is case-insensitive)."""
        if not self.redact_patterns:
            return None
        parts = [
            "^" + ".*".join(re.escape(piece) for piece in p.split("*")) + "$"
            if "*" in p
            else "(^|\\.)" + re.escape(p) + "$"
            for p in self.redact_patterns
        ]
        return re.compile("|".join(parts), re.IGNORECASE)


@dataclass
class Flattened:
    """The rows an export yields plus what was rejected or changed, for the OTLP response."""

    batch: pa.RecordBatch
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    truncated: int = 0

    @property
    def rows(self) -> int:
        return int(self.batch.num_rows)


def summarize(problems: list[str], shown: int = 5) -> str:
    """The partial-success message: the first few reasons, then how many more."""
    more = len(problems) - shown
    return "; ".join(problems[:shown]) + (f"; and {more} more" if more > 0 else "")


class _AttributeReader:
    """AnyValue / KeyValue lists to plain Python values, applying limits and redaction."""

    def __init__(self, limits: Limits) -> None:
        self.max_attributes = limits.max_attributes
        self.max_len = limits.max_value_length
        self.redact = limits.redactor()

    def value(self, v: common_pb2.AnyValue, notes: list[str] | None) -> Any:
        kind = v.WhichOneof("value")
        if kind == "string_value":
            s = v.string_value
            if len(s) > self.max_len:
                if notes is not None:
                    notes.append(f"truncated a value of {len(s)} chars to {self.max_len}")
                return s[: self.max_len]
            return s
        if kind == "int_value":
            return v.int_value
        if kind == "bool_value":
            return v.bool_value
        if kind == "double_value":
            d = v.double_value
            if math.isfinite(d):
                return d
            return "NaN" if math.isnan(d) else ("Infinity" if d > 0 else "-Infinity")
        if kind == "array_value":
            return [self.value(x, notes) for x in v.array_value.values]
        if kind == "kvlist_value":
            return {kv.key: self.value(kv.value, notes) for kv in v.kvlist_value.values}
        if kind == "bytes_value":
            text = base64.b64encode(v.bytes_value).decode()
            if len(text) > self.max_len:
                if notes is not None:
                    notes.append(f"truncated a bytes value of {len(text)} base64 chars")
                return text[: self.max_len]
            return text
        return None

    def mapping(
        self, kvs: Iterable[common_pb2.KeyValue], count: int, notes: list[str] | None
    ) -> tuple[dict[str, Any], int]:
        """(attributes, how many were dropped for the count limit)."""
        dropped = 0
        if count > self.max_attributes:
            dropped = count - self.max_attributes
            if notes is not None:
                notes.append(
                    f"dropped {dropped} attributes over the limit of {self.max_attributes}"
                )
            kvs = list(kvs)[: self.max_attributes]
        out: dict[str, Any] = {}
        max_len = self.max_len
        for kv in kvs:
            v = kv.value
            kind = v.WhichOneof("value")
            # The common kinds inline: this loop runs ~15 times per span.
            if kind == "string_value":
                text = v.string_value
                out[kv.key] = text if len(text) <= max_len else self.value(v, notes)
            elif kind == "int_value":
                out[kv.key] = v.int_value
            elif kind == "bool_value":
                out[kv.key] = v.bool_value
            else:
                out[kv.key] = self.value(v, notes)
        if self.redact is not None:
            hits = [k for k in out if self.redact.search(k)]
            for k in hits:
                out[k] = REDACTED
            if hits and notes is not None:
                notes.append("redacted " + ", ".join(sorted(hits)))
        return out, dropped


def _hex_id(raw: bytes, size: int) -> str | None:
    return raw.hex() if len(raw) == size and raw != bytes(size) else None


_INT64_MAX = 2**63 - 1


def _positions(skipped: Sequence[int]) -> Iterator[int]:
    """Original positions of the items the decoder kept, given the ones it rejected."""
    skip = set(skipped)
    position = 0
    while True:
        while position in skip:
            position += 1
        yield position
        position += 1


class Flattener:
    """Turns OTLP trace and log requests into lake rows. One per collector; thread-safe."""

    def __init__(self, limits: Limits | None = None, conversation_attribute: str | None = None):
        self.limits = limits or Limits()
        self.attrs = _AttributeReader(self.limits)
        self.extractor = Extractor(conversation_attribute)

    def spans(
        self, resource_spans: Iterable[trace_pb2.ResourceSpans], skipped: Sequence[int] = ()
    ) -> Flattened:
        """Rows for `spans`; `skipped` are positions the decoder already rejected, so that
        problems name each span by its position in the request."""
        rows: list[tuple[Any, ...]] = []
        rejected = 0
        problems: list[str] = []
        truncated = 0
        mapping = self.attrs.mapping
        extract = self.extractor.extract
        dumps = orjson.dumps
        position = _positions(skipped)
        for rs in resource_spans:
            res_notes: list[str] = []
            resource, _ = mapping(rs.resource.attributes, len(rs.resource.attributes), res_notes)
            service = resource.get("service.name")
            service_name = service if isinstance(service, str) else None
            resource_json = dumps(resource)
            for ss in rs.scope_spans:
                scope = ss.scope
                scope_attrs, _ = mapping(scope.attributes, len(scope.attributes), None)
                scope_json = dumps(scope_attrs) if scope_attrs else None
                scope_name = scope.name or None
                scope_version = scope.version or None
                schema_url = ss.schema_url or rs.schema_url or None
                for span in ss.spans:
                    index = next(position)
                    trace_id = _hex_id(span.trace_id, 16)
                    span_id = _hex_id(span.span_id, 8)
                    if trace_id is None or span_id is None:
                        rejected += 1
                        which = "trace_id" if trace_id is None else "span_id"
                        size = len(span.trace_id if trace_id is None else span.span_id)
                        want = 16 if trace_id is None else 8
                        problems.append(
                            f"span {index} ({span.name!r}): {which} must be {want} non-zero "
                            f"bytes, got {size} bytes"
                        )
                        continue
                    parent_raw = span.parent_span_id
                    parent: str | None = None
                    if parent_raw:
                        parent = _hex_id(parent_raw, 8)
                        if parent is None:
                            rejected += 1
                            problems.append(
                                f"span {index} ({span.name!r}): parent_span_id must be 8 bytes "
                                f"or empty, got {len(parent_raw)} bytes"
                            )
                            continue
                    start = span.start_time_unix_nano
                    end = span.end_time_unix_nano
                    if start > _INT64_MAX or end > _INT64_MAX:
                        rejected += 1
                        field = (
                            "start_time_unix_nano" if start > _INT64_MAX else "end_time_unix_nano"
                        )
                        problems.append(
                            f"span {index} ({span.name!r}): {field} is past the year 2262 "
                            "(over 2**63 - 1 nanoseconds)"
                        )
                        continue
                    notes: list[str] = res_notes.copy()
                    attrs, dropped = mapping(span.attributes, len(span.attributes), notes)
                    exception_type = None
                    events_json = None
                    events: list[dict[str, Any]] = []
                    if span.events:
                        for ev in span.events:
                            ev_attrs, _ = mapping(ev.attributes, len(ev.attributes), notes)
                            if ev.name == "exception" and exception_type is None:
                                exception_type = ev_attrs.get("exception.type")
                            events.append(
                                {
                                    "name": ev.name,
                                    "time_unix_nano": ev.time_unix_nano,
                                    "attributes": ev_attrs,
                                    "dropped_attributes_count": ev.dropped_attributes_count,
                                }
                            )
                        events_json = dumps(events)
                    links_json = None
                    if span.links:
                        links_json = dumps(
                            [
                                {
                                    "trace_id": link.trace_id.hex(),
                                    "span_id": link.span_id.hex(),
                                    "trace_state": link.trace_state or None,
                                    "attributes": mapping(
                                        link.attributes, len(link.attributes), notes
                                    )[0],
                                    "flags": link.flags,
                                }
                                for link in span.links
                            ]
                        )
                    status = span.status
                    is_error = status.code == 2
                    if notes:
                        truncated += 1
                    rows.append(
                        (
                            trace_id,
                            span_id,
                            parent,
                            span.trace_state or None,
                            span.flags,
                            span.name,
                            _KINDS.get(span.kind, "UNSPECIFIED"),
                            start // 1000,
                            end // 1000,
                            start,
                            end,
                            (end - start) / 1e6,
                            _STATUS.get(status.code, "UNSET"),
                            status.message or None,
                            service_name,
                            resource_json,
                            scope_name,
                            scope_version,
                            scope_json,
                            schema_url,
                            dumps(attrs),
                            events_json,
                            links_json,
                            span.dropped_attributes_count + dropped,
                            span.dropped_events_count,
                            span.dropped_links_count,
                            *extract(attrs, span.name, is_error, exception_type, trace_id, events),
                            "; ".join(notes) if notes else None,
                            None,  # ingest_time: the commit's time, set by the writer
                        )
                    )
        if truncated:
            problems.append(f"{truncated} span(s) were truncated or redacted (see ingest_notes)")
        return Flattened(_to_batch(rows, SPANS_SCHEMA), rejected, problems, truncated)

    def logs(
        self, resource_logs: Iterable[logs_pb2.ResourceLogs], skipped: Sequence[int] = ()
    ) -> Flattened:
        rows: list[tuple[Any, ...]] = []
        rejected = 0
        problems: list[str] = []
        truncated = 0
        mapping = self.attrs.mapping
        dumps = orjson.dumps
        conversation_keys = (
            "gen_ai.conversation.id",
            *self.extractor.extra_conversation_keys,
        )
        position = _positions(skipped)
        for rl in resource_logs:
            resource, _ = mapping(rl.resource.attributes, len(rl.resource.attributes), None)
            service = resource.get("service.name")
            service_name = service if isinstance(service, str) else None
            resource_json = dumps(resource)
            for sl in rl.scope_logs:
                scope_name = sl.scope.name or None
                scope_version = sl.scope.version or None
                for record in sl.log_records:
                    index = next(position)
                    t_event, t_observed = record.time_unix_nano, record.observed_time_unix_nano
                    if t_event > _INT64_MAX or t_observed > _INT64_MAX:
                        rejected += 1
                        problems.append(
                            f"log record {index}: time is past the year 2262 "
                            "(nanoseconds over 2**63 - 1)"
                        )
                        continue
                    notes: list[str] = []
                    # logs.proto: a record with an invalid trace or span id is treated as not
                    # belonging to a trace; it is kept, and the note says so.
                    trace_id = span_id = None
                    if record.trace_id:
                        trace_id = _hex_id(record.trace_id, 16)
                        if trace_id is None:
                            notes.append(
                                f"ignored an invalid trace_id ({len(record.trace_id)} bytes)"
                            )
                    if record.span_id:
                        span_id = _hex_id(record.span_id, 8)
                        if span_id is None:
                            notes.append(
                                f"ignored an invalid span_id ({len(record.span_id)} bytes)"
                            )
                    attrs, dropped = mapping(record.attributes, len(record.attributes), notes)
                    body = self.attrs.value(record.body, notes) if record.HasField("body") else None
                    event_name = record.event_name or attrs.get("event.name")
                    conversation = next(
                        (attrs[k] for k in conversation_keys if attrs.get(k) is not None), None
                    )
                    t = t_event or t_observed
                    if notes:
                        truncated += 1
                    rows.append(
                        (
                            t // 1000 if t else None,
                            t_event,
                            t_observed,
                            trace_id,
                            span_id,
                            record.flags,
                            record.severity_number,
                            record.severity_text or None,
                            event_name if isinstance(event_name, str) else None,
                            dumps(body) if body is not None else None,
                            dumps(attrs),
                            resource_json,
                            service_name,
                            scope_name,
                            scope_version,
                            record.dropped_attributes_count + dropped,
                            str(conversation) if conversation is not None else None,
                            *log_record_messages(
                                event_name if isinstance(event_name, str) else None, attrs, body
                            ),
                            "; ".join(notes) if notes else None,
                            None,
                        )
                    )
        if truncated:
            problems.append(
                f"{truncated} record(s) were truncated, redacted or unlinked (see ingest_notes)"
            )
        return Flattened(_to_batch(rows, LOGS_SCHEMA), rejected, problems, truncated)


def _to_batch(rows: list[tuple[Any, ...]], arrow_schema: pa.Schema) -> pa.RecordBatch:
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=arrow_schema)
    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
