"""Real producer instrumentations, real OTLP, the real collector: what lands in the lake.

Each producer package runs in its own virtual environment (their pins conflict with each other
and with the main one), built by these tests under the user's cache
(`~/.cache/spanscore/producers/`, or `$SPANSCORE_PRODUCER_ENVS`) and reused while its
requirements file is unchanged; `tests/producers/run_producer.py` runs there, one scripted
two-turn conversation with the real `openai` client against the local `ScriptedLLM` (the plan
below: a parallel pair of tool calls, one of which fails, then one more call), and exports over
OTLP/HTTP to a collector started here. The assertions are SQL over the lake.

Versions tested (every package pinned in tests/producers/requirements/<producer>.txt), all with
openai 3.52.0, opentelemetry-sdk / -exporter-otlp-proto-http 1.45.2,
opentelemetry-instrumentation 0.66b2, Python 3.11:

- openai-v2: opentelemetry-instrumentation-openai-v2 2.4b0 with opentelemetry-util-genai
  1.1b0 (the newest it can import) and httpx 0.28.1 (imported, not declared).
- openinference: openinference-instrumentation-openai 0.1.66, openinference-instrumentation
  0.1.72, openinference-semantic-conventions 0.1.42.
- openinference-agents: openinference-instrumentation-openai-agents 2.6.0 with openai-agents
  0.24.0 (Responses API), openinference-instrumentation 0.1.72.
- openllmetry: opentelemetry-instrumentation-openai 0.62.4 (Traceloop), with
  opentelemetry-semantic-conventions-ai 0.5.1, without traceloop-sdk.
- traceloop-sdk: traceloop-sdk 0.45.6 with its opentelemetry-instrumentation-openai 0.45.6
  (opentelemetry-sdk 1.34.1, openai 2.54.0): the newest traceloop-sdk whose dependencies
  resolve from the package index these tests ran against. `Traceloop.init` with its processor
  chained to the runner's exporter, each turn a `@workflow`, each tool a `@tool` function.
- traceloop-sdk-events: the same venv, its OpenAI instrumentation with
  `use_legacy_attributes=False` (messages as per-message events, through an
  `EventLoggerProvider` on the runner's logger provider).
- smolagents: smolagents 1.26.0 (ToolCallingAgent, its own `OpenAIModel` with a scripted
  client answering from the plan) under openinference-instrumentation-smolagents 0.1.43.
- smolagents-model: the same venv, its base `Model` with `generate` replaced by a Python
  function before instrumenting (tool-call arguments as dicts), the tools raising
  `RuntimeError`; and in its own test (`test_smolagents_scripted_base_model`) with a
  `cancel_order` tool that fails, as a user reported it.
- llamaindex: llama-index-core 0.14.25 (`FunctionAgent`, llama-index-workflows 2.26.1) with
  llama-index-llms-openai 0.8.3 and openai 2.54.0 against the ScriptedLLM, under
  openinference-instrumentation-llama-index 4.6.1; one `ChatMemoryBuffer` across both turns.
- crewai: crewai 1.15.30 (one `Agent`, its `LLM` with native tool calling through CrewAI's
  OpenAI provider, against the ScriptedLLM) under openinference-instrumentation-crewai 1.1.21
  and openinference-instrumentation-openai 0.1.66 (the model calls), openai 2.54.0; each turn a
  `Crew` kickoff of one task.
- vercel-ai6, vercel-ai6-grpc: a Node project (tests/producers/node/vercel-ai6/package.json,
  built by `npm install` beside the venvs) with ai 6.0.326 and the OpenTelemetry JS SDK
  (@opentelemetry/sdk-trace 2.12.1, OTLP exporters 0.223.1), running run_vercel.mjs: the
  SDK's `MockLanguageModelV3` scripted from the plan, `generateText` with
  `experimental_telemetry`, exported over OTLP HTTP/protobuf and over gRPC. JavaScript has
  one number type: the arguments it sends carry 100, not 100.0 (compared as numbers).
- vercel-ai7, vercel-ai7-legacy (each also -grpc): the same with ai 7.0.173 and @ai-sdk/otel
  1.0.173 (tests/producers/node/vercel-ai7/package.json): its `OpenTelemetry` integration (the
  GenAI form) and its `LegacyOpenTelemetry` (the `ai.*` spans of ai 6), `MockLanguageModelV4`,
  the conversation id as `runtimeContext.sessionId`.
- pydantic-ai, pydantic-ai-v2: pydantic-ai-slim 2.68.0 with its own instrumentation
  (opentelemetry-sdk 1.45.2), `FunctionModel` scripted from the plan, instrumentation data
  format 5 (current) and 2 (deprecated); the failure raised as `ModelRetry`.
- adk, adk-legacy, adk-legacy-events: google-adk 2.13.0 (the newest release) with
  google-genai 2.34.0 (opentelemetry-sdk 1.44.0, as it resolves), a `BaseLlm` subclass
  scripted from the plan, in ADK's current schema (content on spans:
  `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY`), its legacy one
  (`ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`), and the legacy one with content in log records
  too (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
- strands, strands-latest, strands-attributes: strands-agents 1.62.0 with its own tracer
  (opentelemetry-sdk 1.45.1, as it resolves), a `Model` subclass scripted from the plan; the
  default conventions, `gen_ai_latest_experimental`, and that with
  `gen_ai_span_attributes_only`.
- openai-v2-events: the openai-v2 venv with content capture `event_only`: messages only in
  log records, merged into their spans when read.
- spanscore-agents: spanscore's own OpenAI Agents SDK shim, run in the project's venv (the dev
  extra pins openai-agents 0.24.0): the same conversation as openinference-agents, with call
  ids recovered on the tool spans and the run's `group_id` as the conversation.
- openai-v2+spanscore, openinference+spanscore: those two venvs again, with
  `spanscore.instrumentation`'s `conversation()` (from the source tree; it needs only the
  OpenTelemetry API and SDK) active in the same process instead of the producer's own
  conversation id: every span of the official instrumentations carries our id.

What each producer cannot carry, asserted as such:

- openai-v2 puts `gen_ai.conversation.id` only on util-genai's `invoke_agent` span of each turn:
  util-genai 1.1b0 does not hand it down to the chat and `execute_tool` spans (the ambient
  conversation id arrived in util-genai 1.2b0, which instrumentation-openai-v2 2.4b0 cannot
  import), so those spans stand in their trace id in `spans.conversation_id`; the views and
  trajectories join them to the conversation their trace names.
- openinference-agents: the Agents SDK's function spans carry no tool call id, and a failed
  tool's span only an ERROR status whose message holds the error (no error.type, no exception).
  A hand-off is a TOOL span `handoff to <agent>` (tested on its own: triage hands to billing).
- openllmetry: without traceloop-sdk (its `@tool` / `@workflow` decorators) there are no tool
  spans and no span per turn: each model call is its own trace, its tool calls are rebuilt
  from the model calls' messages (`tool_calls.source = 'messages'`), where a failed call shows
  only in its result. Its current release writes the GenAI form only, so `convention` is
  `genai`.

- smolagents: tool spans carry no call id and record the input as `{"args": [], "kwargs":
  {...}}` (unwrapped); the model sees results as "Observation:" text, so model calls carry no
  tool results; each turn ends with a `final_answer` call, read as the answer. With a model
  that is a Python function, the calls' arguments (dicts) are only in the model span's
  `output.value`, read from there.

- llamaindex: tool spans carry no call id and record the input as `{"kwargs": {...}}` and the
  output as LlamaIndex's `ToolOutput` (both unwrapped); the LLM class's request preparation
  (`OpenAI._prepare_chat_with_tools`) is an LLM span that calls no model, and is none.

- adk-legacy-events: its per-message log records carry no time (0) and are tied to the
  `generate_content` span inside each `call_llm` span (the model call, whose attributes hold
  the same messages); they repeat the call's messages and are not read
  (docs/conversations.md, rule 4).
- traceloop-sdk-events: its `gen_ai.tool.message` records carry no call id, so the results in
  the model calls' input have none; the model-call spans carry no content attributes, so they
  are read as the GenAI form.
- crewai: a crew keeps no history between kickoffs, so each turn's model calls carry only that
  turn's results; the user message reaches the model framed as CrewAI's task prompt (read
  without the frame); the calls of one response run concurrently and their tool spans carry no
  call id (joined to the requests by name and arguments).

A tool result every producer sends as the text the model saw is parsed when it is JSON, so the
same result is the same value whatever produced it (a regression test here).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spanscore.collector import Collector
from spanscore.evaluation import Handoff, load_trajectories
from spanscore.examples.customer_service.scripted import Conversation, Turn
from spanscore.examples.llm_server import LLMRequest, Reply, ScriptedLLM, ScriptedPolicy
from spanscore.lake import connect
from spanscore.lake.schema.rules import MODEL_CALL_SQL, SPAN_ORDER, SPANS_WITH_EVENTS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "producers"
RUNNER = HERE / "run_producer.py"
NODE_RUNNER = HERE / "run_vercel.mjs"
# The producer environments (2.5 GB for all of them) live outside the checkout, so that a fresh
# clone (CI's) reuses what an earlier run built: `SPANSCORE_PRODUCER_ENVS`, else the user's cache.
VENVS = Path(
    os.environ.get("SPANSCORE_PRODUCER_ENVS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spanscore" / "producers"
)

# --- the conversation ---------------------------------------------------------------------------

CONVERSATION_ID = "producers-conv-1"
AGENT = "customer-service"
MODEL = "gpt-4.1-mini"
MISSING = "order ORD-9999 not found"

PLAN = Conversation(
    CONVERSATION_ID,
    "producer_roundtrip",
    [
        Turn(
            "Hi, where are my orders ORD-1001 and ORD-9999?",
            [[("get_order", {"order_id": "ORD-1001"}), ("get_order", {"order_id": "ORD-9999"})]],
            "ORD-1001 has shipped; I could not find ORD-9999.",
        ),
        Turn(
            "Thanks. Any keyboards under $100?",
            [[("search_products", {"query": "keyboard", "max_price": 100.0})]],
            "The mechanical keyboard is $89.",
        ),
    ],
)

# What each tool call answers (or the error it raises), by exact arguments.
OUTCOMES: list[dict[str, Any]] = [
    {
        "name": "get_order",
        "arguments": {"order_id": "ORD-1001"},
        "result": {"order_id": "ORD-1001", "status": "shipped"},
    },
    {"name": "get_order", "arguments": {"order_id": "ORD-9999"}, "error": MISSING},
    {
        "name": "search_products",
        "arguments": {"query": "keyboard", "max_price": 100.0},
        "result": [{"name": "Mechanical keyboard", "price": 89.0}],
    },
]


def _key(name: str, arguments: Any) -> str:
    return json.dumps([name, _integral(arguments)], sort_keys=True)


def _integral(value: Any) -> Any:
    """100.0 as 100: JSON from JavaScript has one number type (the Node producers)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


