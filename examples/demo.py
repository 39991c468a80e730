"""The demo: a collector on an embedded lake, the example agent sending real OTLP, then SQL."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

DEMO_QUERIES = [
    (
        "Conversations",
        """SELECT conversation_id, span_count, tool_call_count AS tools, error_count AS errors,
                  first_user_message
           FROM conversations ORDER BY start_time""",
    ),
    (
        "Tool calls by tool",
        """SELECT tool_name, count(*) AS calls, count(error) AS errors,
                  round(avg(latency_ms), 3) AS avg_ms
           FROM tool_calls GROUP BY tool_name ORDER BY calls DESC, tool_name""",
    ),
    (
        "Policy check: cancel_order without an earlier successful verify_customer",
        """SELECT c.conversation_id, c.step_index AS cancel_step, c.arguments
           FROM tool_calls c
           WHERE c.tool_name = 'cancel_order'
             AND NOT EXISTS (
                 SELECT 1 FROM tool_calls v
                 WHERE v.conversation_id = c.conversation_id
                   AND v.tool_name = 'verify_customer' AND v.error IS NULL
                   AND v.step_index < c.step_index)""",
    ),
]


def _reset(lake: Path) -> None:
    if not lake.exists():
        return
    if not (lake / "catalog.sqlite").exists() and any(lake.iterdir()):
        raise RuntimeError(f"{lake} exists and is not a spanscore lake; pass another --lake")
    shutil.rmtree(lake)


def run_demo(lake: Path, echo: Callable[[str], object] = print) -> None:
    import io

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from spanscore import lake as lakes
    from spanscore.cli.query import write_rows
    from spanscore.collector import Collector, load_config

    from .customer_service import Store
    from .customer_service.scripted import ScriptedAgent, conversations

    started = time.monotonic()
    _reset(lake)
    config = load_config(
        overrides={"lake": str(lake), "grpc_port": 0, "http_port": 0, "maintenance_interval_s": 0}
    )
    echo(f"1. Collector on an embedded lake at {lake}/")
    with Collector(config) as collector:
        ports = f"OTLP/gRPC 127.0.0.1:{collector.grpc_port}, OTLP/HTTP :{collector.http_port}"
        echo("   " + ports)
        provider = TracerProvider(resource=Resource.create({"service.name": "customer-service"}))
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        agent = ScriptedAgent(Store(), provider.get_tracer("spanscore.examples.customer_service"))
        plans = conversations()
        echo(f"2. The example customer-service agent runs {len(plans)} conversations")
        for plan in plans:
            agent.run(plan)
            flag = "  (breaks policy: " + plan.note + ")" if plan.breaks_policy else ""
            echo(f"   {plan.conversation_id:<22} {plan.scenario_id}{flag}")
        if not provider.force_flush(30_000):
            raise RuntimeError("the exporter could not deliver the spans within 30s")
        provider.shutdown()
        stored = collector.stats.get("spans_stored")
        echo(f"   {stored} spans exported over OTLP/gRPC and committed to the lake")
    con = lakes.connect(lake)
    try:
        for n, (title, sql) in enumerate(DEMO_QUERIES, start=3):
            echo(f"\n{n}. {title}")
            echo("   $ spanscore sql --lake " + str(lake) + ' "' + " ".join(sql.split()) + '"')
            rows = list(lakes.query(con, sql))
            out = io.StringIO()
            names = list(rows[0]) if rows else [d[0] for d in (con.description or [])]
            write_rows(iter(rows), names, "table", out)
            echo("   " + out.getvalue().rstrip("\n").replace("\n", "\n   "))
    finally:
        con.close()
    echo(
        f"\nDone in {time.monotonic() - started:.1f}s. The lake stays at {lake}/ for your own SQL."
    )
