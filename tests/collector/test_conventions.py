"""Convention mappers: every producer's attributes land in the same extracted columns.

The attribute shapes are those the producers write (OpenTelemetry GenAI semantic conventions,
openinference-instrumentation-openai / -openai-agents, opentelemetry-instrumentation-openai
from OpenLLMetry, old and new).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spanscore.collector.conventions import FIELDS, Extractor


def extract(
    attrs: dict[str, Any],
    name: str = "span",
    events: list[dict[str, Any]] | None = None,
    *,
    conversation_attribute: str | None = None,
    is_error: bool = False,
    exception_type: str | None = None,
) -> dict[str, Any]:
    values = Extractor(conversation_attribute).extract(
        attrs, name, is_error, exception_type, "trace-1", events or []
    )
    out = dict(zip(FIELDS, values, strict=True))
    for key in ("tool_arguments", "tool_calls_requested", "tool_results"):
        if isinstance(out[key], bytes):
            out[key] = json.loads(out[key])
    return out


GENAI_CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.conversation.id": "conv-1",
    "gen_ai.input.messages": json.dumps(
        [
            {"role": "user", "parts": [{"type": "text", "content": "Where is ORD-1?"}]},
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": "c1", "name": "get_order", "arguments": {"id": 1}}
                ],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "c1", "response": "ok"}],
            },
            # `result` instead of `response`: some producers write that
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c0", "result": [1]}]},
            {"role": "user", "parts": [{"type": "text", "content": "And ORD-2?"}]},
        ]
    ),
    "gen_ai.output.messages": json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Checking."},
                    {"type": "tool_call", "id": "c2", "name": "get_order", "arguments": {"id": 2}},
                    {"type": "tool_call", "id": "c3", "name": "get_order", "arguments": {"id": 3}},
                ],
                "finish_reason": "tool_call",
            }
        ]
    ),
}

GENAI_EVENTS = [
    {"name": "gen_ai.user.message", "attributes": {"content": "Cancel ORD-7"}},
    {
        "name": "gen_ai.assistant.message",
        "attributes": {
            "gen_ai.event.content": json.dumps(
                {
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "verify", "arguments": "{}"},
                        }
                    ]
                }
            )
        },
    },
    {"name": "gen_ai.tool.message", "attributes": {"id": "a", "content": '{"verified": true}'}},
    {
        "name": "gen_ai.choice",
        "attributes": {
            "gen_ai.event.content": json.dumps(
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "tool_calls": [
                            {
                                "id": "b",
                                "type": "function",
                                "function": {
                                    "name": "cancel_order",
                                    "arguments": '{"order_id": "ORD-7"}',
                                },
                            }
                        ]
                    },
                }
            )
        },
    },
]

OPENINFERENCE_LLM = {
    "openinference.span.kind": "LLM",
    "session.id": "sess-9",
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "You are helpful.",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.contents.0.message_content.type": "text",
    "llm.input_messages.1.message.contents.0.message_content.text": "Find a mouse",
    "llm.input_messages.2.message.role": "assistant",
    "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call_s",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "search",
    "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"q": "mouse"}',
    "llm.input_messages.3.message.role": "tool",
    "llm.input_messages.3.message.tool_call_id": "call_s",
    "llm.input_messages.3.message.content": '[{"sku": "SKU-1"}]',
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.content": "The wireless mouse is $25.",
    "input.value": '{"messages": []}',
}

TRACELOOP_LEGACY = {
    "llm.request.type": "chat",
    "gen_ai.system": "openai",
    "traceloop.association.properties.session_id": "tl-1",
    "gen_ai.prompt.0.role": "user",
    "gen_ai.prompt.0.content": "Verify me",
    "gen_ai.completion.0.role": "assistant",
    "gen_ai.completion.0.finish_reason": "tool_calls",
    "gen_ai.completion.0.tool_calls.0.id": "t1",
    "gen_ai.completion.0.tool_calls.0.name": "send_code",
    "gen_ai.completion.0.tool_calls.0.arguments": '{"email": "a@b.c"}',
    "gen_ai.completion.0.tool_calls.1.id": "t2",
    "gen_ai.completion.0.tool_calls.1.name": "lookup",
    "gen_ai.completion.0.tool_calls.1.arguments": '{"email": "a@b.c"}',
}


def test_genai_current_messages() -> None:
    out = extract(GENAI_CHAT, "chat gpt-4.1")
    assert out["convention"] == "genai"
    assert out["operation"] == "chat"
    assert out["conversation_id"] == "conv-1"
    assert out["user_message"] == "And ORD-2?"
    assert out["tool_calls_requested"] == [
        {"id": "c2", "name": "get_order", "arguments": {"id": 2}},
        {"id": "c3", "name": "get_order", "arguments": {"id": 3}},
    ]
    assert out["tool_results"] == [{"id": "c1", "result": "ok"}, {"id": "c0", "result": [1]}]
    assert out["response_text"] == "Checking."
    assert out["tool_name"] is None  # a model call is not a tool call


def test_genai_deprecated_span_events() -> None:
    out = extract(
        {"gen_ai.system": "openai", "gen_ai.operation.name": "chat"}, "chat", GENAI_EVENTS
    )
    assert out["user_message"] == "Cancel ORD-7"
    assert out["tool_calls_requested"] == [
        {"id": "b", "name": "cancel_order", "arguments": {"order_id": "ORD-7"}}
    ]
    assert out["tool_results"] == [{"id": "a", "result": {"verified": True}}]


def test_openinference_llm_span() -> None:
    out = extract(OPENINFERENCE_LLM, "ChatCompletion")
    assert out["convention"] == "openinference"
    assert out["operation"] == "chat"
    assert out["conversation_id"] == "sess-9"
    assert out["user_message"] == "Find a mouse"
    assert out["tool_results"] == [{"id": "call_s", "result": [{"sku": "SKU-1"}]}]
    assert out["response_text"] == "The wireless mouse is $25."
    assert out["tool_arguments"] is None  # input.value of a model call is not tool arguments


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        # openinference-instrumentation-openai-agents: function spans carry no call id
        (
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "get_order",
                "input.value": '{"order_id": "ORD-1"}',
                "output.value": '{"status": "shipped"}',
            },
            ("execute_tool", "get_order", None, {"order_id": "ORD-1"}, '{"status": "shipped"}'),
        ),
        # a TOOL span with an id and tool_call.* attributes
        (
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "lookup",
                "tool.id": "call_9",
                "input.value": "{'email': 'x@y.z'}",  # a Python repr: kept as a JSON string
                "output.value": "Customer(id=1)",
            },
            ("execute_tool", "lookup", "call_9", "{'email': 'x@y.z'}", "Customer(id=1)"),
        ),
        # OTel GenAI execute_tool without gen_ai.operation.name: the span name says it
        (
            {"gen_ai.tool.name": "cancel", "gen_ai.tool.call.arguments": '{"a": 1.0}'},
            ("execute_tool", "cancel", None, {"a": 1.0}, None),
        ),
        # OpenLLMetry tool span (traceloop-sdk's @tool): the entity is the tool
        (
            {"traceloop.span.kind": "tool", "traceloop.entity.name": "verify_customer"},
            ("execute_tool", "verify_customer", None, None, None),
        ),
    ],
    ids=[
        "openinference-agents-tool",
        "openinference-repr-args",
        "genai-no-operation",
        "traceloop-tool",
    ],
)
def test_tool_spans(attrs: dict[str, Any], expected: tuple[Any, ...]) -> None:
    out = extract(attrs, "execute_tool x")
    assert (
        out["operation"],
        out["tool_name"],
        out["tool_call_id"],
        out["tool_arguments"],
        out["tool_result"],
    ) == expected


def test_traceloop_legacy_indexed_messages() -> None:
    out = extract(TRACELOOP_LEGACY, "openai.chat")
    assert out["convention"] == "openllmetry"
    assert out["operation"] == "chat"
    assert out["conversation_id"] == "tl-1"
    assert out["user_message"] == "Verify me"
    assert [c["name"] for c in out["tool_calls_requested"]] == ["send_code", "lookup"]


@pytest.mark.parametrize(
    ("attrs", "configured", "expected"),
    [
        ({"gen_ai.conversation.id": "g", "session.id": "s"}, None, "g"),
        ({"session.id": "s", "traceloop.association.properties.session_id": "t"}, None, "s"),
        ({"traceloop.association.properties.session_id": "t", "thread": "x"}, "thread", "t"),
        ({"thread": "x"}, "thread", "x"),
        ({"thread": 42}, "thread", "42"),
        ({}, None, "trace-1"),
    ],
    ids=["genai-first", "session-next", "traceloop-next", "configured", "non-string", "trace"],
)
def test_conversation_identity_order(
    attrs: dict[str, Any], configured: str | None, expected: str
) -> None:
    assert extract(attrs, conversation_attribute=configured)["conversation_id"] == expected


@pytest.mark.parametrize(
    "raw",
    ["not json", '[{"role": "user"', "{}", '[1, "x", null]'],
    ids=["text", "truncated", "object", "odd-items"],
)
def test_malformed_messages_are_ignored_not_fatal(raw: str) -> None:
    out = extract({"gen_ai.operation.name": "chat", "gen_ai.input.messages": raw}, "chat")
    assert out["convention"] == "genai"
    assert out["user_message"] is None


def test_error_type_falls_back_to_the_exception() -> None:
    out = extract({"gen_ai.tool.name": "x"}, is_error=True, exception_type="ToolError")
    assert out["error_type"] == "ToolError"
    assert (
        extract({"gen_ai.tool.name": "x", "error.type": "Timeout"}, is_error=True)["error_type"]
        == "Timeout"
    )


@pytest.mark.parametrize(
    ("recorded", "arguments"),
    [
        ({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"q": "x"}}, {"q": "x"}),
        ({"args": ["x", 2], "kwargs": {}}, ["x", 2]),
        ({"args": ["x"], "kwargs": {"n": 2}}, {"args": ["x"], "kwargs": {"n": 2}}),  # both: kept
        ({"args": [], "query": "x"}, {"args": [], "query": "x"}),  # not the wrapper
        ({"kwargs": {"q": "x"}}, {"q": "x"}),  # LlamaIndex: keyword arguments only
        ({"kwargs": {"q": "x"}, "n": 1}, {"kwargs": {"q": "x"}, "n": 1}),  # not the wrapper
    ],
)
def test_tool_input_of_a_python_call_is_unwrapped(recorded: Any, arguments: Any) -> None:
    row = extract(
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search",
            "input.value": json.dumps(recorded),
        },
        name="SimpleTool",
    )
    assert row["tool_arguments"] == arguments


def test_an_answer_tool_is_the_answer_not_a_tool_call() -> None:
    """smolagents: the model answers by calling `final_answer`; its tool span is no tool call."""
    llm = extract(
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.text": "New task:\nHi",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "final_answer",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": json.dumps(
                {"answer": "Hello"}
            ),
        }
    )
    assert (llm["user_message"], llm["tool_calls_requested"], llm["response_text"]) == (
        "Hi",
        None,
        "Hello",
    )
    tool = extract(
        {"openinference.span.kind": "TOOL", "tool.name": "final_answer", "output.value": "Hello"}
    )
    assert (tool["operation"], tool["tool_name"]) == (None, None)


def test_call_arguments_recorded_only_in_the_output_value_are_read_from_it() -> None:
    """smolagents with a model that is a Python function: its `ChatMessage` holds the calls'
    arguments as dicts, which OpenInference leaves out of `tool_call.function.arguments` (text
    only) and keeps in `output.value`, the message's JSON: the requested calls' arguments
    and a `final_answer` call's answer are read from there (by call id)."""

    def llm(calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        prefix = "llm.output_messages.0.message.tool_calls"
        attrs: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.text": "New task:\nHi",
            "llm.output_messages.0.message.role": "assistant",
            "output.value": json.dumps(
                {
                    "role": "assistant",
                    "content": None,
                    # in another order than the attributes: matched by id
                    "tool_calls": [
                        {"function": {"arguments": a, "name": n}, "id": i, "type": "function"}
                        for i, n, a in reversed(calls)
                    ],
                    "raw": None,
                }
            ),
        }
        for k, (call_id, name, _) in enumerate(calls):
            attrs[f"{prefix}.{k}.tool_call.id"] = call_id
            attrs[f"{prefix}.{k}.tool_call.function.name"] = name
        return extract(attrs, name="Model.generate")

    pair = llm([("c1", "get_order", {"order_id": "ORD-1"}), ("c2", "get_order", {"order_id": "2"})])
    assert pair["tool_calls_requested"] == [
        {"id": "c1", "name": "get_order", "arguments": {"order_id": "ORD-1"}},
        {"id": "c2", "name": "get_order", "arguments": {"order_id": "2"}},
    ]
    answer = llm([("c3", "final_answer", {"answer": "ORD-1 has shipped."})])
    assert (answer["tool_calls_requested"], answer["response_text"]) == (
        None,
        "ORD-1 has shipped.",
    )