OUTCOME = {_key(o["name"], o["arguments"]): o for o in OUTCOMES}


def sent_back(name: str, arguments: Any, producer: Producer | None = None) -> Any:
    """What the agent sends the model for this call (parsed): the result, or its error as the
    producer sends it ({"error": ...} by default)."""
    outcome = OUTCOME[_key(name, arguments)]
    if "error" not in outcome:
        result = outcome["result"]
        if producer and producer.wraps_non_dict_results and not isinstance(result, dict):
            return {"result": result}
        return result
    return producer.sent_error(outcome["error"]) if producer else {"error": outcome["error"]}


# --- the producers ------------------------------------------------------------------------------


# `Producer.log_events` of a producer sending a record per message with its content elided.
PER_MESSAGE_ELIDED = "per-message, elided"
# ... and of one sending a record per message with the content.
PER_MESSAGE = "per-message"
# ... and of one sending them, with the content, about a span inside each model call's span.
PER_MESSAGE_NESTED = "per-message, nested"


@dataclass(frozen=True)
class Producer:
    name: str
    convention: str  # `convention` of its model-call spans
    scope: str  # instrumentation scope of its model-call spans
    spans_carry_conversation: bool  # every span has the conversation id
    tool_spans: bool  # tool calls are spans of their own
    tool_span_call_ids: bool  # ... carrying the model's call id
    failed_tool_error_type: str | None  # error_type of the failed tool call's span
    log_events: str | None  # the log records it sends per model call (event name)
    venv: str = ""  # the requirements file (default: the name); "project": this test's venv
    messages_on_spans: bool = True  # False: the messages are only in its log records
    results_in_messages: bool = True  # False: the model sees results as text of its own
    error_sent: str | None = None  # how a failure is sent to the model (default: JSON)
    wraps_non_dict_results: bool = False  # ADK: a result that is no dict goes as {"result": v}
    protocol: str = "http"  # how it exports: OTLP "http" (Python: JSON-less protobuf) or "grpc"
    node: bool = False  # a Node producer: tests/producers/node/<venv>/ and run_vercel.mjs
    history_across_turns: bool = True  # False: each turn's model calls start afresh (CrewAI)
    result_ids: bool = True  # False: results in its messages carry no call id
    # tests that fail for a gap not fixed yet: strict xfails (a fix makes them fail until
    # removed from here), with the reason
    known_gaps: tuple[frozenset[str], str] | None = None

    def sent_error(self, message: str) -> Any:
        """What the agent sends the model for a failed call (parsed)."""
        return {"error": message} if self.error_sent is None else self.error_sent.format(message)

    @property
    def requirements(self) -> str:
        return self.venv or self.name


