"""The canonical message, and the readers every convention shares.

Messages of every convention are first turned into one canonical list
(`{"role", "text", "tool_calls": [{"id", "name", "arguments"}], "tool_results": [{"id",
"result"}]}`), from which `summarize_messages` reads the model call's new user message,
requested tool calls, received tool results and response text the same way for all.

Here too: what is read from values whatever the convention (JSON that may be text, a Python
call's bound arguments, a provider's content blocks), and the agents' own framings (a user
message wrapped in the agent's prompt, a tool whose call is the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

Message = dict[str, Any]
MessageReader = Callable[
    [Mapping[str, Any], list[dict[str, Any]]], tuple[list[Message], list[Message]]
]


def json_or_value(value: Any) -> Any:
    """`value` parsed when it is JSON text (producers send JSON as strings or not at all);
    anything else, as it is."""
    if isinstance(value, str | bytes):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


# How some agents frame the user's message to the model: (what precedes the user's words, what
# may follow them). smolagents: "New task:\n" + the task; CrewAI: "\nCurrent Task: " + the
# task's description, then the expected output, or its instructions to begin.
USER_MESSAGE_FRAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("New task:\n", ()),
    (
        "\nCurrent Task: ",
        (
            "\n\nThis is the expected criteria for your final answer: ",
            "\n\nBegin! This is VERY important to you",
            "\n\nProvide your complete response:",
        ),
    ),
)

# Tools whose call is the agent's answer to the user, not an action: name -> the argument
# holding the answer (smolagents ends every run with `final_answer`). A requested call of one
# is the model call's response text; the tool's own span is no tool call.
ANSWER_TOOLS = {"final_answer": "answer"}


def unwrap_arguments(value: Any) -> Any:
    """A tool's arguments without a `{"args": [...], "kwargs": {...}}` wrapper: the bound
    parameters of a Python call, as OpenInference's smolagents instrumentation and
    Traceloop's decorators record a tool's input (other keys beside them are the wrapper's
    own flags). Keyword arguments when there are no positional ones, and the reverse; with
    both, the wrapper is kept (there is no single arguments value)."""
    parsed = json_or_value(value)
    unwrapped = _unwrapped(parsed)
    return value if unwrapped is parsed else unwrapped


def _unwrapped(parsed: Any) -> Any:
    """`unwrap_arguments` of parsed JSON: `parsed` itself when it is no wrapper."""
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(parsed.get("kwargs"), dict):
        return parsed["kwargs"]  # LlamaIndex's tool spans: keyword arguments only
    if not (isinstance(parsed, dict) and "args" in parsed and "kwargs" in parsed):
        return parsed
    args, kwargs = parsed["args"], parsed["kwargs"]
    if not args and isinstance(kwargs, dict):
        return kwargs
    if not kwargs and isinstance(args, list):
        return args
    return parsed


def arguments_json(text: str) -> bytes:
    """A tool span's arguments as JSON text for the JSON column, unwrapped
    (`unwrap_arguments`): JSON passes through, a text that is not JSON (a Python repr, say) is
    kept as a JSON string. Reads the text once: it runs for every tool span."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return orjson.dumps(text)  # not JSON (a Python repr, say): kept as a JSON string
    unwrapped = _unwrapped(parsed)
    return text.encode() if unwrapped is parsed else orjson.dumps(unwrapped)


def tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id if isinstance(call_id, str) and call_id else None,
        "name": name if isinstance(name, str) else None,
        "arguments": json_or_value(arguments),
    }


# --- provider-shaped content ------------------------------------------------------------------
# Producers that pass their provider's content through put it in messages as is: Bedrock
# Converse blocks (Strands: `{"text"}`, `{"toolUse"}`, `{"toolResult"}`), Anthropic blocks
# (`{"type": "text" | "tool_use" | "tool_result"}`, OpenAI's text parts too), google.genai
# `Content` (`{"parts": [{"text"}, {"function_call"}, {"function_response"}]}`). Read here,
# once, into the canonical message's text, tool calls and tool results.


