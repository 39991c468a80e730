"""A lake of the example customer-service agent's conversations, recorded for real: the agent
(the `openai` tool loop, instrumented) talks to the local scripted model over HTTP, and its
spans go over OTLP to a real collector writing the lake on disk."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def recording(lake: Path) -> Iterator[Any]:
    """A collector writing `lake`, and this process instrumented to export to it; yields the
    tracer provider. Every span is flushed and the collector stopped on the way out."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    import spanscore.instrumentation
    from spanscore.collector import Collector, load_config

    config = load_config(
        overrides={
            "lake": str(lake),
            "grpc_port": 0,
            "http_port": 0,
            "maintenance_interval_s": 0,
            "workers": 0,
        },
        environ={},
    )
    with Collector(config) as collector:
        provider = TracerProvider(resource=Resource.create({"service.name": "customer-service"}))
        spanscore.instrumentation.instrument(
            tracer_provider=provider,
            endpoint=f"http://127.0.0.1:{collector.http_port}",
            protocol="http/protobuf",
        )
        try:
            yield provider
        finally:
            spanscore.instrumentation.uninstrument()  # flushes the spans
            provider.shutdown()


def run_plans(plans: Sequence[Any], store: Callable[[], Any] | None = None) -> None:
    """Each plan's conversation, by the example agent over the scripted model (inside
    `recording`); `store`: a fresh store per conversation (default: the example's)."""
    import openai

    from spanscore.examples.customer_service import Store
    from spanscore.examples.customer_service.openai_loop import run_conversation
    from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy

    with ScriptedLLM(ScriptedPolicy(plans)) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        for plan in plans:
            run_conversation(client, (store or Store)(), plan)


def record_example_lake(lake: Path, plans: Sequence[Any]) -> None:
    """`lake` holding the plans' conversations."""
    with recording(lake):
        run_plans(plans)