def test_traceloop_sdk_tool_span_input_and_output() -> None:
    """traceloop-sdk's @tool: name, bound call (unwrapped) and return value are the tool call."""
    row = extract(
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_order",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order_id": "A1"}}),
            "traceloop.entity.output": json.dumps({"status": "shipped"}),
        },
        name="get_order.tool",
    )
    assert (row["operation"], row["tool_name"], row["tool_arguments"], row["convention"]) == (
        "execute_tool",
        "get_order",
        {"order_id": "A1"},
        "openllmetry",
    )
    assert json.loads(row["tool_result"]) == {"status": "shipped"}
    workflow = extract(
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "turn",
            "traceloop.entity.input": json.dumps({"args": ["hi"], "kwargs": {}}),
        }
    )
    assert (workflow["tool_name"], workflow["tool_arguments"]) == (None, None)


def test_pydantic_ai_deprecated_tool_attributes() -> None:
    row = extract(
        {
            "gen_ai.tool.name": "get_order",
            "gen_ai.tool.call.id": "call_1",
            "tool_arguments": json.dumps({"order_id": "A1"}),
            "tool_response": json.dumps({"status": "shipped"}),
        },
        name="running tool",
    )
    assert (row["operation"], row["tool_call_id"], row["tool_arguments"]) == (
        "execute_tool",
        "call_1",
        {"order_id": "A1"},
    )
    assert json.loads(row["tool_result"]) == {"status": "shipped"}


