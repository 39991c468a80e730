"""Decoding OTLP request bodies: protobuf (strict, then span by span), OTLP/JSON, gzip.

A body whose outer framing is broken (garbage, truncation) is refused as a whole. A body whose
framing is sound but whose content is not (invalid UTF-8 in one span's strings, a bad id in
OTLP/JSON) keeps every span that parses and reports the others as rejected: OTLP's partial
success.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


class BadRequest(Exception):
    """The request as a whole cannot be read; the message says why (sent to the client)."""


class TooLarge(BadRequest):
    """The (decompressed) body is over the size limit."""


@dataclass
class Decoded:
    """The resource groups that parsed, and the items that did not (with reasons)."""

    groups: list[Any]
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # positions of the rejected items


@dataclass(frozen=True)
class _Shape:
    """How one OTLP signal nests: request -> resource group -> scope group -> items."""

    request: type[Message]
    group: type[Message]
    scope_group: type[Message]
    item: type[Message]
    groups_field: str  # protobuf field names
    scopes_field: str
    items_field: str
    json_groups: str  # OTLP/JSON (lowerCamelCase) names
    json_scopes: str
    json_items: str
    noun: str
    id_fields: tuple[str, ...]


TRACES = _Shape(
    trace_service_pb2.ExportTraceServiceRequest,
    trace_pb2.ResourceSpans,
    trace_pb2.ScopeSpans,
    trace_pb2.Span,
    "resource_spans",
    "scope_spans",
    "spans",
    "resourceSpans",
    "scopeSpans",
    "spans",
    "span",
    ("traceId", "spanId", "parentSpanId"),
)
LOGS = _Shape(
    logs_service_pb2.ExportLogsServiceRequest,
    logs_pb2.ResourceLogs,
    logs_pb2.ScopeLogs,
    logs_pb2.LogRecord,
    "resource_logs",
    "scope_logs",
    "log_records",
    "resourceLogs",
    "scopeLogs",
    "logRecords",
    "log record",
    ("traceId", "spanId"),
)


GZIP_MEMBERS = 64  # members one body may hold (producers send one)
_GZIP_PIECE = 64 * 1024


def gunzip(body: bytes, limit: int) -> bytes:
    """Decompress a gzip body, refusing to inflate past `limit` bytes (no zip bombs).

    A gzip stream may hold several members, one after the other (RFC 1952 2.2): they are one
    body, and every member counts against the limit. Zero bytes after the last member are
    padding (as gzip(1) reads them); anything else there is an error, never ignored. The input
    is fed a piece at a time and the members are counted: zlib copies what follows a member,
    and 400,000 empty members in 8 MiB would otherwise take minutes (quadratic).
    """
    view = memoryview(body)
    parts: list[bytes] = []
    total = pos = 0
    for _ in range(GZIP_MEMBERS):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while not inflater.eof:
            if pos >= len(view):
                raise BadRequest("gzip body is truncated")
            piece = view[pos : pos + _GZIP_PIECE]
            pos += len(piece)
            try:
                part = inflater.decompress(piece, limit + 1 - total)  # never 0: "no limit"
            except zlib.error as exc:
                raise BadRequest(f"body is not valid gzip: {exc}") from exc
            total += len(part)
            if total > limit:
                raise TooLarge(f"decompressed body is over the limit of {limit} bytes")
            parts.append(part)
        pos -= len(inflater.unused_data)  # the start of the next member
        if pos == len(view):
            return b"".join(parts)
        if view[pos] == 0:  # padding: zeros to the end, or an error
            if view[pos:].tobytes().strip(b"\0"):
                raise BadRequest("body is not valid gzip: bytes after the zero padding")
            return b"".join(parts)
    raise BadRequest(f"gzip body has more than {GZIP_MEMBERS} members")


# --- protobuf -------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise BadRequest("truncated protobuf (a varint runs past the end of the body)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise BadRequest("malformed protobuf (varint longer than 10 bytes)")


def _fields(buf: bytes) -> list[tuple[int, bytes | None]]:
    """(field number, payload of a length-delimited field or None) for each field of a message."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise BadRequest("malformed protobuf (field number 0)")
        if wire == 0:
            _, pos = _varint(buf, pos)
            out.append((number, None))
        elif wire == 1:
            pos += 8
            out.append((number, None))
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise BadRequest(
                    f"truncated protobuf (field {number} declares {size} bytes, {end - pos} remain)"
                )
            out.append((number, buf[pos : pos + size]))
            pos += size
        elif wire == 5:
            pos += 4
            out.append((number, None))
        else:
            raise BadRequest(f"malformed protobuf (wire type {wire} in field {number})")
        if pos > end:
            raise BadRequest("truncated protobuf (a fixed-size field runs past the end)")
    return out