PRODUCERS = {
    p.name: p
    for p in (
        Producer(
            "openai-v2",
            convention="genai",
            scope="opentelemetry.util.genai.handler",
            spans_carry_conversation=False,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="__main__.ToolError",
            log_events="gen_ai.client.inference.operation.details",
        ),
        # The same package with content in events only: the messages reach the lake in log
        # records linked to the model-call spans, never in span attributes.
        Producer(
            "openai-v2-events",
            convention="genai",
            scope="opentelemetry.util.genai.handler",
            spans_carry_conversation=False,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="__main__.ToolError",
            log_events="gen_ai.client.inference.operation.details",
            venv="openai-v2",
            messages_on_spans=False,
        ),
        Producer(
            "openinference",
            convention="openinference",
            scope="openinference.instrumentation.openai",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
        ),
        # In the same process as spanscore.instrumentation: the official instrumentations'
        # spans carry the id of spanscore's conversation() (no producer-specific id at all).
        Producer(
            "openai-v2+spanscore",
            convention="genai",
            scope="opentelemetry.util.genai.handler",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="__main__.ToolError",
            log_events="gen_ai.client.inference.operation.details",
            venv="openai-v2",
        ),
        Producer(
            "openinference+spanscore",
            convention="openinference",
            scope="openinference.instrumentation.openai",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
            venv="openinference",
        ),
        Producer(
            "openinference-agents",
            convention="openinference",
            scope="openinference.instrumentation.openai_agents",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type=None,  # only the span status says so (message included)
            log_events=None,
        ),
        # spanscore's own shim, installed with the project (its dev extra pins openai-agents).
        Producer(
            "spanscore-agents",
            convention="genai",
            scope="spanscore.instrumentation.openai_agents",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="order ORD-9999 not found",  # the SDK keeps no type
            log_events=None,
            venv="project",
        ),
        Producer(
            "openllmetry",
            # Its current release writes the GenAI form only (no traceloop.* marker on the
            # openai spans), so the spans are read, and labelled, as genai.
            convention="genai",
            scope="opentelemetry.instrumentation.openai.v1",
            spans_carry_conversation=True,
            tool_spans=False,
            tool_span_call_ids=False,
            failed_tool_error_type=None,
            log_events=None,
        ),
        # traceloop-sdk: its decorators make the turn and tool spans, its OpenAI
        # instrumentation (0.45.6: the indexed gen_ai.prompt.N attributes) the model calls.
        Producer(
            "traceloop-sdk",
            convention="openllmetry",
            scope="opentelemetry.instrumentation.openai.v1",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
        ),
        # The same with its OpenAI instrumentation's `use_legacy_attributes=False`: the
        # messages only in log records, one per message (`gen_ai.choice` with the calls beside
        # the message); its `gen_ai.tool.message` records carry no call id.
        Producer(
            "traceloop-sdk-events",
            convention="genai",
            scope="opentelemetry.instrumentation.openai.v1",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="__main__.ToolError",
            log_events=PER_MESSAGE,
            venv="traceloop-sdk",
            messages_on_spans=False,
            result_ids=False,
        ),
        # smolagents hands results to the model as "Observation:" text, and its answer is a
        # `final_answer` tool call: read as the model call's response text.
        Producer(
            "smolagents",
            convention="openinference",
            scope="openinference.instrumentation.smolagents",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
            results_in_messages=False,
        ),
        # The same with smolagents' base `Model` scripted by a Python function: the calls'
        # arguments are dicts, in the model spans' `output.value` only; tools raise
        # RuntimeError.
        Producer(
            "smolagents-model",
            convention="openinference",
            scope="openinference.instrumentation.smolagents",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="RuntimeError",
            log_events=None,
            venv="smolagents",
            results_in_messages=False,
        ),
        # LlamaIndex's FunctionAgent: a failure reaches the model as the error's message.
        Producer(
            "llamaindex",
            convention="openinference",
            scope="openinference.instrumentation.llama_index",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
            error_sent="{}",
        ),
        # CrewAI: each turn a crew kickoff with no history; the task framed for the model
        # ("Current Task: ..."); a failure reaches the model as "Error executing tool: ...".
        Producer(
            "crewai",
            convention="openinference",
            scope="openinference.instrumentation.openai",
            spans_carry_conversation=True,
            tool_spans=True,
            tool_span_call_ids=False,
            failed_tool_error_type="__main__.ToolError",
            log_events=None,
            error_sent="Error executing tool: {}",
            history_across_turns=False,
        ),
        # Pydantic AI, its current instrumentation data format (5) and a deprecated one (2:
        # `running tool` spans with `tool_arguments` / `tool_response`). A failure is sent to
        # the model through `ModelRetry`: its message.
        *(
            Producer(
                name,
                convention="genai",
                scope="pydantic-ai",
                spans_carry_conversation=True,
                tool_spans=True,
                tool_span_call_ids=True,
                failed_tool_error_type="pydantic_ai.exceptions.ToolRetryError",
                log_events=None,
                venv="pydantic-ai",
                error_sent="{}",
            )
            for name in ("pydantic-ai", "pydantic-ai-v2")
        ),
        # Google ADK, its two schemas, one venv: the model call is a `generate_content` span
        # (current) or a `call_llm` span reading google.genai `Content` (legacy).
        Producer(
            "adk",
            convention="genai",
            scope="gcp.vertex.agent",
            spans_carry_conversation=False,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="TOOL_ERROR",
            # one per model call, even with content on the spans only (then without content)
            log_events="gen_ai.client.inference.operation.details",
            venv="adk",
            wraps_non_dict_results=True,
        ),
        Producer(
            "adk-legacy",
            convention="adk",
            scope="gcp.vertex.agent",
            spans_carry_conversation=False,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="TOOL_ERROR",
            log_events=PER_MESSAGE_ELIDED,
            venv="adk",
            wraps_non_dict_results=True,
        ),
        # The legacy schema with content capture on (the old boolean switch: EVENT_ONLY): the
        # messages also go as log records of the `generate_content` span inside each
        # `call_llm` span (whose attributes hold the same request and response): the records
        # of a span inside a model call are not read as a second model call.
        Producer(
            "adk-legacy-events",
            convention="adk",
            scope="gcp.vertex.agent",
            spans_carry_conversation=False,
            tool_spans=True,
            tool_span_call_ids=True,
            failed_tool_error_type="TOOL_ERROR",
            log_events=PER_MESSAGE_NESTED,
            venv="adk",
            wraps_non_dict_results=True,
        ),
        # The Vercel AI SDK in Node with the OpenTelemetry JS SDK, over OTLP HTTP/protobuf and
        # over gRPC: ai 6 (`experimental_telemetry`); ai 7 with @ai-sdk/otel's
        # LegacyOpenTelemetry (the spans of ai 6, the conversation in
        # `ai.settings.context.sessionId`) and its OpenTelemetry integration (the GenAI form,
        # the conversation id only on the invoke_agent and step spans: the others take it from
        # their trace). A failure reaches the model as its message (ai 7: with the error's name).
        *(
            Producer(
                f"{name}{suffix}",
                convention=convention,
                scope="spanscore-producer",
                spans_carry_conversation=carried,
                tool_spans=True,
                tool_span_call_ids=True,
                failed_tool_error_type="ToolError",  # its exception event's type
                log_events=None,
                venv=project,
                error_sent=sent,
                protocol=protocol,
                node=True,
            )
            for name, project, convention, carried, sent in (
                ("vercel-ai6", "vercel-ai6", "vercel-ai", True, "{}"),
                ("vercel-ai7-legacy", "vercel-ai7", "vercel-ai", True, "ToolError: {}"),
                ("vercel-ai7", "vercel-ai7", "genai", False, "ToolError: {}"),
            )
            for suffix, protocol in (("", "http"), ("-grpc", "grpc"))
        ),
        # Strands Agents, its three convention settings, one venv. Messages are Bedrock
        # Converse content blocks (default) or the current GenAI form, on span events or
        # attributes; its agent and loop-cycle spans repeat the model calls' messages.
        *(
            Producer(
                name,
                convention="genai",
                scope="strands.telemetry.tracer",
                spans_carry_conversation=True,
                tool_spans=True,
                tool_span_call_ids=True,
                failed_tool_error_type="__main__.ToolError",
                log_events=None,
                venv="strands",
                error_sent="Error: ToolError - {}",
            )
            for name in ("strands", "strands-latest", "strands-attributes")
        ),
    )
}