def test_choice_event_with_tool_calls_beside_the_message() -> None:
    """OpenLLMetry with content in events: `tool_calls` sit beside `message`, not inside it."""
    calls = [{"id": "c1", "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'}}]
    row = extract(
        {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"},
        events=[
            {
                "name": "gen_ai.choice",
                "attributes": {
                    "message": json.dumps({"role": "assistant", "content": None}),
                    "tool_calls": json.dumps(calls),
                },
            }
        ],
    )
    assert row["tool_calls_requested"] == [
        {"id": "c1", "name": "get_order", "arguments": {"order_id": "A1"}}
    ]


# --- Strands Agents (strands-agents 1.62), its three convention settings ----------------------
# Shapes as its tracer writes them (recorded from a real run with a scripted model).

STRANDS_COMMON = {
    "gen_ai.system": "strands-agents",
    "session.id": "conv-s",
}
_BLOCKS_IN = [
    ("gen_ai.user.message", {"content": json.dumps([{"text": "where are my orders?"}])}),
    (
        "gen_ai.assistant.message",
        {
            "content": json.dumps(
                [{"toolUse": {"toolUseId": "tu_1", "name": "get_order", "input": {"id": "A"}}}]
            )
        },
    ),
    (
        "gen_ai.tool.message",
        {
            "content": json.dumps(
                [
                    {
                        "toolResult": {
                            "toolUseId": "tu_1",
                            "status": "success",
                            "content": [{"text": '{"status": "shipped"}'}],
                        }
                    }
                ]
            )
        },
    ),
]


def _events(pairs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"name": name, "attributes": attributes} for name, attributes in pairs]


def test_strands_default_events_with_bedrock_content_blocks() -> None:
    choice = (
        "gen_ai.choice",
        {
            "finish_reason": "tool_use",
            "message": json.dumps(
                [
                    {"text": "Let me look."},
                    {"toolUse": {"toolUseId": "tu_2", "name": "get_order", "input": {"id": "B"}}},
                    {"toolUse": {"toolUseId": "tu_3", "name": "get_order", "input": {"id": "C"}}},
                ]
            ),
        },
    )
    out = extract(
        {**STRANDS_COMMON, "gen_ai.operation.name": "chat"},
        "chat",
        _events([*_BLOCKS_IN, choice]),
    )
    assert out["conversation_id"] == "conv-s"
    assert out["user_message"] == "where are my orders?"
    assert out["tool_calls_requested"] == [
        {"id": "tu_2", "name": "get_order", "arguments": {"id": "B"}},
        {"id": "tu_3", "name": "get_order", "arguments": {"id": "C"}},
    ]
    # The tool's result, unwrapped from its single text block and parsed.
    assert out["tool_results"] == [{"id": "tu_1", "result": {"status": "shipped"}}]
    assert out["response_text"] == "Let me look."


def test_strands_default_tool_span_reads_its_events() -> None:
    out = extract(
        {
            **STRANDS_COMMON,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "cancel_order",
            "gen_ai.tool.call.id": "tu_9",
        },
        "execute_tool cancel_order",
        _events(
            [
                ("gen_ai.tool.message", {"role": "tool", "content": '{"order_id": "A"}'}),
                (
                    "gen_ai.choice",
                    {"message": '[{"text": "Error: RuntimeError - shipped"}]', "id": "tu_9"},
                ),
            ]
        ),
        is_error=True,
        exception_type="RuntimeError",
    )
    assert out["operation"] == "execute_tool"
    assert (out["tool_name"], out["tool_call_id"]) == ("cancel_order", "tu_9")
    assert out["tool_arguments"] == {"order_id": "A"}
    assert out["tool_result"] == "Error: RuntimeError - shipped"
    assert out["error_type"] == "RuntimeError"


def test_strands_latest_conventions_as_span_events() -> None:
    # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: the whole lists, as span events
    # named gen_ai.client.inference.operation.details (one for the input, one for the output).
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "where are my orders?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "name": "get_order", "id": "tu_1", "arguments": {}}],
        },
        {
            "role": "user",  # tool results travel in a user message: not the user's words
            "parts": [
                {"type": "tool_call_response", "id": "tu_1", "response": [{"text": '{"a": 1}'}]}
            ],
        },
    ]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Both shipped."}],
            "finish_reason": "end_turn",
        }
    ]
    details = "gen_ai.client.inference.operation.details"
    out = extract(
        {**STRANDS_COMMON, "gen_ai.operation.name": "chat"},
        "chat",
        _events(
            [
                (details, {"gen_ai.input.messages": json.dumps(inputs)}),
                (details, {"gen_ai.output.messages": json.dumps(outputs)}),
            ]
        ),
    )
    assert out["user_message"] == "where are my orders?"
    assert out["tool_results"] == [{"id": "tu_1", "result": {"a": 1}}]
    assert out["response_text"] == "Both shipped."
    # gen_ai_span_attributes_only: the same lists as attributes, read the same way.
    as_attributes = extract(
        {
            **STRANDS_COMMON,
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        },
        "chat",
    )
    assert as_attributes == out


