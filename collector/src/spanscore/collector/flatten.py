"""OTLP messages to Arrow record batches shaped like the lake's `spans` and `logs` tables.

This is the collector's hot path: one pass over the protobuf objects per span, one tuple per row,
one transpose into columns, Arrow conversion. Attribute maps become JSON with orjson. Invalid
spans (ids of the wrong length) are rejected one by one, with a reason, for OTLP partial success.
"""

from __future__ import annotations

import base64
import itertools
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

from . import identity
from .conventions import Extractor, log_record_messages
from .otlp import client_message, clip

SPANS_SCHEMA = schema.arrow_schema(schema.SPANS)
LOGS_SCHEMA = schema.arrow_schema(schema.LOGS)
# A log record's identity within one request (the writer's across requests: `identity`).
_LOG_IDENTITY = tuple(LOGS_SCHEMA.get_field_index(name) for name in identity.LOG_IDENTITY)
_LOG_TIME, _LOG_OBSERVED = _LOG_IDENTITY[:2]

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
    """What the collector accepts per request, span or record; beyond it, it truncates and
    says so (or, for a request over `max_items_per_request`, refuses it)."""

    max_attributes: int = 512
    max_value_length: int = 256 * 1024
    max_key_length: int = 1024
    max_items_per_request: int | None = 100_000  # spans or log records in one request
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
    unexpected: list[str] = field(default_factory=list)  # rejections no rule foresaw: bugs

    @property
    def rows(self) -> int:
        return int(self.batch.num_rows)

    def reject(self, problem: str, unexpected: bool = False) -> None:
        self.rejected += 1
        self.problems.append(problem)
        if unexpected:
            self.unexpected.append(problem)


def summarize(problems: list[str], shown: int = 5) -> str:
    """The partial-success message: the first few reasons, then how many more."""
    more = len(problems) - shown
    return client_message("; ".join(problems[:shown]) + (f"; and {more} more" if more > 0 else ""))


class _AttributeReader:
    """AnyValue / KeyValue lists to plain Python values, applying limits and redaction."""

    def __init__(self, limits: Limits) -> None:
        self.max_attributes = limits.max_attributes
        self.max_len = limits.max_value_length
        self.max_key = limits.max_key_length
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
            return {
                kv.key: self.value(kv.value, notes)
                for kv in v.kvlist_value.values
                if self._key_fits(kv.key, notes)
            }
        if kind == "bytes_value":
            text = base64.b64encode(v.bytes_value).decode()
            if len(text) > self.max_len:
                if notes is not None:
                    notes.append(f"truncated a bytes value of {len(text)} base64 chars")
                return text[: self.max_len]
            return text
        return None

    def _key_fits(self, key: str, notes: list[str] | None) -> bool:
        if len(key) <= self.max_key:
            return True
        if notes is not None:
            notes.append(
                f"dropped an attribute whose key is {len(key)} chars "
                f"(over the limit of {self.max_key}): {clip(repr(key), 40)}"
            )
        return False

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
            key = kv.key
            v = kv.value
            # The common kinds inline: this loop runs ~15 times per span. A non-empty string,
            # the commonest, is read without asking which kind the value holds (any other
            # kind reads as "").
            text = v.string_value
            if text:
                out[key] = text if len(text) <= max_len else self.value(v, notes)
                continue
            kind = v.WhichOneof("value")
            if kind == "string_value":
                out[key] = text
            elif kind == "int_value":
                out[key] = v.int_value
            elif kind == "bool_value":
                out[key] = v.bool_value
            else:
                out[key] = self.value(v, notes)
        # Keys over the limit are rare: one pass in C over the kept keys finds whether any is.
        if out and max(map(len, out)) > self.max_key:
            for key in [key for key in out if not self._key_fits(key, notes)]:
                del out[key]
                dropped += 1
        if self.redact is not None:
            hits = [k for k in out if self.redact.search(k)]
            for k in hits:
                out[k] = REDACTED
            if hits and notes is not None:
                notes.append("redacted " + ", ".join(sorted(hits)))
        return out, dropped


