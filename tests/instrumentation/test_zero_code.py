"""Instrumenting with no code change: agents that import nothing from spanscore, run under
`opentelemetry-instrument` with environment variables only (endpoint, protocol, headers, service
name, resource attributes, SPANSCORE_CONVERSATION_CONTEXT), against a real `spanscore serve`
that requires a bearer token, and the local ScriptedLLM. Each app runs a second time under the
one-line `spanscore.instrumentation.instrument()` (zero_code/explicit.py beside this file), with
the same variables; the two conversations must rebuild from the lake the same (ids and times
aside).

The apps are in zero_code/ beside this file. The in-process tests at the end cover the
instrumentors' contract: dependencies, entry points, repeatable instrument() / uninstrument()."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from spanscore.evaluation import load_trajectory, open_lake
from spanscore.examples.customer_service.scripted import Conversation, Turn
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy

from ..support.collector import ServeProcess
from ..support.lake import query
from ..support.polling import wait_for
from .zero_code import shop

APPS = Path(__file__).parent / "zero_code"
OPENTELEMETRY_INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
TOKEN = "zero-code-test-token"
SERVICE = "zero-code-agent"
REPLY_1 = "ORD-1001 has shipped; I could not find ORD-9999."
REPLY_2 = "The mechanical keyboard is $89."
PLAN = Conversation(
    "zero-code",
    "zero_code",
    [
        Turn(  # two parallel calls of the same tool, one of which fails
            shop.TURN_1,
            [[("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})]],
            REPLY_1,
        ),
        Turn(shop.TURN_2, [[("search_products", shop.SEARCH)]], REPLY_2),
    ],
)
# What differs between two runs of the same conversation: ids (the model's call ids included)
# and times.
IGNORED = {"conversation_id", "call_id", "span_id", "trace_id", "start_time", "end_time"}
IGNORED_TIMES = {"latency_ms"}


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    """`spanscore serve` on a lake of its own, requiring a bearer token."""
    where = tmp_path_factory.mktemp("zero-code")
    lake = where / "lake"
    process = ServeProcess(lake, where / "serve.log", env={"SPANSCORE_TOKEN": TOKEN})
    process.start()
    try:
        yield process, lake
    finally:
        process.stop()


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(ScriptedPolicy([PLAN])) as server:
        yield server


def environment(collector: ServeProcess, **extra: str) -> dict[str, str]:
    """The app's environment: OpenTelemetry's standard variables and spanscore's own, nothing
    else of this process's OTEL_* / SPANSCORE_* ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANSCORE_"))}
    env.update(
        OTEL_SERVICE_NAME=SERVICE,
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=zero-code-test",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",  # the collector takes traces and logs
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.http_port}",
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer%20{TOKEN}",
        SPANSCORE_CONVERSATION_CONTEXT="true",
    )
    env.update(extra)
    return env