def test_strands_latest_tool_span_result_is_unwrapped() -> None:
    out = extract(
        {
            **STRANDS_COMMON,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_order",
            "gen_ai.tool.call.id": "tu_1",
            "gen_ai.tool.call.arguments": '{"order_id": "A"}',
            "gen_ai.tool.call.result": '[{"text": "{\\"status\\": \\"shipped\\"}"}]',
        },
        "execute_tool get_order",
    )
    assert out["tool_arguments"] == {"order_id": "A"}
    assert json.loads(out["tool_result"]) == {"status": "shipped"}


@pytest.mark.parametrize("operation", ["invoke_agent", "execute_event_loop_cycle"])
def test_agent_level_spans_never_add_requested_calls(operation: str) -> None:
    # An agent's span (and Strands' loop cycle) repeats its model calls' messages: counted
    # there, the calls were doubled in the tool_calls view and turns were split.
    out = extract(
        {
            **STRANDS_COMMON,
            "gen_ai.operation.name": operation,
            "gen_ai.input.messages": GENAI_CHAT["gen_ai.input.messages"],
            "gen_ai.output.messages": GENAI_CHAT["gen_ai.output.messages"],
        },
        operation,
    )
    assert out["operation"] == operation
    assert out["tool_calls_requested"] is None
    assert out["tool_results"] is None
    assert out["user_message"] == "And ORD-2?"  # kept: it says what the turn was about