ECHO_CHARS = 120
MESSAGE_BYTES = 1024


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was. Every piece of a request echoed
    in a message goes through here: a 5 MiB span name must not make a 5 MiB answer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} chars)"


def client_message(text: str) -> str:
    """A message for a client, at most MESSAGE_BYTES of UTF-8. gRPC sends error messages in
    trailers, percent-encoded and again in the status details, and clients refuse trailers
    over 8 KiB: past that the client would see a transport error instead of our reason."""
    data = text.encode()
    if len(data) <= MESSAGE_BYTES:
        return text
    return data[: MESSAGE_BYTES - 40].decode("utf-8", "ignore") + f"... ({len(data)} bytes)"


def _why(exc: Exception) -> str:
    return clip(str(exc) or type(exc).__name__, 200)


def _lazy_request_type() -> type[Message]:
    """A request whose items stay bytes: request(1) -> group(2) -> scope group(2) -> items.

    Both signals nest with these field numbers. Parsing it counts a request's items without
    building them: 4 million empty spans fit in 8 MiB, and building them took 700 MiB and
    seconds of CPU (then Python objects for every one while flattening).
    """
    fdp = descriptor_pb2.FileDescriptorProto(name="spanscore_lazy_otlp.proto", package="lazy")
    scope = fdp.message_type.add(name="ScopeGroup")
    scope.field.add(name="items", number=2, type=_BYTES, label=_REPEATED)
    group = fdp.message_type.add(name="Group")
    group.field.add(
        name="scopes", number=2, type=_MESSAGE, label=_REPEATED, type_name=".lazy.ScopeGroup"
    )
    request = fdp.message_type.add(name="Request")
    request.field.add(
        name="groups", number=1, type=_MESSAGE, label=_REPEATED, type_name=".lazy.Group"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    lazy: type[Message] = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("lazy.Request")
    )
    return lazy


_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_LazyRequest = _lazy_request_type()


class TooManyItems(BadRequest):
    """More spans or log records in one request than `max_items` (not worth a retry)."""

    def __init__(self, shape: _Shape, count: int | str, max_items: int) -> None:
        super().__init__(
            f"the request has {count} {shape.noun}s, over the limit of {max_items} per "
            "request: send smaller batches"
        )


def _check_item_count(body: bytes, shape: _Shape, max_items: int | None) -> None:
    if max_items is None:
        return
    lazy = _LazyRequest()
    try:
        lazy.ParseFromString(body)
    except DecodeError:
        return  # broken framing: the item-by-item path below counts as it goes
    count = sum(len(s.items) for g in lazy.groups for s in g.scopes)
    if count > max_items:
        raise TooManyItems(shape, count, max_items)