def run_app(
    mode: str, app: str, llm: ScriptedLLM, conversation_id: str, env: dict[str, str], *args: str
) -> str:
    """Run an app to its end (its spans flushed as the process exits); its stderr."""
    if mode == "zero-code":
        command = [str(OPENTELEMETRY_INSTRUMENT), sys.executable]
    else:
        command = [sys.executable, str(APPS / "explicit.py")]
    done = subprocess.run(
        [*command, str(APPS / app), llm.base_url, conversation_id, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert not llm.errors, llm.errors
    return done.stderr


def normalised(value: Any) -> Any:
    """A trajectory's dump without what differs between two runs."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in IGNORED | IGNORED_TIMES}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def span_count(lake: Path, conversation_id: str) -> int:
    rows = query(lake, "SELECT count(*) FROM spans WHERE conversation_id = ?", [conversation_id])
    return int(rows[0][0])


def rebuilt(lake: Path, conversation_id: str) -> dict[str, Any]:
    trajectory = load_trajectory(open_lake(lake), conversation_id)
    assert trajectory is not None, f"no conversation {conversation_id} in the lake"
    dump: dict[str, Any] = normalised(trajectory.model_dump(mode="json"))
    # conversation-specific attribute values (the id itself) aside
    dump["attributes"] = {k: v for k, v in dump["attributes"].items() if v != conversation_id}
    return dump


def both_ways(
    app: str, serve: tuple[ServeProcess, Path], llm: ScriptedLLM, name: str, *args: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The app's conversation run explicitly and with no code change; both rebuilt."""
    collector, lake = serve
    explicit, zero = f"{name}-explicit", f"{name}-zero-code"
    run_app("explicit", app, llm, explicit, environment(collector), *args)
    run_app("zero-code", app, llm, zero, environment(collector), *args)
    # Both runs ended with their spans sent; the lake has them once the counts settle equal.
    wait_for(lambda: 0 < span_count(lake, explicit) == span_count(lake, zero), timeout=60)
    return rebuilt(lake, explicit), rebuilt(lake, zero)


def tool_calls(trajectory: dict[str, Any]) -> list[tuple[int, str, Any, Any, Any]]:
    return [
        (turn["index"], step["name"], step["arguments"], step["result"], step["error"])
        for turn in trajectory["turns"]
        for step in turn["steps"]
        if step["kind"] == "tool_call"
    ]


def assert_the_planned_conversation(trajectory: dict[str, Any]) -> None:
    """The turns and tool calls the plan scripted (so that two empty runs do not agree)."""
    assert [(t["user_message"], t["final_response"]) for t in trajectory["turns"]] == [
        (shop.TURN_1, REPLY_1),
        (shop.TURN_2, REPLY_2),
    ]
    calls = [(turn, name, arguments) for turn, name, arguments, *_ in tool_calls(trajectory)]
    assert calls == [
        (0, "get_order", {"order_id": "ORD-1001"}),
        (0, "get_order", {"order_id": "ORD-9999"}),
        (1, "search_products", shop.SEARCH),
    ]
    assert trajectory["service_name"] == SERVICE


# --- the apps, both ways -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_client_app(serve: tuple[ServeProcess, Path], llm: ScriptedLLM, api: str) -> None:
    explicit, zero = both_ways("openai_app.py", serve, llm, f"openai-{api}", api)
    assert_the_planned_conversation(zero)
    failed = tool_calls(zero)[1]
    assert json.dumps(failed[3]) == json.dumps({"error": shop.MISSING}) or failed[4]
    assert zero == explicit


@pytest.mark.slow
def test_mcp_tools_app(serve: tuple[ServeProcess, Path], llm: ScriptedLLM) -> None:
    pytest.importorskip("mcp")
    explicit, zero = both_ways("mcp_app.py", serve, llm, "mcp")
    assert_the_planned_conversation(zero)
    failed = tool_calls(zero)[1]
    assert failed[4] is not None  # the isError result: the MCP shim's tool span says so
    assert zero == explicit


@pytest.mark.slow
def test_openai_agents_app(serve: tuple[ServeProcess, Path], llm: ScriptedLLM) -> None:
    pytest.importorskip("agents")
    explicit, zero = both_ways("agents_app.py", serve, llm, "agents")
    assert_the_planned_conversation(zero)
    assert zero["agent_name"] == "shop-assistant"
    assert zero == explicit


@pytest.mark.slow
def test_langchain_app(serve: tuple[ServeProcess, Path], llm: ScriptedLLM) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("langchain_openai")
    explicit, zero = both_ways("langchain_app.py", serve, llm, "langchain")
    assert_the_planned_conversation(zero)
    assert zero == explicit


# --- the standard variables: what turns things off, the other protocol ------------------------


def wait_for_spans(lake: Path, sql_where: str, params: list[Any], count: int) -> None:
    sql = f"SELECT count(*) FROM spans WHERE {sql_where}"
    wait_for(lambda: query(lake, sql, params) == [(count,)], timeout=60)


@pytest.mark.slow
def test_disabled_instrumentations_are_skipped(
    serve: tuple[ServeProcess, Path], llm: ScriptedLLM
) -> None:
    """OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names our entry points: without `spanscore_mcp`
    the model calls are recorded, the MCP tool calls not."""
    collector, lake = serve
    env = environment(collector, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="spanscore_mcp")
    run_app("zero-code", "mcp_app.py", llm, "mcp-disabled", env)
    wait_for_spans(lake, "conversation_id = ? AND operation = 'chat'", ["mcp-disabled"], 4)
    rows = query(
        lake,
        "SELECT count(*) FILTER (WHERE operation = 'execute_tool'), "
        "count(*) FILTER (WHERE scope_name = 'spanscore.instrumentation.mcp') "
        "FROM spans WHERE conversation_id = ?",
        ["mcp-disabled"],
    )
    assert rows == [(0, 0)]  # (the MCP SDK's own "MCP send ..." spans are there, no tool calls)


@pytest.mark.slow
def test_without_the_conversation_variable_no_conversation_is_stamped(
    serve: tuple[ServeProcess, Path], llm: ScriptedLLM
) -> None:
    """SPANSCORE_CONVERSATION_CONTEXT is what puts the baggage's conversation id on the spans
    in this mode: without it, each model call is a conversation of its own (its trace's)."""
    collector, lake = serve
    env = environment(collector, OTEL_SERVICE_NAME="unstamped-agent")
    del env["SPANSCORE_CONVERSATION_CONTEXT"]
    run_app("zero-code", "openai_app.py", llm, "unstamped", env)
    wait_for_spans(lake, "service_name = ?", ["unstamped-agent"], 4)
    assert span_count(lake, "unstamped") == 0


@pytest.mark.slow
def test_otlp_grpc(serve: tuple[ServeProcess, Path], llm: ScriptedLLM) -> None:
    collector, lake = serve
    env = environment(
        collector,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.grpc_port}",
    )
    run_app("zero-code", "openai_app.py", llm, "openai-grpc", env, "responses")
    wait_for_spans(lake, "conversation_id = ?", ["openai-grpc"], 4)
    rows = query(
        lake,
        "SELECT DISTINCT resource->>'$.\"deployment.environment\"', service_name FROM spans "
        "WHERE conversation_id = ?",
        ["openai-grpc"],
    )
    assert rows == [("zero-code-test", SERVICE)]


# --- the instrumentors' contract, in this process ----------------------------------------------

SHIMS = {
    "spanscore_openai_agents": ("openai_agents", "OpenAIAgentsInstrumentor", "openai-agents"),
    "spanscore_openai": ("openai_client", "OpenAIInstrumentor", "openai"),
    "spanscore_langchain": ("langchain", "LangChainInstrumentor", "langchain-core"),
    "spanscore_mcp": ("mcp", "MCPInstrumentor", "mcp"),
}


def test_each_shim_is_an_entry_point_with_its_dependencies() -> None:
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

    found = {
        e.name: e
        for e in entry_points(group="opentelemetry_instrumentor")
        if "spanscore" in e.value
    }
    assert sorted(found) == sorted([*SHIMS, "spanscore_conversation"])
    for name, (module, cls, distribution) in SHIMS.items():
        instrumentor = found[name].load()
        assert instrumentor.__module__ == f"spanscore.instrumentation.{module}"
        assert instrumentor.__name__ == cls
        assert issubclass(instrumentor, BaseInstrumentor)
        (requirement,) = instrumentor().instrumentation_dependencies()
        assert requirement.startswith(f"{distribution} >= ")
    conversation = found["spanscore_conversation"].load()
    assert issubclass(conversation, BaseInstrumentor)
    assert list(conversation().instrumentation_dependencies()) == []


@pytest.mark.parametrize("name", sorted(SHIMS))
def test_instrument_and_uninstrument_repeat(
    name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `opentelemetry-instrument` calls it (no arguments: the global provider, the content
    policy from the environment), twice, then undone twice, then again."""
    from spanscore.instrumentation import _content

    monkeypatch.setenv("SPANSCORE_CAPTURE_TOOL_ARGUMENTS", "false")
    (entry,) = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == name]
    instrumentor = entry.load()()
    try:
        assert instrumentor.instrument() is True
        assert instrumentor.is_instrumented
        assert _content.content_policy().tool_arguments is False
        with caplog.at_level(logging.WARNING):
            assert instrumentor.instrument() is True
        assert "already instrumented" in caplog.text
        instrumentor.uninstrument()
        assert not instrumentor.is_instrumented
        instrumentor.uninstrument()  # does nothing
        assert instrumentor.instrument(tracer_provider=TracerProvider()) is True
    finally:
        instrumentor.uninstrument()
        _content.set_content_policy(_content.ContentPolicy())
    assert not instrumentor.is_instrumented


def test_uninstrument_leaves_a_later_wrapper_in_place() -> None:
    """Another instrumentation wrapped `create` after ours: uninstrumenting ours keeps theirs,
    and ours, left under it, records nothing more."""
    import functools

    from openai.resources.chat.completions import Completions
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from spanscore.instrumentation.openai_client import OpenAIInstrumentor

    original = Completions.__dict__["create"]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert OpenAIInstrumentor().instrument(tracer_provider=provider)
    ours = Completions.__dict__["create"]
    seen: list[str] = []

    @functools.wraps(ours)
    def theirs(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append("theirs")
        return ours(self, *args, **kwargs)

    Completions.create = theirs  # type: ignore[method-assign]
    try:
        OpenAIInstrumentor().uninstrument()
        assert Completions.__dict__["create"] is theirs
        with ScriptedLLM(ScriptedPolicy([PLAN])) as server:
            import openai

            client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
            client.chat.completions.create(
                model=shop.MODEL, messages=[{"role": "user", "content": shop.TURN_2}]
            )
        assert seen == ["theirs"]
        assert exporter.get_finished_spans() == ()
    finally:
        Completions.create = original  # type: ignore[method-assign]


def test_the_conversation_instrumentor_follows_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from spanscore.instrumentation import ConversationInstrumentor, ConversationSpanProcessor

    def stampers(provider: TracerProvider) -> list[Any]:
        processors = provider._active_span_processor._span_processors
        return [p for p in processors if isinstance(p, ConversationSpanProcessor)]

    start = threading.Thread.start
    provider = TracerProvider()
    monkeypatch.delenv("SPANSCORE_CONVERSATION_CONTEXT", raising=False)
    assert ConversationInstrumentor().instrument(tracer_provider=provider) is False
    assert stampers(provider) == []
    monkeypatch.setenv("SPANSCORE_CONVERSATION_CONTEXT", "true")
    try:
        assert ConversationInstrumentor().instrument(tracer_provider=provider) is True
        assert ConversationInstrumentor().instrument(tracer_provider=provider) is True  # warned
        assert len(stampers(provider)) == 1
        assert threading.Thread.start is not start  # the context follows work into threads
    finally:
        ConversationInstrumentor().uninstrument()
    assert stampers(provider) == []
    assert threading.Thread.start is start
    ConversationInstrumentor().uninstrument()  # does nothing


def test_the_package_stays_light() -> None:
    """Production agents import it (and `opentelemetry-instrument` loads its entry points):
    OpenTelemetry only, no other spanscore package, no DuckDB, no gRPC."""
    program = (
        "import sys, spanscore.instrumentation, spanscore.instrumentation.openai_client; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'duckdb', 'grpc', 'pyarrow'})); "
        "print(sorted(m for m in sys.modules if m.startswith('spanscore.')"
        " and not m.startswith('spanscore.instrumentation')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines() == ["[]", "[]"]
