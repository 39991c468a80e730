"""A minimal OTLP/gRPC trace server in Python and DuckDB: what `bench/ingest.py` compares the
collector with (issue 43: the collector at 3 times its spans/s or more).

It is what one writes first, with the same libraries the collector uses: grpcio's generated
`TraceService` servicer on a thread pool; each export, parsed by grpcio, becomes one row per
span (ids as hex, times, name, kind, status, service name, attributes, resource and events as
JSON), is appended to a DuckDB table from an Arrow table in a transaction of its own, and is
answered after its commit (acknowledged means stored, as in the collector). No worker
processes, no group commit, no conventions, no limits, no deduplication.

    python bench/_minimal_otlp.py --port 4317 --db spans.duckdb

It prints `ready` on standard output once it listens, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import base64
import signal
import sys
import threading
from concurrent import futures
from typing import Any

import duckdb
import grpc
import orjson
import pyarrow as pa
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "status_code",
    "status_message",
    "service_name",
    "attributes",
    "resource",
    "events",
)
TABLE = """CREATE TABLE IF NOT EXISTS spans (
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR, kind INTEGER,
    start_time_unix_nano BIGINT, end_time_unix_nano BIGINT, status_code INTEGER,
    status_message VARCHAR, service_name VARCHAR, attributes JSON, resource JSON, events JSON
)"""


def value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.lock = threading.Lock()

    def Export(  # noqa: N802 (grpcio's name)
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        rows: list[tuple[Any, ...]] = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            service = resource.get("service.name")
            resource_json = orjson.dumps(resource).decode()
            for ss in rs.scope_spans:
                for span in ss.spans:
                    events = [
                        {
                            "name": e.name,
                            "time_unix_nano": e.time_unix_nano,
                            "attributes": attributes(e.attributes),
                        }
                        for e in span.events
                    ]
                    rows.append(
                        (
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex() or None,
                            span.name,
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            span.status.code,
                            span.status.message or None,
                            service,
                            orjson.dumps(attributes(span.attributes)).decode(),
                            resource_json,
                            orjson.dumps(events).decode() if events else None,
                        )
                    )
        if rows:
            table = pa.table(dict(zip(COLUMNS, zip(*rows, strict=True), strict=True)))
            with self.lock:  # one connection: one transaction at a time
                cursor = self.con.cursor()
                try:
                    cursor.register("incoming", table)
                    cursor.execute("INSERT INTO spans SELECT * FROM incoming")
                finally:
                    cursor.close()
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="the DuckDB database file")
    parser.add_argument("--threads", type=int, default=8, help="gRPC handler threads")
    args = parser.parse_args()
    con = duckdb.connect(args.db)
    con.execute(TABLE)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=args.threads),
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
    )
    add_servicer = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
    add_servicer(TraceService(con), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.wait(0.5):
        pass
    server.stop(grace=5).wait()
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