def decode_protobuf(body: bytes, shape: _Shape, max_items: int | None = None) -> Decoded:
    """Decode a protobuf request; `max_items` bounds the spans or log records it may hold."""
    _check_item_count(body, shape, max_items)
    request = shape.request()
    try:
        request.ParseFromString(body)
        return Decoded(list(getattr(request, shape.groups_field)))
    except DecodeError as exc:
        first_error = _why(exc)
    # The framing may still be sound: keep every item that parses on its own.
    decoded = Decoded([])
    top = _fields(body)
    if not top and body:
        raise BadRequest(f"body is not an OTLP protobuf request: {first_error}")
    index = 0
    for number, payload in top:
        if number != 1 or payload is None:
            continue  # unknown fields are ignored, as protobuf would
        group = shape.group()
        try:
            group.ParseFromString(payload)
            decoded.groups.append(group)
            index += sum(
                len(getattr(s, shape.items_field)) for s in getattr(group, shape.scopes_field)
            )
            if max_items is not None and index > max_items:
                raise TooManyItems(shape, f"over {index}", max_items)
            continue
        except DecodeError:
            group = shape.group()
        for g_number, g_payload in _fields(payload):
            if g_payload is None:
                continue
            if g_number == 1:  # resource
                try:
                    group.resource.ParseFromString(g_payload)
                except DecodeError as exc:
                    decoded.problems.append(
                        f"resource attributes unreadable, kept the {shape.noun}s: {_why(exc)}"
                    )
                    group.resource.CopyFrom(resource_pb2.Resource())
            elif g_number == 2:  # scope group
                scope_group = getattr(group, shape.scopes_field).add()
                for s_number, s_payload in _fields(g_payload):
                    if s_payload is None:
                        continue
                    if s_number == 1:
                        try:
                            scope_group.scope.ParseFromString(s_payload)
                        except DecodeError:
                            scope_group.scope.CopyFrom(common_pb2.InstrumentationScope())
                    elif s_number == 2:
                        item = shape.item()
                        try:
                            item.ParseFromString(s_payload)
                            getattr(scope_group, shape.items_field).append(item)
                        except DecodeError as exc:
                            decoded.rejected += 1
                            decoded.skipped.append(index)
                            decoded.problems.append(
                                f"{shape.noun} {index}: not valid protobuf ({_why(exc)})"
                            )
                        index += 1
                        if max_items is not None and index > max_items:
                            raise TooManyItems(shape, f"over {index}", max_items)
                    elif s_number == 3:
                        scope_group.schema_url = s_payload.decode("utf-8", "replace")
            elif g_number == 3:
                group.schema_url = g_payload.decode("utf-8", "replace")
        decoded.groups.append(group)
    if not decoded.groups and not decoded.rejected:
        raise BadRequest(f"body is not an OTLP protobuf request: {first_error}")
    return decoded


# --- OTLP/JSON ------------------------------------------------------------------------------


def _hex_to_b64(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a hex string, got {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not hex") from None
    return base64.b64encode(raw).decode()


def _fix_ids(obj: dict[str, Any], names: tuple[str, ...]) -> None:
    """OTLP/JSON carries ids as hex; protobuf's JSON mapping wants base64."""
    for name in names:
        snake = name[0] + "".join("_" + c.lower() if c.isupper() else c for c in name[1:])
        for key in (name, snake):
            if key in obj and obj[key] not in ("", None):
                try:
                    obj[key] = _hex_to_b64(obj[key])
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None


def _parse_json_item(item: Any, message: Message, shape: _Shape) -> None:
    if not isinstance(item, dict):
        raise ValueError(f"expected an object, got {type(item).__name__}")
    _fix_ids(item, shape.id_fields)
    for link in item.get("links") or []:
        if isinstance(link, dict):
            _fix_ids(link, ("traceId", "spanId"))
    json_format.ParseDict(item, message, ignore_unknown_fields=True)


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake))


def _or_empty(value: Any) -> Any:
    """A missing or null list is empty; anything else is checked by the caller (`{}` is not a
    list and is refused, not read as empty)."""
    return [] if value is None else value