def producers(**marks: pytest.MarkDecorator) -> list[Any]:
    """The producers as parameters (id: the name), with `marks` for the ones named."""
    return [
        pytest.param(name, id=name, marks=marks.get(name.replace("-", "_"), ()))
        for name in PRODUCERS
    ]


# --- the producer virtual environments ----------------------------------------------------------

# pip's messages when it cannot reach the package index at all
UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname provided",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    # uv's words for the same
    "tcp connect error",
    "dns error",
    "error sending request",
)


@dataclass
class Venv:
    python: Path | None = None
    unreachable: str | None = None  # why it could not be built: the registry was unreachable
    failed: str | None = None  # why it could not be built otherwise (the installer's log)
    seconds: float = 0.0
    reused: bool = False
    project: Path | None = None  # a Node producer's project (its node_modules)


def build_venv(name: str) -> Venv:
    """The producer's venv, reused when its requirements file (and Python) are unchanged; for
    a Node producer, its Node project (`node/<name>/package.json`)."""
    VENVS.mkdir(parents=True, exist_ok=True)
    with (VENVS / f".{name}.lock").open("w") as lock:  # one builder at a time (other sessions)
        if os.name != "nt":
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        if (HERE / "node" / name / "package.json").is_file():
            return _build_node_project(name)
        return _build_venv(name)