def test_provider_content_blocks_anthropic_and_google() -> None:
    from spanscore.collector.conventions.messages import content_blocks, unwrap_result

    anthropic = [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"id": 1}},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_0",
            "content": [{"type": "text", "text": "7"}],
        },
    ]
    assert content_blocks(anthropic) == (
        ["Checking."],
        [{"id": "toolu_1", "name": "get_order", "arguments": {"id": 1}}],
        [{"id": "toolu_0", "result": 7}],
    )
    google = {
        "role": "model",
        "parts": [
            {"function_call": {"id": "fc1", "name": "get_order", "args": {"id": 2}}},
            {"function_response": {"id": "fc0", "name": "get_order", "response": {"ok": True}}},
        ],
    }
    assert content_blocks(google) == (
        [],
        [{"id": "fc1", "name": "get_order", "arguments": {"id": 2}}],
        [{"id": "fc0", "result": {"ok": True}}],
    )
    # Only a single text (or json) block is unwrapped; anything else is kept as it is.
    assert unwrap_result('[{"text": "plain words"}]') == "plain words"
    assert unwrap_result([{"json": {"a": 1}}]) == {"a": 1}
    assert unwrap_result([{"text": "a"}, {"text": "b"}]) == [{"text": "a"}, {"text": "b"}]
    assert unwrap_result([{"text": "a", "cache": True}]) == [{"text": "a", "cache": True}]