def _json_item_count(groups: list[Any], shape: _Shape) -> int:
    count = 0
    for g in groups:
        scopes = _get(g, shape.json_scopes, shape.scopes_field) if isinstance(g, dict) else None
        for s in scopes if isinstance(scopes, list) else ():
            items = _get(s, shape.json_items, shape.items_field) if isinstance(s, dict) else None
            count += len(items) if isinstance(items, list) else 0
    return count


def decode_json(body: bytes, shape: _Shape, max_items: int | None = None) -> Decoded:
    """Decode an OTLP/JSON request; `max_items` bounds the spans or log records it may hold."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON (UTF-8 required): {exc}") from exc
    if not isinstance(doc, dict):
        raise BadRequest(f"body must be a JSON object with {shape.json_groups!r}")
    decoded = Decoded([])
    groups = _or_empty(_get(doc, shape.json_groups, shape.groups_field))
    if not isinstance(groups, list):
        raise BadRequest(f"{shape.json_groups!r} must be an array")
    if max_items is not None and (count := _json_item_count(groups, shape)) > max_items:
        raise TooManyItems(shape, count, max_items)  # before any item is built
    index = 0
    for g_i, g in enumerate(groups):
        if not isinstance(g, dict):
            raise BadRequest(f"{shape.json_groups}[{g_i}] must be an object")
        group = shape.group()
        try:
            if g.get("resource") is not None:
                json_format.ParseDict(g["resource"], group.resource, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            raise BadRequest(f"{shape.json_groups}[{g_i}].resource: {_why(exc)}") from exc
        if isinstance(g.get("schemaUrl"), str):
            group.schema_url = g["schemaUrl"]
        scopes = _or_empty(_get(g, shape.json_scopes, shape.scopes_field))
        if not isinstance(scopes, list):
            raise BadRequest(f"{shape.json_groups}[{g_i}].{shape.json_scopes} must be an array")
        for s_i, s in enumerate(scopes):
            where = f"{shape.json_groups}[{g_i}].{shape.json_scopes}[{s_i}]"
            if not isinstance(s, dict):
                raise BadRequest(f"{where} must be an object")
            scope_group = getattr(group, shape.scopes_field).add()
            try:
                if s.get("scope") is not None:
                    json_format.ParseDict(s["scope"], scope_group.scope, ignore_unknown_fields=True)
            except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
                raise BadRequest(f"{where}.scope: {_why(exc)}") from exc
            if isinstance(s.get("schemaUrl"), str):
                scope_group.schema_url = s["schemaUrl"]
            items = _or_empty(_get(s, shape.json_items, shape.items_field))
            if not isinstance(items, list):
                raise BadRequest(f"{where}.{shape.json_items} must be an array")
            container = getattr(scope_group, shape.items_field)
            for i_i, item in enumerate(items):
                message = shape.item()
                try:
                    _parse_json_item(item, message, shape)
                    container.append(message)
                except Exception as exc:  # whatever one item does, it rejects only itself
                    decoded.rejected += 1
                    decoded.skipped.append(index)
                    decoded.problems.append(
                        f"{shape.noun} {index} ({where}.{shape.json_items}[{i_i}]): {_why(exc)}"
                    )
                index += 1
        decoded.groups.append(group)
    return decoded


def response_bytes(shape: _Shape, rejected: int, message: str, as_json: bool) -> bytes:
    """The Export*ServiceResponse, with partial success when something was rejected or changed."""
    if shape is TRACES:
        response: Any = trace_service_pb2.ExportTraceServiceResponse()
        if rejected or message:
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = message
    else:
        response = logs_service_pb2.ExportLogsServiceResponse()
        if rejected or message:
            response.partial_success.rejected_log_records = rejected
            response.partial_success.error_message = message
    if as_json:
        return str(json_format.MessageToJson(response, indent=None)).encode()
    return bytes(response.SerializeToString())


Decoder = Callable[[bytes, _Shape, int | None], Decoded]