def _build_node_project(name: str) -> Venv:
    """`npm install` of the pinned package.json into `<VENVS>/<name>-<hash>/`."""
    started = time.monotonic()
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return Venv(failed=f"the {name} producer needs Node.js and npm (node: {node}, npm: {npm})")
    manifest = HERE / "node" / name / "package.json"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    digest = hashlib.sha256(manifest.read_bytes() + version.stdout.encode()).hexdigest()[:12]
    target = VENVS / f"{name}-{digest}"
    stamp = target / ".complete"
    if stamp.is_file():
        return Venv(Path(node), seconds=time.monotonic() - started, reused=True, project=target)
    stale = re.compile(re.escape(name) + r"-[0-9a-f]{12}")
    for old in VENVS.glob(f"{name}-*"):
        if stale.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copy(manifest, target / "package.json")
    install = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=1000,
    )
    if install.returncode != 0:
        log = install.stdout + install.stderr
        shutil.rmtree(target, ignore_errors=True)
        if any(m in log for m in ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN")):
            return Venv(unreachable=f"package registry unreachable: cannot build {name}")
        return Venv(failed=f"npm install of {manifest} failed:\n{log[-6000:]}")
    stamp.write_text(manifest.read_text())
    return Venv(Path(node), seconds=time.monotonic() - started, project=target)


def _uv() -> str | None:
    """uv, from the project's venv (the dev extra): it builds a producer's venv in seconds
    (1.3 s against pip's 28 s for llamaindex's, empty caches); None where it is missing."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


def _build_venv(name: str) -> Venv:
    started = time.monotonic()
    requirements = HERE / "requirements" / f"{name}.txt"
    digest = hashlib.sha256(
        requirements.read_bytes() + f"{sys.version_info[:2]} {sys.platform}".encode()
    ).hexdigest()[:12]
    target = VENVS / f"{name}-{digest}"
    python = target / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    stamp = target / ".complete"
    if stamp.is_file() and python.exists():
        return Venv(python, seconds=time.monotonic() - started, reused=True)
    stale = re.compile(re.escape(name) + r"-[0-9a-f]{12}")
    for old in VENVS.glob(f"{name}-*"):
        if stale.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)
    uv = _uv()
    # with uv, no pip in the venv: ensurepip took 4 s of each build. Neither compiles to
    # bytecode (pip: --no-compile, a third of its time): Python compiles what a run imports.
    without_pip = ["--without-pip"] if uv else []
    subprocess.run(
        [sys.executable, "-m", "venv", *without_pip, str(target)], check=True, capture_output=True
    )
    installer = (
        [uv, "pip", "install", "--python", str(python), "--no-progress"]
        if uv
        else [
            *(str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"),
            *("--no-compile", "--retries", "2", "--timeout", "30"),
        ]
    )
    install = subprocess.run(
        [*installer, "-r", str(requirements)],
        capture_output=True,
        text=True,
        timeout=1000,
    )
    if install.returncode != 0:
        log = install.stdout + install.stderr
        shutil.rmtree(target, ignore_errors=True)
        seen = [line.strip() for line in log.splitlines() if any(m in line for m in UNREACHABLE)]
        if seen:
            return Venv(
                unreachable=f"package registry unreachable: cannot build the {name} producer "
                f"venv from {requirements.relative_to(ROOT)} ({seen[0][:300]})"
            )
        return Venv(failed=f"installing {requirements} failed:\n{log[-6000:]}")
    stamp.write_text(requirements.read_text())
    return Venv(python, seconds=time.monotonic() - started)


@pytest.fixture(scope="session")
def producer_venvs() -> dict[str, Venv]:
    """Every producer's venv, built in parallel (the first time: minutes; then: instant)."""
    with ThreadPoolExecutor(len(PRODUCERS)) as pool:
        names = sorted({p.requirements for p in PRODUCERS.values()} - {"project"})
        by_file = dict(zip(names, pool.map(build_venv, names), strict=True))
        by_file["project"] = Venv(Path(sys.executable), reused=True)
        built = {name: by_file[p.requirements] for name, p in PRODUCERS.items()}
    for name, venv in built.items():
        state = "reused" if venv.reused else "built"
        print(f"producer venv {name}: {state} in {venv.seconds:.1f}s", file=sys.stderr)
    return built


# --- one run per producer (shared by the tests of that producer) --------------------------------


@dataclass
class Run:
    producer: Producer
    lake: Path
    executed: list[dict[str, Any]]  # the tool calls the agent ran: turn, id, name, ...
    con: duckdb.DuckDBPyConnection | None = dataclasses.field(default=None, repr=False)

    def sql(self, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        # One connection per run, opened by its first query: a connection of its own per
        # query (a quarter of a second to attach the lake) was a minute of this file. Each
        # query still reads what is committed when it starts.
        if self.con is None:
            self.con = connect(self.lake)
        return self.con.execute(statement, params or []).fetchall()

    def call_id(self, name: str, arguments: Any) -> str:
        ids = [
            c["id"]
            for c in self.executed
            if _key(c["name"], c["arguments"]) == _key(name, arguments)
        ]
        assert len(ids) == 1, (name, arguments, self.executed)
        return str(ids[0])


class FramedPolicy(ScriptedPolicy):
    """`ScriptedPolicy`, also for agents that frame the user's message for the model (CrewAI's
    "Current Task: <message>..."): the plan turn is the one whose message the latest user
    message holds."""

    def __call__(self, request: LLMRequest) -> Reply:
        users = [i for i, m in enumerate(request.messages) if m.role == "user"]
        if users and request.messages[users[-1]].text not in self.turns:
            latest = request.messages[users[-1]]
            user = next((u for u in self.turns if u in latest.text), None)
            if user is not None:
                messages = list(request.messages)
                messages[users[-1]] = dataclasses.replace(latest, text=user)
                request = dataclasses.replace(request, messages=tuple(messages))
        return super().__call__(request)


@pytest.fixture(scope="session")
def runs() -> Iterator[dict[str, Run]]:
    done: dict[str, Run] = {}
    yield done
    for run in done.values():
        if run.con is not None:
            run.con.close()


def run_producer(venv: Venv, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """run_producer.py in the producer's venv (run_vercel.mjs in a Node producer's project,
    where its imports resolve); its transcript of executed tool calls."""
    prefixes = ("OTEL_", "OPENAI_", "TRACELOOP_", "OPENINFERENCE_", "PYTHON", "NODE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    runner = RUNNER
    if venv.project is not None:
        runner = venv.project / NODE_RUNNER.name
        shutil.copy(NODE_RUNNER, runner)
    proc = subprocess.run(
        [str(venv.python), str(runner)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"run_producer.py exited {proc.returncode}:\n{proc.stderr[-6000:]}"
    transcript: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return transcript


@pytest.fixture
def run(
    producer: str,
    producer_venvs: dict[str, Venv],
    runs: dict[str, Run],
    make_collector: Callable[..., Collector],
    lake_dir: Path,
    request: pytest.FixtureRequest,
) -> Run:
    """The producer's conversation, in a lake: run once, by the first test that needs it."""
    gaps = PRODUCERS[producer].known_gaps
    if gaps is not None and request.node.originalname in gaps[0]:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gaps[1]))
    if producer in runs:
        return runs[producer]
    venv = producer_venvs[producer]
    if venv.unreachable:
        pytest.skip(venv.unreachable)
    if venv.failed or venv.python is None:
        pytest.fail(venv.failed or "no venv")
    collector = make_collector()
    with ScriptedLLM(FramedPolicy([PLAN])) as llm:
        spec = {
            "producer": producer,
            "llm_base_url": llm.base_url,
            "otlp_endpoint": f"http://127.0.0.1:{collector.http_port}",
            "otlp_grpc_endpoint": f"http://127.0.0.1:{collector.grpc_port}",
            "protocol": PRODUCERS[producer].protocol,
            "service_name": f"producer-{producer}",
            "model": MODEL,
            "agent_name": AGENT,
            "conversation_id": CONVERSATION_ID,
            "turns": [{"user": turn.user} for turn in PLAN.turns],
            # for a producer whose model is scripted in its own process (smolagents)
            "plan": [
                {
                    "user": turn.user,
                    "steps": [
                        [{"name": n, "arguments": a} for n, a in step] for step in turn.steps
                    ],
                    "reply": turn.reply,
                }
                for turn in PLAN.turns
            ],
            **(
                {"spanscore_path": str(ROOT / "instrumentation" / "src")}
                if producer.endswith("+spanscore")
                else {}
            ),
            "outcomes": OUTCOMES,
        }
        executed = run_producer(venv, spec)
        assert not llm.errors, llm.errors
    planned = sorted(_key(n, a) for turn in PLAN.turns for step in turn.steps for n, a in step)
    assert sorted(_key(c["name"], c["arguments"]) for c in executed) == planned
    runs[producer] = Run(PRODUCERS[producer], lake_dir, executed)
    return runs[producer]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _value(result: Any) -> Any:
    """A tool result as a value: JSON text parsed."""
    if isinstance(result, str):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


def model_calls(run: Run) -> list[dict[str, Any]]:
    """The model-call spans, in start order, with their extracted columns (JSON parsed): the
    span's own, or, for a producer that sends messages as events, those of its log records."""
    source = "spans" if run.producer.messages_on_spans else SPANS_WITH_EVENTS
    rows = run.sql(
        f"""SELECT span_id, user_message, tool_calls_requested, tool_results, response_text,
                  convention, scope_name
           FROM {source} s WHERE {MODEL_CALL_SQL} ORDER BY start_time_unix_nano"""
    )
    return [
        {
            "span_id": span_id,
            "user": user,
            "requested": _json(requested),
            "results": _json(results),
            "text": text,
            "convention": convention,
            "scope": scope,
        }
        for span_id, user, requested, results, text, convention, scope in rows
    ]


def expected_model_calls(run: Run) -> list[dict[str, Any]]:
    """Per model call, in order: the user message, the calls it asks for, the results in its
    input (every result sent so far: the whole history goes with each call; the turn's own
    for a producer that starts each turn afresh), the answer."""
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for turn in PLAN.turns:
        if not run.producer.history_across_turns:
            results = []
        for step in turn.steps:
            requested = [{"id": run.call_id(n, a), "name": n, "arguments": a} for n, a in step]
            calls.append({"user": turn.user, "requested": requested, "results": list(results)})
            if not run.producer.results_in_messages:
                continue
            results += [
                {
                    "id": c["id"] if run.producer.result_ids else None,
                    "result": sent_back(c["name"], c["arguments"], run.producer),
                }
                for c in requested
            ]
        calls.append(
            {"user": turn.user, "requested": None, "results": list(results), "text": turn.reply}
        )
    return calls


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("producer", producers())
def test_spans_arrive_read_as_the_producers_convention(run: Run) -> None:
    calls = model_calls(run)
    assert len(calls) == sum(len(t.steps) + 1 for t in PLAN.turns)
    assert {(c["convention"], c["scope"]) for c in calls} == {
        (run.producer.convention, run.producer.scope)
    }
    events = run.sql("SELECT event_name, span_id FROM logs ORDER BY time_unix_nano")
    if run.producer.log_events is None:
        assert events == []
    elif run.producer.log_events == PER_MESSAGE_ELIDED:
        # ADK's legacy schema: a record per message of each request, content "<elided>",
        # tied to its generate_content spans (not model calls: they say nothing).
        assert {e for e, _ in events} == {
            "gen_ai.system.message",
            "gen_ai.user.message",
            "gen_ai.choice",
        }
        assert run.sql(
            f"SELECT count(*) FROM {SPANS_WITH_EVENTS} s WHERE operation = 'generate_content' "
            "AND (user_message IS NOT NULL OR response_text IS NOT NULL)"
        ) == [(0,)]
    elif run.producer.log_events == PER_MESSAGE:
        # a record per message of each request and per choice, tied to its model call
        assert {e for e, _ in events} <= {
            "gen_ai.system.message",
            "gen_ai.user.message",
            "gen_ai.assistant.message",
            "gen_ai.tool.message",
            "gen_ai.choice",
        }, events
        assert {s for _, s in events} == {c["span_id"] for c in calls}
    elif run.producer.log_events == PER_MESSAGE_NESTED:
        # ADK's legacy schema with content capture on: a record per message of each request
        # and per choice, with the content, tied to the generate_content span inside each
        # model call's span, which says nothing of its own (the records are its parent's
        # messages again: not a second model call).
        assert {e for e, _ in events} == {
            "gen_ai.system.message",
            "gen_ai.user.message",
            "gen_ai.choice",
        }, events
        assert run.sql("SELECT count(*) FROM logs WHERE response_text IS NOT NULL") == [
            (len(PLAN.turns),)
        ]
        nested = run.sql(
            f"""SELECT s.span_id, s.parent_span_id, s.operation,
                      s.user_message IS NOT NULL OR s.tool_calls_requested IS NOT NULL
                      OR s.tool_results IS NOT NULL OR s.response_text IS NOT NULL
               FROM {SPANS_WITH_EVENTS} s SEMI JOIN logs l ON l.span_id = s.span_id"""
        )
        assert sorted(parent for _, parent, _, _ in nested) == sorted(c["span_id"] for c in calls)
        assert {(operation, says) for _, _, operation, says in nested} == {
            ("generate_content", False)
        }
    else:  # one record per model call, tied to its span
        assert [e for e, _ in events] == [run.producer.log_events] * len(calls)
        assert sorted(s for _, s in events) == sorted(c["span_id"] for c in calls)


@pytest.mark.parametrize("producer", producers())
def test_conversation_id_as_each_span_carries_it(run: Run) -> None:
    spans = run.sql(
        "SELECT trace_id, span_id, parent_span_id, operation, conversation_id FROM spans"
    )
    assert spans
    if run.producer.name.endswith("+spanscore"):  # stamped by spanscore's processor
        stamped = run.sql(
            """SELECT count(*) FROM spans WHERE attributes->>'$."gen_ai.conversation.id"' = ?""",
            [CONVERSATION_ID],
        )
        assert stamped == [(len(spans),)]
    if run.producer.spans_carry_conversation or not run.producer.name.startswith("openai-v2"):
        # ADK: its tool spans (and, legacy, its root) carry none, stored with their trace's.
        assert {s[4] for s in spans} == {CONVERSATION_ID}
        return
    # openai-v2: the id is on each turn's invoke_agent span (its trace's root) only; the other
    # spans carry none, and are stored with their root's (docs/conversations.md, rule 2).
    roots = {s[0]: s for s in spans if s[2] is None}
    assert len(roots) == len(PLAN.turns)
    assert {(r[3], r[4]) for r in roots.values()} == {("invoke_agent", CONVERSATION_ID)}
    carried = run.sql(
        """SELECT count(*) FROM spans WHERE attributes->>'$."gen_ai.conversation.id"' = ?""",
        [CONVERSATION_ID],
    )
    assert carried == [(len(roots),)]
    assert {s[4] for s in spans} == {CONVERSATION_ID}


@pytest.mark.parametrize("producer", producers())
def test_conversations_view_gathers_the_whole_conversation(run: Run) -> None:
    """Spans that carry only their trace id join the conversation another span of the trace
    names (openai-v2), and a producer without tool spans counts the calls its model asked for."""
    (total,) = run.sql("SELECT count(*) FROM spans")[0]
    planned = sum(len(step) for turn in PLAN.turns for step in turn.steps)
    assert run.sql(
        "SELECT conversation_id, span_count, tool_call_count, first_user_message FROM conversations"
    ) == [(CONVERSATION_ID, total, planned, PLAN.turns[0].user)]


@pytest.mark.parametrize("producer", producers())
def test_model_calls_user_message_and_requested_tool_calls(run: Run) -> None:
    calls = model_calls(run)
    expected = expected_model_calls(run)
    assert [(c["user"], c["requested"]) for c in calls] == [
        (e["user"], e["requested"]) for e in expected
    ]
    # the parallel pair: both get_order calls asked for in one model response
    pair = [c for c in calls if c["requested"] and len(c["requested"]) == 2]
    assert len(pair) == 1
    assert [r["arguments"]["order_id"] for r in pair[0]["requested"]] == ["ORD-1001", "ORD-9999"]
    assert [c["text"] for c in calls if c["requested"] is None] == [t.reply for t in PLAN.turns]


@pytest.mark.parametrize("producer", producers())
def test_model_calls_tool_results_include_the_failure(run: Run) -> None:
    """Every result sent back is in the next model calls' input, the failed call's error too
    (compared as values: see the next test for how they are stored)."""
    calls = model_calls(run)
    got = [
        [{"id": r["id"], "result": _value(r["result"])} for r in c["results"] or []] for c in calls
    ]
    assert got == [e["results"] for e in expected_model_calls(run)]
    if not run.producer.results_in_messages:
        return
    failed = run.call_id("get_order", {"order_id": "ORD-9999"}) if run.producer.result_ids else None
    sent = run.producer.sent_error(MISSING)
    assert {"id": failed, "result": sent} in got[1]  # answered in the same turn


@pytest.mark.parametrize("producer", producers())
def test_model_calls_tool_results_are_json_values_for_every_producer(run: Run) -> None:
    calls = model_calls(run)
    assert [c["results"] or [] for c in calls] == [e["results"] for e in expected_model_calls(run)]


@pytest.mark.parametrize("producer", producers())
def test_tool_spans(run: Run) -> None:
    rows = run.sql(
        """SELECT tool_name, tool_call_id, tool_arguments, tool_result, error_type, status_code,
                  coalesce(status_message, '') || coalesce(CAST(events AS VARCHAR), '')
           FROM spans WHERE operation = 'execute_tool' ORDER BY start_time_unix_nano"""
    )
    if not run.producer.tool_spans:
        assert rows == []  # its tool calls are known from the model calls' messages only
        return
    planned = [(n, a) for turn in PLAN.turns for step in turn.steps for n, a in step]
    if not run.producer.messages_on_spans and run.producer.tool_span_call_ids:
        # Content goes to events only: tool spans carry the call ids and outcome, no content
        # (openai-v2 with events; traceloop-sdk's @tool spans keep theirs).
        calls = sorted((r[1], r[0], r[5]) for r in rows)
        ids = sorted((run.call_id(n, a), n) for n, a in planned)
        assert [(c[0], c[1]) for c in calls] == ids
        assert all(r[2] is None and r[3] is None for r in rows)
        failed = [r for r in rows if r[5] == "ERROR"]
        assert [r[4] for r in failed] == [run.producer.failed_tool_error_type]
        return
    got = sorted(rows, key=lambda r: _key(r[0], _json(r[2])))
    assert [(r[0], _json(r[2])) for r in got] == sorted(planned, key=lambda c: _key(*c))
    for name, call_id, arguments, result, error_type, status, error_text in got:
        arguments = _json(arguments)
        expected_id = run.call_id(name, arguments) if run.producer.tool_span_call_ids else None
        assert call_id == expected_id
        outcome = OUTCOME[_key(name, arguments)]
        if "error" in outcome:
            assert status == "ERROR"
            assert error_type == run.producer.failed_tool_error_type
            assert outcome["error"] in error_text + (result or "")
            if result is not None:  # openinference-agents: what the model was sent
                assert _value(result) == run.producer.sent_error(outcome["error"])
        else:
            assert status != "ERROR"
            assert error_type is None
            assert _value(result) == sent_back(name, arguments, run.producer)


def planned_calls() -> list[tuple[int, str, Any]]:
    """(turn index, tool name, arguments) of every planned call."""
    return [
        (index, name, arguments)
        for index, turn in enumerate(PLAN.turns)
        for step in turn.steps
        for name, arguments in step
    ]


@pytest.mark.parametrize("producer", producers())
def test_tool_calls_view(run: Run) -> None:
    rows = run.sql(
        """SELECT turn_index, tool_name, arguments, tool_call_id, error, source FROM tool_calls
           WHERE conversation_id = ? ORDER BY step_index""",
        [CONVERSATION_ID],
    )
    # every call is one the model requested: joined to its span, or from the messages alone
    source = "span+messages" if run.producer.tool_spans else "messages"
    got = sorted(
        (turn, name, _key(name, _json(arguments)), call_id, error is not None, kind)
        for turn, name, arguments, call_id, error, kind in rows
    )
    # The failed call is an error where it has a span; rebuilt from messages, only its result
    # ({"error": ...}) tells.
    assert got == sorted(
        (
            turn,
            name,
            _key(name, arguments),
            run.call_id(name, arguments),  # a span without one: the request's, by arguments
            "error" in OUTCOME[_key(name, arguments)] and run.producer.tool_spans,
            source,
        )
        for turn, name, arguments in planned_calls()
    )
    # the failure's message, not only its type
    failed = run.sql("SELECT error_message FROM tool_calls WHERE error IS NOT NULL")
    assert len(failed) == (1 if run.producer.tool_spans else 0)
    assert all(MISSING in message for (message,) in failed), failed


def _span_order(run: Run) -> str:
    """The conversation's spans in the rules' order, with what places them in turns: what a
    failure that splits or merges turns needs to be understood (a producer run once in a few
    CI runs, vercel-ai6, has split a turn in two, and its lake is gone with the run)."""
    rows = run.sql(
        f"""SELECT start_time_unix_nano, end_time_unix_nano, operation, name,
                   {MODEL_CALL_SQL} AS is_model, left(user_message, 40),
                   tool_calls_requested IS NOT NULL, left(response_text, 40)
            FROM spans WHERE conversation_id = ? ORDER BY {SPAN_ORDER}""",
        [CONVERSATION_ID],
    )
    return "spans in order (start ns, end ns, operation, name, model call, user message, " + (
        "requests calls, answer):\n" + "\n".join(map(str, rows))
    )


@pytest.mark.parametrize("producer", producers())
def test_trajectory(run: Run) -> None:
    con = connect(run.lake)
    try:
        (trajectory,) = load_trajectories(con, conversation_ids=[CONVERSATION_ID])
    finally:
        con.close()
    assert trajectory.warnings == []
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (t.user, t.reply) for t in PLAN.turns
    ], _span_order(run)
    got = sorted(
        (turn.index, c.name, _key(c.name, c.arguments), c.error is not None)
        for turn in trajectory.turns
        for c in turn.tool_calls
    )
    assert got == sorted(
        (
            turn,
            name,
            _key(name, arguments),
            "error" in OUTCOME[_key(name, arguments)] and run.producer.tool_spans,
        )
        for turn, name, arguments in planned_calls()
    )
    failed = [c.error_message for c in trajectory.tool_calls if c.error is not None]
    assert len(failed) == (1 if run.producer.tool_spans else 0)
    assert all(message and MISSING in message for message in failed), failed
    pair = [c.parallel_group for c in trajectory.turns[0].tool_calls]
    assert len(pair) == 2
    if run.producer.tool_spans:
        assert pair[0] == pair[1]  # requested together


@pytest.mark.parametrize("producer", producers())
def test_rebuilt_tool_call_results_are_the_values_sent(run: Run) -> None:
    """tool_calls.result (JSON text) and the trajectory's results (values) are what the tools
    returned; the failed call's result is its error, or nothing where its span recorded none."""
    view = run.sql(
        "SELECT tool_name, arguments, result FROM tool_calls WHERE conversation_id = ?",
        [CONVERSATION_ID],
    )
    con = connect(run.lake)
    try:
        (trajectory,) = load_trajectories(con, conversation_ids=[CONVERSATION_ID])
    finally:
        con.close()
    rebuilt = [(c.name, c.arguments, c.result) for c in trajectory.tool_calls]
    for name, arguments, result in [(n, _json(a), _value(r)) for n, a, r in view] + rebuilt:
        if result is None:  # a failed tool span without output: its error says it
            assert "error" in OUTCOME[_key(name, arguments)]
        else:
            assert result == sent_back(name, arguments, run.producer)


@pytest.mark.parametrize("producer", producers())
def test_show(run: Run) -> None:
    """`spanscore show` tells the same story: each turn's user message and answer, every call
    with its arguments and the model's call id, the parallel pair, the error and its message."""
    from click.testing import CliRunner

    from spanscore.cli import main

    shown = CliRunner().invoke(main, ["show", CONVERSATION_ID, "--lake", str(run.lake)])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert [line for line in lines if line.startswith(("turn ", "  answer: "))] == [
        line
        for index, turn in enumerate(PLAN.turns)
        for line in (f"turn {index + 1}  user: {turn.user}", f"  answer: {turn.reply}")
    ]
    assert not [line for line in lines if line.startswith("warning:")]
    for _, name, arguments in planned_calls():
        call_id = run.call_id(name, arguments)
        (at,) = [i for i, line in enumerate(lines) if f" tool {name}  {call_id} " in line]
        assert ("[parallel group" in lines[at]) == (name == "get_order"), lines[at]
        shown_args = lines[at + 1].lstrip(" │")
        assert shown_args.startswith("args   ")
        assert json.loads(shown_args.removeprefix("args   ")) == arguments  # 100 == 100.0
        if "error" in OUTCOME[_key(name, arguments)] and run.producer.tool_spans:
            assert lines[at + 2].lstrip(" │").startswith("ERROR  "), lines[at + 2]
            assert MISSING in lines[at + 2]


HANDOFF_CONVERSATION = "producers-handoff-1"
HANDOFF_ASK = "Please refund order ORD-1001, it arrived broken."
HANDOFF_REPLY = "I refunded ORD-1001."


def test_openinference_agents_hand_off(
    producer_venvs: dict[str, Venv], make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    """OpenInference's Agents SDK instrumentation, a hand-off: triage transfers the turn to
    billing, which refunds and answers. One turn, with the hand-off as a step between the
    transfer and billing's tool call, in the builder and the views alike."""
    from ..support.agreement import agree_all

    venv = producer_venvs["openinference-agents"]
    if venv.unreachable:
        pytest.skip(venv.unreachable)
    assert venv.python is not None, venv.failed
    plan = Conversation(
        HANDOFF_CONVERSATION,
        "agents_handoff",
        [
            Turn(
                HANDOFF_ASK,
                [[("transfer_to_billing", {})], [("refund_order", {"order_id": "ORD-1001"})]],
                HANDOFF_REPLY,
            )
        ],
    )
    collector = make_collector()
    with ScriptedLLM(ScriptedPolicy([plan])) as llm:
        executed = run_producer(
            venv,
            {
                "producer": "openinference-agents-handoff",
                "llm_base_url": llm.base_url,
                "otlp_endpoint": f"http://127.0.0.1:{collector.http_port}",
                "service_name": "producer-openinference-agents-handoff",
                "model": MODEL,
                "conversation_id": HANDOFF_CONVERSATION,
                "turns": [{"user": HANDOFF_ASK}],
                "outcomes": [
                    {
                        "name": "refund_order",
                        "arguments": {"order_id": "ORD-1001"},
                        "result": {"order_id": "ORD-1001", "refunded": True},
                    }
                ],
            },
        )
        assert not llm.errors, llm.errors
    assert [(c["name"], c["arguments"]) for c in executed] == [
        ("refund_order", {"order_id": "ORD-1001"})
    ]
    [trajectory] = agree_all(lake_dir, [HANDOFF_CONVERSATION])
    [turn] = trajectory.turns
    assert (turn.user_message, turn.final_response) == (HANDOFF_ASK, HANDOFF_REPLY)
    steps = [
        (type(s).__name__, getattr(s, "name", None) if not isinstance(s, Handoff) else None)
        for s in turn.steps
    ]
    assert [s for s in steps if s[0] != "ModelCall"] == [
        ("ToolCall", "transfer_to_billing"),
        ("Handoff", None),
        ("ToolCall", "refund_order"),
    ], steps
    [handoff] = [s for s in turn.steps if isinstance(s, Handoff)]
    assert (handoff.from_agent, handoff.to_agent) == ("triage", "billing")
    refund = next(c for c in turn.tool_calls if c.name == "refund_order")
    assert (refund.arguments, refund.result, refund.call_id) == (
        {"order_id": "ORD-1001"},
        {"order_id": "ORD-1001", "refunded": True},
        executed[0]["id"],
    )


SMOLAGENTS_CONVERSATION = "producers-smolagents-model-1"
SHIPPED = "order ORD-1 cannot be cancelled: already shipped"
SMOLAGENTS_PLAN = [
    {
        "user": "Where are my orders ORD-1 and ORD-2?",
        "steps": [
            [
                {"name": "get_order", "arguments": {"order_id": "ORD-1"}},
                {"name": "get_order", "arguments": {"order_id": "ORD-2"}},
            ]
        ],
        "reply": "ORD-1 has shipped; ORD-2 is being packed.",
    },
    {
        "user": "Please cancel ORD-1.",
        "steps": [[{"name": "cancel_order", "arguments": {"order_id": "ORD-1"}}]],
        "reply": "ORD-1 cannot be cancelled: it has already shipped.",
    },
]
SMOLAGENTS_OUTCOMES = [
    {
        "name": "get_order",
        "arguments": {"order_id": "ORD-1"},
        "result": {"order_id": "ORD-1", "status": "shipped"},
    },
    {
        "name": "get_order",
        "arguments": {"order_id": "ORD-2"},
        "result": {"order_id": "ORD-2", "status": "packed"},
    },
    {"name": "cancel_order", "arguments": {"order_id": "ORD-1"}, "error": SHIPPED},
]


def test_smolagents_scripted_base_model(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    """smolagents with its base `Model` scripted as a user writes it (`generate` replaced
    before instrumenting; tool calls' arguments as dicts, which OpenInference's model span
    records only in its `output.value`), `@tool` tools, `max_steps=4`, two
    `run(task, reset=False)` turns in one session: each turn's answer is its `final_answer`
    call's, the parallel `get_order` calls are one group, and the `RuntimeError` a tool raised
    keeps its message."""
    venv = build_venv("smolagents")
    if venv.unreachable:
        pytest.skip(venv.unreachable)
    assert venv.python is not None, venv.failed
    collector = make_collector()
    executed = run_producer(
        venv,
        {
            "producer": "smolagents-model",
            "otlp_endpoint": f"http://127.0.0.1:{collector.http_port}",
            "service_name": "producer-smolagents-model",
            "model": MODEL,
            "conversation_id": SMOLAGENTS_CONVERSATION,
            "turns": [{"user": turn["user"]} for turn in SMOLAGENTS_PLAN],
            "plan": SMOLAGENTS_PLAN,
            "outcomes": SMOLAGENTS_OUTCOMES,
        },
    )
    assert sorted((c["turn"], c["name"], c["arguments"]["order_id"]) for c in executed) == [
        (0, "get_order", "ORD-1"),
        (0, "get_order", "ORD-2"),
        (1, "cancel_order", "ORD-1"),
    ]
    from ..support.agreement import agree_all

    [trajectory] = agree_all(lake_dir, [SMOLAGENTS_CONVERSATION])
    assert trajectory.warnings == []
    assert [(t.user_message, t.final_response) for t in trajectory.turns] == [
        (turn["user"], turn["reply"]) for turn in SMOLAGENTS_PLAN
    ]
    ids = {(c["name"], c["arguments"]["order_id"]): c["id"] for c in executed}
    got = [
        (turn.index, c.name, c.arguments, c.result, c.error, c.call_id)
        for turn in trajectory.turns
        for c in turn.tool_calls
    ]
    assert sorted(got[:2], key=lambda c: c[2]["order_id"]) == [
        (
            0,
            "get_order",
            o["arguments"],
            o["result"],
            None,
            ids["get_order", o["arguments"]["order_id"]],
        )
        for o in SMOLAGENTS_OUTCOMES[:2]
    ]
    assert got[2:] == [
        (
            1,
            "cancel_order",
            {"order_id": "ORD-1"},
            None,
            "RuntimeError",
            ids["cancel_order", "ORD-1"],
        )
    ]
    first, second, cancel = trajectory.tool_calls
    assert first.parallel_group is not None
    assert first.parallel_group == second.parallel_group != cancel.parallel_group
    # its own words, once: not the status description's "RuntimeError: <message>"
    assert cancel.error_message == SHIPPED
    con = connect(lake_dir)
    try:
        view = con.execute(
            "SELECT tool_name, error_message FROM tool_calls WHERE error IS NOT NULL"
        ).fetchall()
    finally:
        con.close()
    assert view == [("cancel_order", SHIPPED)]
    from click.testing import CliRunner

    from spanscore.cli import main

    shown = CliRunner().invoke(main, ["show", SMOLAGENTS_CONVERSATION, "--lake", str(lake_dir)])
    assert shown.exit_code == 0, shown.output
    lines = [line.lstrip(" │├└─") for line in shown.output.splitlines()]
    assert [line for line in lines if line.startswith(("answer: ", "warning:", "ERROR "))] == [
        f"answer: {SMOLAGENTS_PLAN[0]['reply']}",
        f"ERROR  RuntimeError: {SHIPPED}",
        f"answer: {SMOLAGENTS_PLAN[1]['reply']}",
    ], shown.output