# --- Google ADK 2.13, its two schemas ----------------------------------------------------------


def test_adk_legacy_call_llm_reads_genai_contents() -> None:
    # ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1: the model call is `call_llm`, with the google.genai
    # request and response; the session id is `gcp.vertex.agent.session_id`.
    request = {
        "model": "gemini",
        "contents": [
            {"role": "user", "parts": [{"text": "where is A?"}]},
            {
                "role": "model",
                "parts": [{"function_call": {"id": "c1", "name": "get", "args": {}}}],
            },
            {
                "role": "user",
                "parts": [{"function_response": {"id": "c1", "name": "get", "response": {"a": 1}}}],
            },
        ],
    }
    response = {"content": {"role": "model", "parts": [{"text": "A is here."}]}}
    out = extract(
        {
            "gen_ai.system": "gcp.vertex.agent",
            "gcp.vertex.agent.session_id": "conv-adk",
            "gcp.vertex.agent.llm_request": json.dumps(request),
            "gcp.vertex.agent.llm_response": json.dumps(response),
        },
        "call_llm",
    )
    assert (out["convention"], out["operation"]) == ("adk", "chat")
    assert out["conversation_id"] == "conv-adk"
    # the tool results travel in a user message: the user's words are the earlier one
    assert out["user_message"] == "where is A?"
    assert out["tool_results"] == [{"id": "c1", "result": {"a": 1}}]
    assert out["response_text"] == "A is here."