def unwrap_result(value: Any) -> Any:
    """A tool's output without its provider's wrapping: one text block (`[{"text": ...}]`,
    `[{"type": "text", "text": ...}]`) is its text, parsed when it is JSON; one `{"json": v}`
    block is `v`. Anything else is kept as it is."""
    parsed = json_or_value(value)
    if isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], dict):
        block = parsed[0]
        if "json" in block and len(block) == 1:
            return block["json"]
        text = block.get("text")
        if isinstance(text, str) and set(block) <= {"text", "type"}:
            return json_or_value(text)
    return parsed


# LlamaIndex's `ToolOutput`, as its instrumentation records a tool's output: the value the
# function returned is `raw_output` (`blocks` holds it as text, `raw_input` the call).
_TOOL_OUTPUT_KEYS = frozenset({"blocks", "tool_name", "raw_input", "raw_output"})


def unwrap_tool_output(value: str) -> str:
    """A tool result recorded as a LlamaIndex `ToolOutput`: what the function returned (as
    JSON text, or the text it returned). Anything else is returned unchanged."""
    parsed = json_or_value(value)
    if isinstance(parsed, dict) and _TOOL_OUTPUT_KEYS.issubset(parsed):
        raw = parsed["raw_output"]
        return raw if isinstance(raw, str) else orjson.dumps(raw, default=str).decode()
    return value


def _block_result(content: Any) -> Any:
    return unwrap_result(content) if isinstance(content, list) else json_or_value(content)


def content_blocks(value: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """(texts, tool calls, tool results) of a provider's content: a list of blocks, or a
    google.genai `Content` (a dict with `parts`)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    if isinstance(value, dict) and isinstance(value.get("parts"), list):
        value = value["parts"]
    for block in value if isinstance(value, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        call = block.get("toolUse") or block.get("function_call") or block.get("functionCall")
        answer = (
            block.get("toolResult")
            or block.get("function_response")
            or block.get("functionResponse")
        )
        if isinstance(block.get("text"), str) and kind in (None, "text"):
            texts.append(block["text"])
        elif isinstance(call, dict):
            calls.append(
                tool_call(
                    call.get("toolUseId") or call.get("id"),
                    call.get("name"),
                    call.get("input", call.get("args")),
                )
            )
        elif kind == "tool_use":
            calls.append(tool_call(block.get("id"), block.get("name"), block.get("input")))
        elif kind == "tool-call":  # the Vercel AI SDK
            arguments = block.get("input", block.get("args"))
            calls.append(tool_call(block.get("toolCallId"), block.get("toolName"), arguments))
        elif kind == "tool-result":
            output = block.get("output", block.get("result"))
            if isinstance(output, dict) and "type" in output and "value" in output:
                output = output["value"]  # {"type": "json" | "text" | "error-text" | ..., ...}
            results.append({"id": block.get("toolCallId"), "result": json_or_value(output)})
        elif isinstance(answer, dict):
            result = answer.get("content", answer.get("response"))
            results.append(
                {"id": answer.get("toolUseId") or answer.get("id"), "result": _block_result(result)}
            )
        elif kind == "tool_result":
            results.append(
                {"id": block.get("tool_use_id"), "result": _block_result(block.get("content"))}
            )
    return texts, calls, results


def as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def summarize_messages(
    inputs: list[Message], outputs: list[Message]
) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(latest user message, tool calls requested, tool results received, response text)."""
    # The latest user message with words: a user message may carry only tool results
    # (Anthropic's and Bedrock's way of sending them back).
    user = next(
        (
            m.get("text")
            for m in reversed(inputs)
            if m.get("role") == "user" and m.get("text") is not None
        ),
        None,
    )
    if user is not None:
        for before, after in USER_MESSAGE_FRAMES:
            if user.startswith(before):
                user = user[len(before) :]
                for end in after:
                    user = user.split(end, 1)[0]
                break
    requested = []
    texts = [m["text"] for m in outputs if isinstance(m.get("text"), str)]
    for m in outputs:
        for call in m.get("tool_calls", []):
            answer_key = ANSWER_TOOLS.get(call.get("name"))
            arguments = call.get("arguments")
            if answer_key is not None and isinstance(arguments, dict) and answer_key in arguments:
                answer = arguments[answer_key]
                texts.append(answer if isinstance(answer, str) else as_text(answer) or "")
            else:
                requested.append(call)
    results = [r for m in inputs for r in m.get("tool_results", [])]
    return user, requested, results, ("\n".join(texts) if texts else None)