def _hex_id(raw: bytes, size: int) -> str | None:
    return raw.hex() if len(raw) == size and raw != _ZEROS[size] else None


_ZEROS = {16: bytes(16), 8: bytes(8)}  # the invalid all-zero ids


_INT64_MAX = 2**63 - 1


def _positions(skipped: Sequence[int]) -> Iterator[int]:
    """Original positions of the items the decoder kept, given the ones it rejected."""
    if not skipped:
        return itertools.count()  # the common case, counted in C
    return _kept(set(skipped))


def _kept(skip: set[int]) -> Iterator[int]:
    position = 0
    while True:
        while position in skip:
            position += 1
        yield position
        position += 1


class _Reject(Exception):
    """One span or record cannot be stored; the message (sent to the client) says why."""


def _reason(exc: Exception) -> str:
    """An unexpected failure reading one item, in words a producer can act on."""
    if isinstance(exc, orjson.JSONEncodeError) and "Recursion limit" in str(exc):
        return "a value is nested too deeply to store as JSON (over 254 levels)"
    return clip(f"{type(exc).__name__}: {exc}")


class Flattener:
    """Turns OTLP trace and log requests into lake rows. One per collector; thread-safe.

    Each span or record is read behind its own fence: whatever goes wrong reading one (a bad
    id, a value that cannot be stored, a convention mapper meeting a shape it did not expect)
    rejects that item with a reason, never the request (OTLP partial success).
    """

    def __init__(self, limits: Limits | None = None, conversation_attribute: str | None = None):
        self.limits = limits or Limits()
        self.attrs = _AttributeReader(self.limits)
        self.extractor = Extractor(conversation_attribute)
        # Log records take their conversation from the same keys as spans.
        self.conversation_keys = self.extractor.conversation_keys

    def spans(
        self, resource_spans: Iterable[trace_pb2.ResourceSpans], skipped: Sequence[int] = ()
    ) -> Flattened:
        """Rows for `spans`; `skipped` are positions the decoder already rejected, so that
        problems name each span by its position in the request."""
        out = Flattened(_NO_SPANS)
        rows: list[tuple[Any, ...]] = []
        seen: dict[tuple[bytes, bytes], int] = {}
        mapping = self.attrs.mapping
        position = _positions(skipped)
        for rs in resource_spans:
            res_notes: list[str] = []
            resource, _ = mapping(rs.resource.attributes, len(rs.resource.attributes), res_notes)
            service = resource.get("service.name")
            context = (
                service if isinstance(service, str) else None,
                orjson.dumps(resource),
                res_notes,
            )
            for ss in rs.scope_spans:
                scope = ss.scope
                scope_attrs, _ = mapping(scope.attributes, len(scope.attributes), None)
                scope_context = (
                    scope.name or None,
                    scope.version or None,
                    orjson.dumps(scope_attrs) if scope_attrs else None,
                    ss.schema_url or rs.schema_url or None,
                )
                for span in ss.spans:
                    index = next(position)
                    raw_ids = key = (span.trace_id, span.span_id)
                    if key in seen:
                        # Stored once: the writer keeps the first of a (trace_id, span_id).
                        out.reject(
                            f"span {index} ({clip(repr(span.name))}): same trace_id and span_id "
                            f"as span {seen[key]} of this request, stored once"
                        )
                        continue
                    try:
                        row, changed = self._span_row(span, raw_ids, index, context, scope_context)
                    except _Reject as exc:
                        out.reject(str(exc))
                        continue
                    except Exception as exc:
                        out.reject(
                            f"span {index} ({clip(repr(span.name))}): cannot be read: "
                            f"{_reason(exc)}",
                            unexpected=True,
                        )
                        continue
                    seen[key] = index
                    rows.append(row)
                    out.truncated += changed
        if out.truncated:
            out.problems.append(
                f"{out.truncated} span(s) were truncated or redacted (see ingest_notes)"
            )
        out.batch = _to_batch(rows, SPANS_SCHEMA)
        return out

    def _span_row(
        self,
        span: trace_pb2.Span,
        raw_ids: tuple[bytes, bytes],
        index: int,
        resource: tuple[str | None, bytes, list[str]],
        scope: tuple[str | None, str | None, bytes | None, str | None],
    ) -> tuple[tuple[Any, ...], bool]:
        """(the lake row of one span, whether limits changed it); raises _Reject."""
        name = span.name
        raw_trace, raw_span = raw_ids
        trace_id = raw_trace.hex() if len(raw_trace) == 16 and raw_trace != _ZEROS[16] else None
        span_id = raw_span.hex() if len(raw_span) == 8 and raw_span != _ZEROS[8] else None
        if trace_id is None or span_id is None:
            which = "trace_id" if trace_id is None else "span_id"
            size = len(raw_ids[0] if trace_id is None else raw_ids[1])
            want = 16 if trace_id is None else 8
            raise _Reject(
                f"span {index} ({clip(repr(name))}): {which} must be {want} non-zero "
                f"bytes, got {size} bytes"
            )
        parent_raw = span.parent_span_id
        parent: str | None = None
        if parent_raw:
            parent = _hex_id(parent_raw, 8)
            if parent is None:
                raise _Reject(
                    f"span {index} ({clip(repr(name))}): parent_span_id must be 8 bytes "
                    f"or empty, got {len(parent_raw)} bytes"
                )
        start = span.start_time_unix_nano
        end = span.end_time_unix_nano
        if start > _INT64_MAX or end > _INT64_MAX:
            field = "start_time_unix_nano" if start > _INT64_MAX else "end_time_unix_nano"
            raise _Reject(
                f"span {index} ({clip(repr(name))}): {field} is past the year 2262 "
                "(over 2**63 - 1 nanoseconds)"
            )
        mapping = self.attrs.mapping
        dumps = orjson.dumps
        service_name, resource_json, res_notes = resource
        notes: list[str] = res_notes.copy()
        attrs, dropped = mapping(span.attributes, len(span.attributes), notes)
        exception_type = None
        events_json = None
        events: list[dict[str, Any]] = []
        if span.events:
            for ev in span.events:
                ev_attrs, _ = mapping(ev.attributes, len(ev.attributes), notes)
                if ev.name == "exception" and exception_type is None:
                    found = ev_attrs.get("exception.type")  # any type: a text column
                    exception_type = (
                        found if found is None or isinstance(found, str) else str(found)
                    )
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
                        "attributes": mapping(link.attributes, len(link.attributes), notes)[0],
                        "flags": link.flags,
                    }
                    for link in span.links
                ]
            )
        status = span.status
        is_error = status.code == 2
        extracted = self.extractor.extract(attrs, name, is_error, exception_type, trace_id, events)
        row = (
            trace_id,
            span_id,
            parent,
            span.trace_state or None,
            span.flags,
            name,
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
            *scope,
            dumps(attrs),
            events_json,
            links_json,
            span.dropped_attributes_count + dropped,
            span.dropped_events_count,
            span.dropped_links_count,
            *extracted,
            "; ".join(notes) if notes else None,
            None,  # ingest_time: the commit's time, set by the writer
        )
        return row, bool(notes)

    def logs(
        self, resource_logs: Iterable[logs_pb2.ResourceLogs], skipped: Sequence[int] = ()
    ) -> Flattened:
        out = Flattened(_NO_LOGS)
        rows: list[tuple[Any, ...]] = []
        seen: dict[tuple[Any, ...], int] = {}
        mapping = self.attrs.mapping
        position = _positions(skipped)
        for rl in resource_logs:
            resource, _ = mapping(rl.resource.attributes, len(rl.resource.attributes), None)
            service = resource.get("service.name")
            context = (
                orjson.dumps(resource),
                service if isinstance(service, str) else None,
            )
            for sl in rl.scope_logs:
                scope = (sl.scope.name or None, sl.scope.version or None)
                for record in sl.log_records:
                    index = next(position)
                    try:
                        row, changed = self._log_row(record, index, context, scope)
                    except _Reject as exc:
                        out.reject(str(exc))
                        continue
                    except Exception as exc:
                        out.reject(
                            f"log record {index}: cannot be read: {_reason(exc)}", unexpected=True
                        )
                        continue
                    if identity.has_identity(row[_LOG_TIME], row[_LOG_OBSERVED]):
                        key = tuple(row[i] for i in _LOG_IDENTITY)
                        if key in seen:
                            out.reject(
                                f"log record {index}: same trace, span, times, event name and "
                                f"body as log record {seen[key]} of this request, stored once"
                            )
                            continue
                        seen[key] = index
                    rows.append(row)
                    out.truncated += changed
        if out.truncated:
            out.problems.append(
                f"{out.truncated} record(s) were truncated, redacted or unlinked (see ingest_notes)"
            )
        out.batch = _to_batch(rows, LOGS_SCHEMA)
        return out

    def _log_row(
        self,
        record: logs_pb2.LogRecord,
        index: int,
        resource: tuple[bytes, str | None],
        scope: tuple[str | None, str | None],
    ) -> tuple[tuple[Any, ...], bool]:
        """(the lake row of one log record, whether it was changed); raises _Reject."""
        t_event, t_observed = record.time_unix_nano, record.observed_time_unix_nano
        if t_event > _INT64_MAX or t_observed > _INT64_MAX:
            raise _Reject(
                f"log record {index}: time is past the year 2262 (nanoseconds over 2**63 - 1)"
            )
        notes: list[str] = []
        # logs.proto: a record with an invalid trace or span id is treated as not belonging to a
        # trace; it is kept, and the note says so.
        trace_id = span_id = None
        if record.trace_id:
            trace_id = _hex_id(record.trace_id, 16)
            if trace_id is None:
                notes.append(f"ignored an invalid trace_id ({len(record.trace_id)} bytes)")
        if record.span_id:
            span_id = _hex_id(record.span_id, 8)
            if span_id is None:
                notes.append(f"ignored an invalid span_id ({len(record.span_id)} bytes)")
        attrs, dropped = self.attrs.mapping(record.attributes, len(record.attributes), notes)
        body = self.attrs.value(record.body, notes) if record.HasField("body") else None
        event_name = record.event_name or attrs.get("event.name")
        if not isinstance(event_name, str):
            event_name = None
        conversation = next(
            (attrs[k] for k in self.conversation_keys if attrs.get(k) is not None), None
        )
        t = t_event or t_observed
        dumps = orjson.dumps
        row = (
            t // 1000 if t else None,
            t_event,
            t_observed,
            trace_id,
            span_id,
            record.flags,
            record.severity_number,
            record.severity_text or None,
            event_name,
            dumps(body) if body is not None else None,
            dumps(attrs),
            *resource,
            *scope,
            record.dropped_attributes_count + dropped,
            str(conversation) if conversation is not None else None,
            *log_record_messages(event_name, attrs, body),
            "; ".join(notes) if notes else None,
            None,
        )
        return row, bool(notes)


def _to_batch(rows: list[tuple[Any, ...]], arrow_schema: pa.Schema) -> pa.RecordBatch:
    if not rows:
        return _NO_SPANS if arrow_schema is SPANS_SCHEMA else _NO_LOGS
    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, arrow_schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


# Record batches are immutable: one empty batch per table serves every request.
_NO_SPANS = pa.RecordBatch.from_pylist([], schema=SPANS_SCHEMA)
_NO_LOGS = pa.RecordBatch.from_pylist([], schema=LOGS_SCHEMA)