def test_adk_legacy_tool_span_and_the_merged_span() -> None:
    tool = extract(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_order",
            "gen_ai.tool.call.id": "c1",
            "gcp.vertex.agent.tool_call_args": '{"order_id": "A"}',
            "gcp.vertex.agent.tool_response": '{"status": "shipped"}',
            "gcp.vertex.agent.llm_request": "{}",
        },
        "execute_tool get_order",
    )
    assert (tool["operation"], tool["tool_name"], tool["tool_call_id"]) == (
        "execute_tool",
        "get_order",
        "c1",
    )
    assert tool["tool_arguments"] == {"order_id": "A"}
    # The span wrapping the calls of one response, beside their own spans: no tool call.
    merged = extract(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "(merged tools)",
            "gen_ai.tool.call.id": "event-1",
            "gcp.vertex.agent.tool_call_args": "N/A",
        },
        "execute_tool (merged)",
    )
    assert merged["operation"] is None
    assert merged["tool_name"] is None


def test_elided_content_is_no_content() -> None:
    # ADK's legacy per-message log records, with content capture off, say "<elided>".
    from spanscore.collector.conventions import log_record_messages

    assert log_record_messages("gen_ai.user.message", {}, {"content": "<elided>"}) == (
        None,
        None,
        None,
        None,
    )
    assert log_record_messages("gen_ai.choice", {}, {"content": "<elided>", "index": 0}) == (
        None,
        None,
        None,
        None,
    )


# --- the Vercel AI SDK (ai 6.0 `experimental_telemetry`; ai 7's legacy integration) -----------

VERCEL_COMMON = {
    "ai.telemetry.functionId": "shop",
    "ai.telemetry.metadata.sessionId": "conv-v",
    "ai.model.provider": "mock-provider",
    "gen_ai.system": "mock-provider",
    "gen_ai.request.model": "mock-model-id",
}


def test_vercel_model_call_span() -> None:
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "where are my orders?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool-call", "toolCallId": "c0", "toolName": "get", "input": {"id": "A"}}
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "c0",
                    "toolName": "get",
                    "output": {"type": "json", "value": {"status": "shipped"}},
                },
                {
                    "type": "tool-result",
                    "toolCallId": "c9",
                    "toolName": "cancel",
                    "output": {"type": "error-text", "value": "already shipped"},
                },
            ],
        },
    ]
    out = extract(
        {
            **VERCEL_COMMON,
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.prompt.messages": json.dumps(prompt),
            "ai.response.toolCalls": json.dumps(
                [{"toolCallId": "c1", "toolName": "get", "input": '{"id": "B"}'}]
            ),
            "ai.response.text": "",
        },
        "ai.generateText.doGenerate",
    )
    assert (out["convention"], out["operation"]) == ("vercel-ai", "chat")
    assert out["conversation_id"] == "conv-v"
    assert out["agent_name"] == "shop"
    assert out["user_message"] == "where are my orders?"
    assert out["tool_calls_requested"] == [{"id": "c1", "name": "get", "arguments": {"id": "B"}}]
    assert out["tool_results"] == [
        {"id": "c0", "result": {"status": "shipped"}},
        {"id": "c9", "result": "already shipped"},
    ]
    assert out["response_text"] is None


