"""The OTLP/gRPC front end: the trace and logs `Export` services, over the shared export path
(and the metrics one, answered and not stored: `metrics_refused`).

`start_grpc` binds the services (TLS when a certificate is configured) to a private address
(the public port is `grpc_port.GrpcPort`'s, which relays gRPC here and answers HTTP/1 itself)
and starts gRPC's own thread pool of `max_concurrent_requests` threads. gRPC receives each
request whole (up to `max_request_bytes`; at most twice `max_concurrent_requests` at once,
beyond which gRPC itself answers RESOURCE_EXHAUSTED, which exporters retry); the bearer token
is checked, then the request goes to `Ingest`, which answers once its spans are committed.

A refusal is a gRPC status with `google.rpc.Status` details, and `RetryInfo` for the retryable
ones, as OTLP exporters expect to read the delay before retrying.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from . import metrics_refused, otlp
from .admission import Admission, Body, Outcome
from .config import CollectorConfig
from .ingest import Ingest
from .stats import Stats


def start_grpc(
    config: CollectorConfig,
    admission: Admission,
    stats: Stats,
    ingest: Ingest,
    address: str | None = None,
) -> tuple[grpc.Server, int]:
    """The started gRPC server listening on `address` (a `grpc_port.private_address`), or on
    the gRPC port itself when None; and the port it listens on (meaningless on a private
    address)."""
    cfg = config
    options = [
        ("grpc.max_receive_message_length", cfg.max_request_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=cfg.max_concurrent_requests, thread_name_prefix="spanscore-grpc"
        ),
        options=options,
        # Bounds the request bodies gRPC holds (each up to max_request_bytes); beyond it
        # gRPC answers RESOURCE_EXHAUSTED, which exporters retry.
        maximum_concurrent_rpcs=cfg.max_concurrent_requests * 2,
    )
    handlers = {
        "opentelemetry.proto.collector.trace.v1.TraceService": _export_method(
            otlp.TRACES, admission, stats, ingest
        ),
        "opentelemetry.proto.collector.logs.v1.LogsService": _export_method(
            otlp.LOGS, admission, stats, ingest
        ),
    }
    handlers[metrics_refused.METRICS_SERVICE] = _metrics_method(admission, stats)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(service, {"Export": handler})
            for service, handler in handlers.items()
        ]
    )
    if address is None:
        address = f"{_bracket(cfg.host)}:{cfg.grpc_port}"
    if cfg.tls_cert is not None and cfg.tls_key is not None:
        creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())])
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind OTLP/gRPC to {address}")
    server.start()
    return server, port


def _export_method(
    shape: otlp._Shape, admission: Admission, stats: Stats, ingest: Ingest
) -> grpc.RpcMethodHandler:
    def export(request: Body, context: grpc.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata())
        if not admission.authorized(_text(metadata.get("authorization"))):
            stats.add("refused_unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        outcome = ingest(shape, request, as_json=False)
        if outcome.code == code_pb2.OK:
            assert outcome.body is not None
            return outcome.body
        context.abort_with_status(_grpc_status(outcome))
        raise AssertionError("unreachable")  # abort_with_status raises

    # Wrapped, so that the bytes can be let go once decoded (see Body).
    return grpc.unary_unary_rpc_method_handler(export, request_deserializer=Body)


def _metrics_method(admission: Admission, stats: Stats) -> grpc.RpcMethodHandler:
    """Metrics are answered, not stored (`metrics_refused`)."""

    def export(request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata())
        if not admission.authorized(_text(metadata.get("authorization"))):
            stats.add("refused_unauthenticated")
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            answer = metrics_refused.answer(request, as_json=False)
        except otlp.BadRequest as exc:
            stats.add("refused_bad_request")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        stats.add("metrics_exports_not_stored")
        return answer

    return grpc.unary_unary_rpc_method_handler(export)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


class _GrpcStatus(grpc.Status):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[Any, ...]):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing


def _grpc_status(outcome: Outcome) -> grpc.Status:
    """A gRPC status with google.rpc.Status details; RetryInfo for the retryable refusals."""
    status = status_pb2.Status(code=outcome.code, message=outcome.message)
    if outcome.retry_after_s is not None:
        info = error_details_pb2.RetryInfo(
            retry_delay=duration_pb2.Duration(seconds=int(outcome.retry_after_s))
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status.details.append(detail)
    return _GrpcStatus(
        _GRPC_CODES[outcome.code],
        outcome.message,
        (("grpc-status-details-bin", status.SerializeToString()),),
    )