def test_vercel_tool_span_and_the_whole_call() -> None:
    tool = extract(
        {
            **VERCEL_COMMON,
            "ai.operationId": "ai.toolCall",
            "ai.toolCall.name": "get",
            "ai.toolCall.id": "c1",
            "ai.toolCall.args": '{"id": "B"}',
            "ai.toolCall.result": '{"status": "shipped"}',
        },
        "ai.toolCall",
    )
    assert (tool["operation"], tool["tool_name"], tool["tool_call_id"]) == (
        "execute_tool",
        "get",
        "c1",
    )
    assert tool["tool_arguments"] == {"id": "B"}
    # The generateText span covers every step: an agent's span, never a model call.
    whole = extract(
        {
            **VERCEL_COMMON,
            "ai.operationId": "ai.generateText",
            "ai.prompt": json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
            "ai.response.text": "Both shipped.",
        },
        "ai.generateText",
    )
    assert whole["operation"] == "invoke_agent"
    assert (whole["user_message"], whole["response_text"]) == ("hi", "Both shipped.")
    assert whole["tool_calls_requested"] is None


def test_llamaindex_tool_output_and_request_preparation() -> None:
    """LlamaIndex under OpenInference: a tool's output is recorded as its `ToolOutput` (the
    return value is `raw_output`), and the LLM class's request preparation is an LLM span that
    calls no model."""
    output = {
        "blocks": [{"text": '{"status": "shipped"}'}],
        "tool_name": "get_order",
        "raw_input": {"args": [], "kwargs": {"order_id": "ORD-1"}},
        "raw_output": '{"status": "shipped"}',
        "is_error": False,
    }
    tool = extract(
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "get_order",
            "input.value": json.dumps({"kwargs": {"order_id": "ORD-1"}}),
            "output.value": json.dumps(output),
        },
        name="FunctionTool.acall",
    )
    assert (tool["tool_arguments"], tool["tool_result"]) == (
        {"order_id": "ORD-1"},
        '{"status": "shipped"}',
    )
    returned_a_list = extract(
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "search",
            "output.value": json.dumps(output | {"raw_output": [1, 2]}),
        },
        name="FunctionTool.acall",
    )
    assert returned_a_list["tool_result"] == "[1,2]"
    prepared = extract(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4.1-mini",
            "output.value": json.dumps({"messages": ["..."], "tools": []}),
        },
        name="OpenAI._prepare_chat_with_tools",
    )
    assert prepared["operation"] is None
    sent = extract(
        {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4.1-mini"},
        name="OpenAI.astream_chat",
    )
    assert sent["operation"] == "chat"


def test_openinference_agents_hand_off_is_a_hand_off_not_a_tool_call() -> None:
    """OpenInference's Agents SDK instrumentation writes a hand-off as a TOOL span named
    `handoff to <agent>`, the agent handing off in `input.value`."""
    row = extract(
        {
            "openinference.span.kind": "TOOL",
            "input.value": "triage",
            "output.value": "billing",
        },
        name="handoff to billing",
    )
    assert (row["operation"], row["agent_name"], row["tool_arguments"], row["tool_result"]) == (
        "handoff",
        "triage",
        None,
        None,
    )
    tool = extract({"openinference.span.kind": "TOOL", "tool.name": "handoff to x"}, name="t")
    assert tool["operation"] == "execute_tool"  # a tool that is named so stays a tool


def test_a_tool_result_that_is_a_json_string_is_that_string() -> None:
    """traceloop-sdk's `@tool` records `json.dumps` of what the function returned: a function
    that returns JSON text is recorded as a JSON string holding it."""
    row = extract(
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_order",
            "traceloop.entity.output": json.dumps(json.dumps({"status": "shipped"})),
        },
        name="get_order.tool",
    )
    assert row["tool_result"] == '{"status": "shipped"}'
    plain = extract(
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "t",
            "traceloop.entity.output": '"ok"',
        },
        name="t.tool",
    )
    assert plain["tool_result"] == "ok"
