"""A deterministic local stand-in for the OpenAI API, for the demo, the examples and the tests.

`ScriptedLLM` is a small threaded HTTP server on loopback that the real `openai` client (sync
and async) talks to as if it were the OpenAI API::

    with ScriptedLLM(ScriptedPolicy()) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test")

It serves `POST /v1/chat/completions` and `POST /v1/responses` (plain JSON or server-sent
events with `stream=true`, tool calls including parallel ones, token usage with prompt
caching), `POST /v1/embeddings` (deterministic hashed embeddings), the Files API
(`/v1/files`), the Batch API (`/v1/batches`) and `GET /v1/models`, and answers malformed
requests, unknown paths and unknown models with the status codes and error bodies of the real
API.

What the "model" answers is decided by a *policy*: a function that receives the request in one
simple form for both APIs (`LLMRequest`: messages with role, text, requested tool calls and tool
results, plus the tool definitions and the model) and returns either a final text or a list of
`(tool_name, arguments)` tool calls; the server assigns the call ids. `ScriptedPolicy` replays
the customer-service plans of `customer_service.scripted`.

Knobs simulate an unreliable or limited provider (for tests of code that calls an LLM): delays,
failures, garbage bodies, a capacity with 429s, requests that never get an answer, no
structured outputs, slow or held batches; counters say what happened. They are plain attributes
that may be changed while serving; `ScriptedLLM` lists them.

Run it by hand with ``python -m spanscore.examples.llm_server --port 8000`` (``--capacity 4
--delay-ms 200`` for a slow provider with a rate limit; ``--users 6`` for the simulated users of
any suite, `user_policy.ScenarioUsers`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import email.parser
import email.policy
import hashlib
import json
import math
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, TypeAlias, overload

from .customer_service.scripted import Conversation, Turn, conversations
from .customer_service.store import Store

DEFAULT_MODELS = ("gpt-4.1-mini", "gpt-4.1", "gpt-4o-mini", "gpt-4o")
DEFAULT_EMBEDDING_MODELS = ("text-embedding-3-small", "text-embedding-3-large")
CREATED = 1_767_225_600  # the fixed creation time of every answer (2026-01-01), for determinism
CHUNK_CHARS = 12  # streamed texts and tool arguments arrive in pieces of this many characters

CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
MODEL_PATHS = (CHAT_PATH, "/v1/responses", EMBEDDINGS_PATH)  # what `capacity` limits
BATCH_ENDPOINTS = MODEL_PATHS
EMBEDDING_DIMENSIONS = 256
MAX_EMBEDDING_DIMENSIONS = 3072
MAX_EMBEDDING_INPUTS = 2048
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data")
BATCH_TIMESTAMPS = (
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call an assistant message requested: call id, tool name, parsed arguments."""

    id: str
    name: str
    arguments: Any  # the parsed JSON; the string as sent when it is not JSON


@dataclass(frozen=True)
class Message:
    """One message of the conversation, the same for both APIs.

    `role` is "system" (also for "developer" messages and the Responses `instructions`),
    "user", "assistant" (with `text` and/or `tool_calls`: one model response) or "tool" (a tool
    result: `text` is the output, `tool_call_id` the call it answers).
    """

    role: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Tool:
    """A function tool offered to the model."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class LLMRequest:
    """What a policy decides on: the request of either API in one form (`body` is as sent)."""

    api: Literal["chat", "responses"]
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    body: dict[str, Any]


Reply: TypeAlias = str | list[tuple[str, dict[str, Any]]]
"""A policy's answer: a final text, or tool calls `(name, arguments)` requested together."""

Policy: TypeAlias = Callable[[LLMRequest], Reply]


class ScriptedPolicy:
    """Replays conversation plans: each model response is the plan's next step for that turn.

    The turn is the plan turn whose `user` text equals the latest user message; the step is
    the number of assistant tool-call responses since that message. Before the last step the
    answer is that step's tool calls (a "{code}" argument becomes the verification code the
    customer received), after it the turn's reply. An unknown user message gets `fallback`.
    """

    fallback = (
        "Sorry, I can only help with orders, products and account verification. "
        "Could you rephrase your question?"
    )

    def __init__(
        self,
        plans: Iterable[Conversation] | None = None,
        code_for: Callable[[str], str] | None = None,
    ) -> None:
        self.turns: dict[str, Turn] = {}
        for plan in conversations() if plans is None else plans:
            for turn in plan.turns:
                known = self.turns.setdefault(turn.user, turn)
                if known != turn:
                    raise ValueError(f"two different plan turns start with {turn.user!r}")
        self.code_for = code_for or Store().expected_code

    def __call__(self, request: LLMRequest) -> Reply:
        users = [i for i, m in enumerate(request.messages) if m.role == "user"]
        turn = self.turns.get(request.messages[users[-1]].text) if users else None
        if turn is None:
            return self.fallback
        since = request.messages[users[-1] + 1 :]
        step = sum(1 for m in since if m.role == "assistant" and m.tool_calls)
        if step >= len(turn.steps):
            return turn.reply
        return [(name, self._fill(args)) for name, args in turn.steps[step]]

    def _fill(self, args: dict[str, Any]) -> dict[str, Any]:
        email = args.get("email", "")
        return {k: self.code_for(email) if v == "{code}" else v for k, v in args.items()}


class APIError(Exception):
    """An error answered the way the OpenAI API does: a status and an `{"error": ...}` body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        self.headers = headers or {}


# ---- requests: both APIs into one form --------------------------------------------------


def _text(content: Any, param: str) -> str:
    """The text of a message content: a string, or the `text` of each part of a list."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    raise APIError(f"Invalid type for '{param}': expected a string or an array.", param=param)


def _arguments(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def _field(obj: Any, key: str, param: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise APIError(f"Missing required parameter: '{param}.{key}'.", param=f"{param}.{key}")
    return value


def _model(body: dict[str, Any], models: Sequence[str]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise APIError("you must provide a model parameter", param="model")
    if model not in models:
        raise APIError(
            f"The model `{model}` does not exist or you do not have access to it.",
            status=404,
            code="model_not_found",
        )
    return model


def _tools(body: dict[str, Any], chat: bool) -> tuple[Tool, ...]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise APIError("Invalid type for 'tools': expected an array.", param="tools")
    found = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue  # built-in tools (web search, ...) are accepted and never called
        spec = tool.get("function") if chat else tool
        param = f"tools[{i}].function" if chat else f"tools[{i}]"
        if not isinstance(spec, dict):
            raise APIError(f"Missing required parameter: '{param}'.", param=param)
        found.append(
            Tool(
                _field(spec, "name", param),
                str(spec.get("description") or ""),
                dict(spec.get("parameters") or {}),
            )
        )
    return tuple(found)


def _check_pairs(messages: Sequence[Message], chat: bool) -> None:
    """Every tool call is answered by a tool result right after it, and no result is stray."""
    pending: list[str] = []
    for i, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in pending:
                raise APIError(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'."
                    if chat
                    else f"No tool call found for function call output with call_id "
                    f"{message.tool_call_id}.",
                    param=f"messages.[{i}].role" if chat else "input",
                )
            pending.remove(message.tool_call_id)
            continue
        if pending:
            break
        pending = [call.id for call in message.tool_calls]
    if pending:
        raise APIError(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}"
            if chat
            else f"No tool output found for function call {pending[0]}.",
            param="messages" if chat else "input",
        )


def parse_chat(body: dict[str, Any], models: Sequence[str]) -> LLMRequest:
    """A `/v1/chat/completions` request body in the common form (APIError if malformed)."""
    model = _model(body, models)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise APIError("Missing required parameter: 'messages'.", param="messages")
    messages = []
    for i, m in enumerate(raw):
        param = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(m, dict) or role not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            raise APIError(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                "'tool', and 'developer'.",
                param=f"{param}.role",
                code="invalid_value",
            )
        text = _text(m.get("content"), f"{param}.content")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise APIError("Invalid type: expected an array.", param=f"{param}.tool_calls")
            tool_calls = tuple(
                ToolCall(
                    _field(c, "id", f"{param}.tool_calls[{j}]"),
                    _field(c.get("function"), "name", f"{param}.tool_calls[{j}].function"),
                    _arguments(c["function"].get("arguments")),
                )
                for j, c in enumerate(calls)
            )
            messages.append(Message("assistant", text, tool_calls))
        elif role == "tool":
            messages.append(Message("tool", text, tool_call_id=_field(m, "tool_call_id", param)))
        else:
            messages.append(Message("system" if role == "developer" else role, text))
    _check_pairs(messages, chat=True)
    return LLMRequest("chat", model, tuple(messages), _tools(body, chat=True), body)


def parse_responses(
    body: dict[str, Any], models: Sequence[str], history: dict[str, list[Message]]
) -> tuple[LLMRequest, list[Message]]:
    """A `/v1/responses` request body in the common form, and the conversation to remember.

    `history` maps the ids of earlier responses to their conversations (`previous_response_id`).
    """
    model = _model(body, models)
    previous = body.get("previous_response_id")
    if previous is not None and previous not in history:
        raise APIError(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    raw = body.get("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise APIError("Missing required parameter: 'input'.", param="input")
    messages = list(history[previous]) if previous is not None else []
    for i, item in enumerate(raw):
        param = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and isinstance(item, dict):
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise APIError(f"Invalid value: '{role}'.", param=f"{param}.role")
            text = _text(item.get("content"), f"{param}.content")
            messages.append(Message("system" if role == "developer" else str(role), text))
        elif kind == "function_call":
            call = ToolCall(
                _field(item, "call_id", param),
                _field(item, "name", param),
                _arguments(item.get("arguments")),
            )
            if messages and messages[-1].role == "assistant":  # same model response
                last = messages.pop()
                messages.append(dataclasses.replace(last, tool_calls=(*last.tool_calls, call)))
            else:
                messages.append(Message("assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            text = _text(item.get("output"), f"{param}.output")
            messages.append(Message("tool", text, tool_call_id=_field(item, "call_id", param)))
        elif kind not in ("reasoning", "item_reference"):
            raise APIError(f"Invalid value: '{kind}'.", param=f"{param}.type")
    _check_pairs(messages, chat=False)
    instructions = body.get("instructions")
    system = [Message("system", instructions)] if isinstance(instructions, str) else []
    request = LLMRequest("responses", model, (*system, *messages), _tools(body, chat=False), body)
    return request, messages


# ---- answers: the policy's reply in each API's shape -------------------------------------


def _tokens(value: Any) -> int:
    """A deterministic token count: a quarter of the JSON length."""
    return max(1, len(json.dumps(value, sort_keys=True, default=str)) // 4)


def _pieces(text: str) -> list[str]:
    return [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]


def _decide(policy: Policy, request: LLMRequest) -> tuple[str, list[ToolCall]]:
    """Ask the policy; give its tool calls ids `call_<conversation>_<n>`.

    The conversation is a hash of its first user message, n counts the calls already in it,
    so the same conversation gets the same ids on any server, in either API.
    """
    reply = policy(request)
    if isinstance(reply, str):
        return reply, []
    first_user = next((m.text for m in request.messages if m.role == "user"), "")
    conversation = hashlib.sha256(first_user.encode()).hexdigest()[:8]
    done = sum(len(m.tool_calls) for m in request.messages)
    calls = [
        ToolCall(f"call_{conversation}_{done + i}", name, args)
        for i, (name, args) in enumerate(reply)
    ]
    return "", calls


def _usage(request: LLMRequest, text: str, calls: list[ToolCall]) -> tuple[int, int]:
    asked = [*map(dataclasses.asdict, request.messages), *map(dataclasses.asdict, request.tools)]
    prompt = _tokens(asked)
    completion = _tokens(text) if not calls else _tokens([dataclasses.asdict(c) for c in calls])
    return prompt, completion


def chat_completion(
    n: int, request: LLMRequest, text: str, calls: list[ToolCall], cached: int = 0
) -> dict[str, Any]:
    """The `chat.completion` object answering `request` with `text` or `calls`.

    `cached` is the number of prompt tokens served from the prompt cache.
    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if calls else text,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in calls
        ]
    prompt, completion = _usage(request, text, calls)
    return {
        **_chat_envelope(n, request, "chat.completion"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": _chat_usage(prompt, completion, cached),
    }


def _chat_envelope(n: int, request: LLMRequest, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": kind,
        "created": CREATED,
        "model": request.model,
        "service_tier": "default",
        "system_fingerprint": "fp_scripted",
    }


def _chat_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_chunks(
    n: int, request: LLMRequest, text: str, calls: list[ToolCall], cached: int = 0
) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk` objects of the same answer, as `stream=true` sends them.

    The first chunk carries the role, then the text in pieces, or for each tool call a chunk
    with its index, id and name followed by chunks with pieces of its arguments; then a chunk
    with the finish reason, and with `stream_options.include_usage` a last one with the usage.
    """
    options = request.body.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    envelope = _chat_envelope(n, request, "chat.completion.chunk")
    if with_usage:
        envelope["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**envelope, "choices": [choice]}

    first: dict[str, Any] = {"role": "assistant", "content": None if calls else "", "refusal": None}
    if not calls:
        yield chunk(first)
        for piece in _pieces(text) if text else []:
            yield chunk({"content": piece})
    for i, call in enumerate(calls):
        head = {"index": i, "id": call.id, "type": "function"}
        head["function"] = {"name": call.name, "arguments": ""}
        yield chunk({**first, "tool_calls": [head]} if i == 0 else {"tool_calls": [head]})
        for piece in _pieces(json.dumps(call.arguments)):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if calls else "stop")
    if with_usage:
        usage = _chat_usage(*_usage(request, text, calls), cached)
        yield {**envelope, "choices": [], "usage": usage}


def _output_items(n: int, text: str, calls: list[ToolCall]) -> list[dict[str, Any]]:
    if calls:
        return [
            {
                "id": f"fc_{n}_{i}",
                "type": "function_call",
                "status": "completed",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
            }
            for i, c in enumerate(calls)
        ]
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return [
        {
            "id": f"msg_{n}",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
    ]


def response_object(
    n: int,
    request: LLMRequest,
    text: str,
    calls: list[ToolCall],
    done: bool = True,
    cached: int = 0,
) -> dict[str, Any]:
    """The `response` object answering `request` (`done=False`: as it starts, no output)."""
    body = request.body
    prompt, completion = _usage(request, text, calls)
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": CREATED,
        "status": "completed" if done else "in_progress",
        "completed_at": CREATED if done else None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": request.model,
        "output": _output_items(n, text, calls) if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage if done else None,
        "metadata": body.get("metadata") or {},
    }


def response_events(
    n: int, request: LLMRequest, text: str, calls: list[ToolCall], cached: int = 0
) -> Iterator[dict[str, Any]]:
    """The events of the same answer, as the Responses API streams them.

    response.created, response.in_progress; per output item output_item.added, then the
    arguments (function_call_arguments.delta/.done) or the text (content_part.added,
    output_text.delta/.done, content_part.done), output_item.done; response.completed.
    """
    counter = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(counter), **fields}

    started = response_object(n, request, text, calls, done=False, cached=cached)
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(_output_items(n, text, calls)):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", **at, delta=piece)
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"])
        else:
            part = item["content"][0]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            at["content_index"] = 0
            yield event("response.content_part.added", **at, part={**part, "text": ""})
            for piece in _pieces(part["text"]) if part["text"] else []:
                yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
            yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **at, part=part)
        yield event("response.output_item.done", output_index=index, item=item)
    completed = response_object(n, request, text, calls, cached=cached)
    yield event("response.completed", response=completed)


# ---- structured output -------------------------------------------------------------------


def refuse_json_schema(path: str, body: dict[str, Any]) -> None:
    """Refuse a json_schema output format as servers without structured outputs do.

    That is `response_format` in Chat Completions, `text.format` in Responses; `json_object`
    and plain text stay accepted.
    """
    if path == CHAT_PATH:
        fmt, param = body.get("response_format"), "response_format"
    else:
        text = body.get("text")
        fmt, param = (text.get("format") if isinstance(text, dict) else None), "text.format"
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        raise APIError(
            f"Invalid parameter: '{param}' of type 'json_schema' is not supported with this model.",
            param=param,
        )


# ---- embeddings --------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingRequest:
    """A checked `/v1/embeddings` request."""

    model: str
    texts: tuple[str, ...]
    dimensions: int
    encoding_format: Literal["float", "base64"]


def parse_embeddings(body: dict[str, Any], models: Sequence[str]) -> EmbeddingRequest:
    """A `/v1/embeddings` request body, checked (APIError if malformed).

    Only text is embedded: token arrays (lists of ints) are refused with a 400.
    """
    model = _model(body, models)
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not 0 < len(texts) <= MAX_EMBEDDING_INPUTS:
        raise APIError(
            f"Invalid 'input': expected a string or an array of 1 to {MAX_EMBEDDING_INPUTS} "
            "strings.",
            param="input",
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise APIError(
                f"Invalid 'input[{i}]': this server embeds text only, not token arrays.",
                param="input",
            )
        if not text:
            raise APIError(f"Invalid 'input[{i}]': empty string.", param="input")
    dimensions = body.get("dimensions", EMBEDDING_DIMENSIONS)
    if type(dimensions) is not int or not 0 < dimensions <= MAX_EMBEDDING_DIMENSIONS:
        raise APIError(
            f"Invalid 'dimensions': expected an integer from 1 to {MAX_EMBEDDING_DIMENSIONS}.",
            param="dimensions",
        )
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise APIError(
            f"Invalid value: '{encoding}'. Supported values are: 'float' and 'base64'.",
            param="encoding_format",
            code="invalid_value",
        )
    return EmbeddingRequest(model, tuple(texts), dimensions, encoding)


def _features(text: str) -> Iterator[tuple[str, float]]:
    """The weighted features of a text: its lowercase words and character trigrams."""
    lowered = " ".join(text.lower().split())
    for word in re.findall(r"\w+", lowered):
        yield f"w:{word}", 1.0
    padded = f" {lowered} "
    for i in range(len(padded) - 2):
        yield f"c:{padded[i : i + 3]}", 0.5


def embed(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic embedding: the hashed bag of the text's features, L2-normalised.

    Each feature adds its weight, with a sign taken from its hash, to the slot its hash picks,
    so texts sharing words (and so trigrams) point the same way and unrelated texts are close
    to orthogonal. The values are float32s, as the API's base64 encoding carries them.
    """
    vector = [0.0] * dimensions
    for feature, weight in _features(text):
        hashed = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
        vector[hashed % dimensions] += weight if hashed >> 63 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:  # only white space: no feature at all
        vector[0], norm = 1.0, 1.0
    return list(_float32s([v / norm for v in vector]))


def _float32s(values: Sequence[float]) -> tuple[float, ...]:
    return struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))


def embedding_response(request: EmbeddingRequest) -> dict[str, Any]:
    """The `list` of embeddings answering `request`, floats or base64 little-endian float32s."""
    data = []
    for index, text in enumerate(request.texts):
        vector: Any = embed(text, request.dimensions)
        if request.encoding_format == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = sum(_tokens(text) for text in request.texts)
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


# ---- batch input files -------------------------------------------------------------------


@dataclass(frozen=True)
class BatchLine:
    """One request of a batch input file."""

    number: int  # 1-based, as batch errors name lines
    custom_id: str
    url: str
    body: dict[str, Any]


def parse_batch_file(data: bytes, endpoint: str) -> tuple[list[BatchLine], list[dict[str, Any]]]:
    """The requests of a batch input file, and the problems that make the batch fail.

    Each non-blank line must be `{"custom_id", "method": "POST", "url": endpoint, "body"}`
    with a unique custom_id, and all bodies must name the same model. A problem is a batch
    error object (code, message, param, line).
    """
    lines: list[BatchLine] = []
    problems: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, text in enumerate(data.split(b"\n"), 1):
        if not text.strip():
            continue
        try:
            line = _batch_line(number, text, endpoint)
            if line.custom_id in seen:
                raise APIError(
                    f"The custom_id '{line.custom_id}' is used more than once; each request "
                    "needs its own.",
                    param="custom_id",
                    code="duplicate_custom_id",
                )
        except APIError as error:
            problems.append(_batch_error(error, number))
            continue
        seen.add(line.custom_id)
        lines.append(line)
    models = [line.body["model"] for line in lines]
    for line in lines:
        if line.body["model"] != models[0]:
            problems.append(
                _batch_error(
                    APIError(
                        f"The model '{line.body['model']}' differs from the model "
                        f"'{models[0]}' of the first request: a batch uses one model.",
                        param="body.model",
                        code="mismatched_model",
                    ),
                    line.number,
                )
            )
            break
    if not lines and not problems:
        problems.append(
            _batch_error(APIError("The batch input file is empty.", code="empty_file"), None)
        )
    return lines, problems


def _batch_line(number: int, text: bytes, endpoint: str) -> BatchLine:
    try:
        item = json.loads(text)
    except ValueError:
        item = None
    if not isinstance(item, dict):
        raise APIError("This line is not a JSON object.", code="invalid_json_line")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise APIError(
            "Missing required parameter: 'custom_id'.",
            param="custom_id",
            code="missing_required_parameter",
        )
    if item.get("method") != "POST":
        raise APIError(
            "Invalid value for 'method': only 'POST' is supported.",
            param="method",
            code="invalid_method",
        )
    if item.get("url") != endpoint:
        raise APIError(
            f"The url '{item.get('url')}' does not match the batch endpoint '{endpoint}'.",
            param="url",
            code="mismatched_endpoint",
        )
    body = item.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise APIError(
            "Missing required parameter: 'body.model'.",
            param="body",
            code="missing_required_parameter",
        )
    return BatchLine(number, custom_id, endpoint, body)


def _batch_error(error: APIError, line: int | None) -> dict[str, Any]:
    details = error.body["error"]
    return {
        "code": details["code"],
        "message": details["message"],
        "param": details["param"],
        "line": line,
    }


# ---- the server --------------------------------------------------------------------------


@dataclass(frozen=True)
class _HTTPRequest:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    raw: bytes


@dataclass
class _Answer:
    """What to send back: a JSON `payload`, or `raw` bytes of `content_type`, or `events`."""

    payload: Any = None
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    raw: bytes | None = None
    content_type: str = "application/json"
    events: Iterable[tuple[str | None, dict[str, Any]]] | None = None


class _Dropped(Exception):
    """A held request whose server is closing: its connection is closed without an answer."""


@dataclass
class _File:
    """A file of the Files API (uploaded, or the output of a batch)."""

    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class _Batch:
    """A batch of the Batch API; changed only under the server's lock."""

    id: str
    endpoint: str
    input_file_id: str
    metadata: dict[str, str] | None
    created_at: int
    status: str = "validating"
    times: dict[str, int] = dataclasses.field(default_factory=dict)  # status -> when it began
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    model: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    tokens: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])  # in, out, cached

    def advance(self, status: str) -> None:
        self.status = status
        self.times[status] = int(time.time())

    def as_dict(self) -> dict[str, Any]:
        tokens_in, tokens_out, cached = self.tokens
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.created_at + 24 * 3600,
            **{f"{s}_at": self.times.get(s) for s in BATCH_TIMESTAMPS},
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "usage": {
                "input_tokens": tokens_in,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": tokens_out,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens_in + tokens_out,
            },
            "metadata": self.metadata,
        }


class _Counter:
    """A read-only count kept by ScriptedLLM in `_<name>`, read under its lock."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.field = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = f"_{name}"

    @overload
    def __get__(self, llm: None, owner: type | None = None) -> _Counter: ...
    @overload
    def __get__(self, llm: ScriptedLLM, owner: type | None = None) -> int: ...
    def __get__(self, llm: ScriptedLLM | None, owner: type | None = None) -> int | _Counter:
        if llm is None:
            return self
        with llm._lock:
            return int(getattr(llm, self.field))


class ScriptedLLM:
    """An OpenAI-compatible HTTP server on loopback whose answers come from `policy`.

    Use it as a context manager (or `start()` / `close()`); `base_url` is what to give
    `openai.OpenAI(base_url=...)`. Requests for a model not in `models` (chat, responses) or
    `embedding_models` (embeddings) get a 404 like the real API's.

    Knobs (plain attributes, read at each request, changeable while serving; the constructor
    takes each but `garbage` as a keyword argument):

    - `delay_s`: wait this long before answering each request (to provoke client timeouts);
    - `fail_first`: answer the first N requests with status `fail_status` and an OpenAI-style
      error body (500 and 429 are retried by the openai client); a 429's error code is
      `rate_limit_exceeded`, or `fail_code` when set (`insufficient_quota`: OpenAI's 429 for
      an account out of credit);
    - `garbage_first`: answer the N requests after those with a 200 whose body is not JSON,
      `garbage` (content type, body): by default an HTML page, which the openai client returns
      as a plain `str` instead of raising (strict validation: APIResponseValidationError);
      with an "application/json" type it raises json.JSONDecodeError;
    - `retry_after_ms`: the `retry-after-ms` header sent with those failures (None: no header),
      which the openai client obeys instead of its backoff (the default keeps retries fast);
    - `capacity`: at most this many *model requests* (POST chat completions, responses,
      embeddings) are answered at once, each holding its slot for its whole answer (delay
      included; the slot is given back just before the answer is sent). One arriving when all
      slots are taken is answered at once with a 429 `rate_limit_exceeded` error carrying
      `retry-after` (whole seconds, rounded up), `retry-after-ms` (`rate_limit_retry_ms`) and
      `x-ratelimit-limit-requests` / `-remaining-requests` / `-reset-requests` (OpenAI's
      duration format: `100ms`, `1.5s`); admitted answers carry the `x-ratelimit-*` headers
      too. None: no limit. Capacity is checked before `delay_s` and the failure knobs;
    - `structured_output`: False refuses a `json_schema` output format (chat
      `response_format`, responses `text.format`) with a 400 `invalid_request_error`, as
      servers without structured outputs do; `json_object` stays accepted;
    - `hang_first`: the next N requests are held without an answer, so that the client's
      timeout ends them; reads as how many are still to be held. Setting it to 0 releases the
      held ones, which are then answered normally; `close()` drops them. Held requests take no
      capacity slot;
    - `record`: keep the parsed JSON body of every request read (model requests, batch lines,
      batch creations) in `recorded`, as `{"path", "body", "batch_id"}` (batch_id: the batch of
      a batch line, else None). Requests refused before being read (429, the failure knobs)
      are not recorded;
    - `embeddings`: False makes `/v1/embeddings` answer 404, like a chat-only server;
    - `batch_delay_s`: how long a batch stays `in_progress` before its requests are answered;
    - `hold_batches`: True keeps batches `in_progress` until it is set back to False.

    Counts (read-only, exact under concurrency): `request_count` (every request received),
    `chat_requests` (direct chat completions answered with a 200, batch lines excluded),
    `rate_limited` (429s sent for lack of capacity), `in_flight` (admitted model requests
    being answered), `max_in_flight` (its peak), `max_concurrent` (the peak of model requests
    open at once, admitted or about to be refused: what a client had open at most), `held`
    (requests held by `hang_first` now), `batches_created`, `batch_requests` (batch lines
    answered). Exceptions raised while answering (by the policy, say) are answered with 500
    and kept in `errors`.

    Chat completions and responses report prompt caching: `cached_tokens` is the size of the
    longest run of leading messages identical to the leading messages of an earlier request
    to the same model (whole messages; 0 the first time).

    Embeddings (`POST /v1/embeddings`) are deterministic (see `embed`), 256 dimensions unless
    `dimensions` says otherwise, as floats or base64 (what the openai client asks for when
    `encoding_format` is not given). The Files API (`/v1/files`: upload, retrieve, content,
    delete, list) and the Batch API (`/v1/batches`: create, retrieve, cancel, list) work as
    OpenAI's: a batch validates its input file (a bad line fails the batch, naming the line),
    then answers its lines in a background thread through the same code as direct requests
    (no capacity limit, delay or failure knobs), writing the output and error files;
    statuses go validating, in_progress, finalizing, completed (or failed; cancelling,
    cancelled). Cancelling a finished batch is a 400.
    """

    request_count = _Counter("Every request received, including refused and failed ones.")
    chat_requests = _Counter("Direct chat completions answered with a 200.")
    rate_limited = _Counter("429s sent because all `capacity` slots were taken.")
    in_flight = _Counter("Admitted model requests being answered now.")
    max_in_flight = _Counter("The peak of `in_flight`.")
    max_concurrent = _Counter("The peak of model requests open at once, refused ones included.")
    held = _Counter("Requests held by `hang_first` now.")
    batches_created = _Counter("Batches created.")
    batch_requests = _Counter("Batch lines answered, successfully or not.")

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = DEFAULT_MODELS,
        embedding_models: Sequence[str] = DEFAULT_EMBEDDING_MODELS,
        delay_s: float = 0.0,
        fail_first: int = 0,
        fail_status: int = 500,
        fail_code: str | None = None,
        garbage_first: int = 0,
        retry_after_ms: int | None = 10,
        capacity: int | None = None,
        rate_limit_retry_ms: int = 100,
        structured_output: bool = True,
        hang_first: int = 0,
        record: bool = False,
        embeddings: bool = True,
        batch_delay_s: float = 0.0,
        hold_batches: bool = False,
        verbose: bool = False,
    ) -> None:
        self.policy: Policy = policy or ScriptedPolicy()
        self.models = tuple(models)
        self.embedding_models = tuple(embedding_models)
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.fail_code = fail_code
        self.garbage_first = garbage_first
        self.retry_after_ms = retry_after_ms
        self.garbage = ("text/html", b"<html><body>502 Bad Gateway</body></html>")
        self.capacity = capacity
        self.rate_limit_retry_ms = rate_limit_retry_ms
        self.structured_output = structured_output
        self.record = record
        self.recorded: list[dict[str, Any]] = []
        self.embeddings = embeddings
        self.batch_delay_s = batch_delay_s
        self.verbose = verbose
        self.errors: list[Exception] = []
        self.host = host
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # hang, hold, cancel and close wake-ups
        self._request_count = self._chat_requests = self._rate_limited = 0
        self._in_flight = self._max_in_flight = self._open = self._max_concurrent = 0
        self._held = self._batches_created = self._batch_requests = 0
        self._hang_left = hang_first
        self._hang_round = 0  # bumped when hang_first is set to 0, releasing the held requests
        self._hold_batches = hold_batches
        self._answers = 0
        self._ids = 0
        self._history: dict[str, list[Message]] = {}
        self._prefixes: dict[str, set[bytes]] = {}
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._workers: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._routes = self._route_table()
        self._server = _Server((host, port), _Handler)
        self._server.llm = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def hang_first(self) -> int:
        with self._lock:
            return self._hang_left

    @hang_first.setter
    def hang_first(self, count: int) -> None:
        with self._changed:
            self._hang_left = count
            if count == 0:
                self._hang_round += 1
                self._changed.notify_all()

    @property
    def hold_batches(self) -> bool:
        return self._hold_batches

    @hold_batches.setter
    def hold_batches(self, hold: bool) -> None:
        with self._changed:
            self._hold_batches = hold
            self._changed.notify_all()

    def start(self) -> ScriptedLLM:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.02,), name="scripted-llm", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: waiting answers are cut short, held ones dropped, connections closed."""
        with self._changed:
            self._stopping.set()
            self._changed.notify_all()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.close_connections()
        self._server.server_close()
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- every request: the provider's knobs, then the route

    def _answer(self, request: _HTTPRequest) -> _Answer:
        """Called by the handler threads."""
        index = self._arrived()
        self._hold_if_hanging()
        with self._slot(request.method == "POST" and request.path in MODEL_PATHS) as limits:
            if self.delay_s > 0:
                self._stopping.wait(self.delay_s)
            if index < self.fail_first:
                raise _failure(self.fail_status, self.fail_code)
            if index < self.fail_first + self.garbage_first:
                content_type, garbage = self.garbage
                return _Answer(raw=garbage, content_type=content_type)
            answer = self._route(request)
            answer.headers.update(limits)
            return answer

    def _arrived(self) -> int:
        with self._lock:
            self._request_count += 1
            return self._request_count - 1

    def _hold_if_hanging(self) -> None:
        with self._changed:
            if self._hang_left <= 0:
                return
            self._hang_left -= 1
            self._held += 1
            round_ = self._hang_round
            self._changed.wait_for(lambda: self._hang_round != round_ or self._stopping.is_set())
            self._held -= 1
        if self._stopping.is_set():
            raise _Dropped

    @contextlib.contextmanager
    def _slot(self, limited: bool) -> Iterator[dict[str, str]]:
        """Hold a capacity slot while answering a model request; 429 when none is free.

        Yields the `x-ratelimit-*` headers of the answer. The slot is given back before the
        answer is sent, so a client that sends its next request as soon as an answer arrives
        never finds its previous one still holding a slot.
        """
        if not limited:
            yield {}
            return
        with self._lock:
            capacity, retry_ms = self.capacity, self.rate_limit_retry_ms
            self._open += 1
            self._max_concurrent = max(self._max_concurrent, self._open)
            if capacity is not None and self._in_flight >= capacity:
                self._open -= 1
                self._rate_limited += 1
                raise _capacity_error(capacity, self._in_flight, retry_ms)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            remaining = None if capacity is None else capacity - self._in_flight
        try:
            yield {} if capacity is None else _rate_limit_headers(capacity, remaining, retry_ms)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._open -= 1

    def _route_table(self) -> list[tuple[str, re.Pattern[str], Callable[..., _Answer]]]:
        """(method, path pattern, handler): the handler gets the request and the path's ids."""
        file, batch = r"/v1/files/([^/]+)", r"/v1/batches/([^/]+)"
        routes: list[tuple[str, str, Callable[..., _Answer]]] = [
            ("GET", r"/v1/models", self._list_models),
            *[("POST", re.escape(path), self._direct_model) for path in MODEL_PATHS],
            ("POST", r"/v1/files", self._upload_file),
            ("GET", r"/v1/files", self._list_files),
            ("GET", file, self._get_file),
            ("GET", file + "/content", self._file_content),
            ("DELETE", file, self._delete_file),
            ("POST", r"/v1/batches", self._create_batch),
            ("GET", r"/v1/batches", self._list_batches),
            ("GET", batch, self._get_batch),
            ("POST", batch + "/cancel", self._cancel_batch),
        ]
        return [(method, re.compile(pattern), handle) for method, pattern, handle in routes]

    def _route(self, request: _HTTPRequest) -> _Answer:
        for method, pattern, handle in self._routes:
            found = pattern.fullmatch(request.path)
            if found and method == request.method:
                return handle(request, *found.groups())
        raise _unknown_url(request)

    def _record(self, path: str, body: dict[str, Any], batch_id: str | None = None) -> None:
        if self.record:
            with self._lock:
                self.recorded.append({"path": path, "body": body, "batch_id": batch_id})

    # ---- models

    def _list_models(self, request: _HTTPRequest) -> _Answer:
        names = [*self.models, *(self.embedding_models if self.embeddings else ())]
        models = [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "system"} for m in names
        ]
        return _Answer({"object": "list", "data": models})

    def _direct_model(self, request: _HTTPRequest) -> _Answer:
        if request.path == EMBEDDINGS_PATH and not self.embeddings:
            raise _unknown_url(request)
        body = _json_object(request.raw)
        self._record(request.path, body)
        answer = self._model(request.path, body)
        if request.path == CHAT_PATH:
            with self._lock:
                self._chat_requests += 1
        return answer

    def _model(self, path: str, body: dict[str, Any]) -> _Answer:
        """The answer to a model request: the one code path of direct requests and batch lines."""
        if path == EMBEDDINGS_PATH:
            return _Answer(embedding_response(parse_embeddings(body, self.embedding_models)))
        if not self.structured_output:
            refuse_json_schema(path, body)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise APIError("Invalid type for 'stream': expected a boolean.", param="stream")
        if path == CHAT_PATH:
            request = parse_chat(body, self.models)
            text, calls = _decide(self.policy, request)
            n, cached = self._next_answer(), self._cached_tokens(request)
            if stream:
                chunks = chat_chunks(n, request, text, calls, cached)
                return _Answer(events=((None, chunk) for chunk in chunks))
            return _Answer(chat_completion(n, request, text, calls, cached))
        with self._lock:
            request, conversation = parse_responses(body, self.models, self._history)
        text, calls = _decide(self.policy, request)
        n, cached = self._next_answer(), self._cached_tokens(request)
        if body.get("store", True) is not False:
            answer = Message("assistant", text, tuple(calls))
            with self._lock:
                self._history[f"resp_{n}"] = [*conversation, answer]
        if stream:
            events = response_events(n, request, text, calls, cached)
            return _Answer(events=((event["type"], event) for event in events))
        return _Answer(response_object(n, request, text, calls, cached=cached))

    def _next_answer(self) -> int:
        with self._lock:
            self._answers += 1
            return self._answers

    def _cached_tokens(self, request: LLMRequest) -> int:
        """The prompt tokens a prefix cache would serve, and this prompt remembered for later.

        That is the tokens of the longest run of leading messages that an earlier request to
        the same model started with too.
        """
        keys = list(_prefix_keys(request.messages))
        with self._lock:
            seen = self._prefixes.setdefault(request.model, set())
            hit = 0
            while hit < len(keys) and keys[hit] in seen:
                hit += 1
            seen.update(keys)
        return _tokens([dataclasses.asdict(m) for m in request.messages[:hit]]) if hit else 0

    # ---- files

    def _upload_file(self, request: _HTTPRequest) -> _Answer:
        fields = _form_fields(request.content_type, request.raw)
        if "purpose" not in fields:
            raise APIError("Missing required parameter: 'purpose'.", param="purpose")
        purpose = fields["purpose"][1].decode(errors="replace")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(
                f"Invalid value for 'purpose': '{purpose}'. Supported values are: "
                + ", ".join(f"'{p}'" for p in UPLOAD_PURPOSES)
                + ".",
                param="purpose",
                code="invalid_value",
            )
        filename, data = fields.get("file", (None, b""))
        if filename is None:
            raise APIError("Missing required parameter: 'file'.", param="file")
        return _Answer(self._store_file(filename, purpose, data).as_dict())

    def _store_file(self, filename: str, purpose: str, data: bytes) -> _File:
        with self._lock:
            file = _File(f"file-{self._new_id()}", filename, purpose, data, int(time.time()))
            self._files[file.id] = file
        return file

    def _new_id(self) -> int:
        """A number for a new file, batch or batch line (call with the lock held)."""
        self._ids += 1
        return self._ids

    def _stored_file(self, file_id: str) -> _File:
        with self._lock:
            file = self._files.get(file_id)
        if file is None:
            raise APIError(f"No such File object: {file_id}", status=404, param="id")
        return file

    def _get_file(self, request: _HTTPRequest, file_id: str) -> _Answer:
        return _Answer(self._stored_file(file_id).as_dict())

    def _file_content(self, request: _HTTPRequest, file_id: str) -> _Answer:
        return _Answer(raw=self._stored_file(file_id).data, content_type="application/octet-stream")

    def _delete_file(self, request: _HTTPRequest, file_id: str) -> _Answer:
        self._stored_file(file_id)
        with self._lock:
            self._files.pop(file_id, None)
        return _Answer({"id": file_id, "object": "file", "deleted": True})

    def _list_files(self, request: _HTTPRequest) -> _Answer:
        purpose = request.query.get("purpose")
        with self._lock:
            files = [f.as_dict() for f in reversed(self._files.values())]
        return _Answer(_page([f for f in files if purpose in (None, f["purpose"])], request))

    # ---- batches

    def _create_batch(self, request: _HTTPRequest) -> _Answer:
        body = _json_object(request.raw)
        self._record(request.path, body)
        endpoint, input_file_id, metadata = _batch_parameters(body)
        file = self._stored_file(input_file_id)
        if file.purpose != "batch":
            raise APIError(
                f"The file {input_file_id} has purpose '{file.purpose}'; a batch input file "
                "needs purpose 'batch'.",
                param="input_file_id",
            )
        with self._lock:
            batch = _Batch(
                f"batch_{self._new_id()}", endpoint, input_file_id, metadata, int(time.time())
            )
            self._batches[batch.id] = batch
            self._batches_created += 1
            created = batch.as_dict()
            worker = threading.Thread(
                target=self._run_batch, args=(batch, file.data), name=batch.id, daemon=True
            )
            self._workers.append(worker)
        worker.start()
        return _Answer(created)

    def _stored_batch(self, batch_id: str) -> _Batch:
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            raise APIError(f"No such Batch object: {batch_id}", status=404, param="id")
        return batch

    def _get_batch(self, request: _HTTPRequest, batch_id: str) -> _Answer:
        batch = self._stored_batch(batch_id)
        with self._lock:
            return _Answer(batch.as_dict())

    def _cancel_batch(self, request: _HTTPRequest, batch_id: str) -> _Answer:
        batch = self._stored_batch(batch_id)
        with self._changed:
            if batch.status in ("validating", "in_progress"):
                batch.advance("cancelling")
                self._changed.notify_all()
            elif batch.status not in ("cancelling", "cancelled"):
                raise APIError(f"Cannot cancel a batch with status '{batch.status}'.")
            return _Answer(batch.as_dict())

    def _list_batches(self, request: _HTTPRequest) -> _Answer:
        with self._lock:
            batches = [b.as_dict() for b in reversed(self._batches.values())]
        return _Answer(_page(batches, request))

    def _run_batch(self, batch: _Batch, data: bytes) -> None:
        """A batch's life, in its own thread; an unexpected error fails it (and is kept)."""
        try:
            self._process_batch(batch, data)
        except Exception as exc:
            self.errors.append(exc)
            with self._lock:
                batch.errors = [_batch_error(APIError(str(exc), code="server_error"), None)]
                batch.advance("failed")

    def _process_batch(self, batch: _Batch, data: bytes) -> None:
        """Validate, wait, answer the lines, write the results."""
        lines, problems = parse_batch_file(data, batch.endpoint)
        with self._lock:
            if problems:
                batch.errors = problems
                batch.advance("failed")
                return
            batch.total, batch.model = len(lines), lines[0].body["model"]
            started = batch.status == "validating"
            if started:
                batch.advance("in_progress")
        results: list[tuple[bool, dict[str, Any]]] = []
        if started and self._wait_for_batch_start(batch):
            for line in lines:
                if self._stopping.is_set() or batch.status == "cancelling":
                    break
                results.append(self._answer_line(batch, line))
        if not self._stopping.is_set():
            self._conclude(batch, results)

    def _wait_for_batch_start(self, batch: _Batch) -> bool:
        """Wait `batch_delay_s`, then while `hold_batches`; False if cancelled or closing."""
        deadline = time.monotonic() + self.batch_delay_s
        with self._changed:
            while not (self._stopping.is_set() or batch.status == "cancelling"):
                left = deadline - time.monotonic()
                if left <= 0 and not self._hold_batches:
                    return True
                self._changed.wait(left if left > 0 else None)
        return False

    def _answer_line(self, batch: _Batch, line: BatchLine) -> tuple[bool, dict[str, Any]]:
        """Answer one batch line: (succeeded, its line of the output or error file)."""
        with self._lock:
            n = self._new_id()
        self._record(line.url, line.body, batch.id)
        try:
            if line.body.get("stream") is True:
                raise APIError("Streaming is not supported in batches.", param="body.stream")
            status, body = 200, self._model(line.url, line.body).payload
        except APIError as error:
            status, body = error.status, error.body
        except Exception as exc:
            self.errors.append(exc)
            status, body = 500, _failure(500).body
        tokens = _usage_tokens(body)
        with self._lock:
            self._batch_requests += 1
            if status == 200:
                batch.completed += 1
            else:
                batch.failed += 1
            batch.tokens = [a + b for a, b in zip(batch.tokens, tokens, strict=True)]
        response = {"status_code": status, "request_id": f"req_batch_{n}", "body": body}
        out = {"id": f"batch_req_{n}", "custom_id": line.custom_id, "response": response}
        return status == 200, {**out, "error": None}

    def _conclude(self, batch: _Batch, results: list[tuple[bool, dict[str, Any]]]) -> None:
        """Write the output and error files; the batch ends completed (or cancelled)."""
        with self._lock:
            cancelled = batch.status == "cancelling"
            if not cancelled:
                batch.advance("finalizing")
        output = self._result_file(batch, "output", [r for ok, r in results if ok])
        failures = self._result_file(batch, "error", [r for ok, r in results if not ok])
        with self._lock:
            batch.output_file_id, batch.error_file_id = output, failures
            batch.advance("cancelled" if cancelled else "completed")

    def _result_file(self, batch: _Batch, kind: str, records: list[Any]) -> str | None:
        """The id of a new batch output (or error) file of `records`; None when there are none."""
        if not records:
            return None
        return self._store_file(f"{batch.id}_{kind}.jsonl", "batch_output", _jsonl(records)).id


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        raise APIError(
            "We could not parse the JSON body of your request. The OpenAI API expects a "
            "JSON payload, but what was sent was not valid JSON."
        ) from None
    if not isinstance(body, dict):
        raise APIError("The request body must be a JSON object.")
    return body


def _unknown_url(request: _HTTPRequest) -> APIError:
    return APIError(f"Invalid URL ({request.method} {request.path})", status=404)


def _prefix_keys(messages: Sequence[Message]) -> Iterator[bytes]:
    """A digest of each run of leading messages: of the first, the first two, ..."""
    running = hashlib.sha256()
    for message in messages:
        running.update(json.dumps(dataclasses.asdict(message), sort_keys=True).encode())
        yield running.copy().digest()


def _form_fields(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name -> (file name or None, content)."""
    if not content_type.startswith("multipart/form-data"):
        raise APIError("Expected a multipart/form-data body with 'purpose' and 'file'.")
    head = f"content-type: {content_type}\r\n\r\n".encode()
    form = email.parser.BytesParser(EmailMessage, policy=email.policy.HTTP).parsebytes(head + raw)
    fields = {}
    for part in form.iter_parts():
        name = part.get_param("name", header="content-disposition")
        content = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(content, bytes):
            fields[name] = (part.get_filename(), content)
    return fields


def _batch_parameters(body: dict[str, Any]) -> tuple[str, str, dict[str, str] | None]:
    """(endpoint, input_file_id, metadata) of a batch creation request, checked."""
    endpoint = body.get("endpoint")
    if endpoint not in BATCH_ENDPOINTS:
        raise APIError(
            f"Invalid value for 'endpoint': {endpoint!r}. Supported values are: "
            + ", ".join(f"'{e}'" for e in BATCH_ENDPOINTS)
            + ".",
            param="endpoint",
            code="invalid_value",
        )
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise APIError("Missing required parameter: 'input_file_id'.", param="input_file_id")
    if body.get("completion_window") != "24h":
        raise APIError(
            "Invalid value for 'completion_window': only '24h' is supported.",
            param="completion_window",
            code="invalid_value",
        )
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise APIError(
            "Invalid 'metadata': expected at most 16 string keys with string values.",
            param="metadata",
        )
    return endpoint, input_file_id, metadata


def _usage_tokens(body: Any) -> tuple[int, int, int]:
    """(input, output, cached) tokens of an answer of any model API; zeros for an error."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0, 0
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    tokens_in = usage.get("prompt_tokens", usage.get("input_tokens")) or 0
    tokens_out = usage.get("completion_tokens", usage.get("output_tokens")) or 0
    return int(tokens_in), int(tokens_out), int(details.get("cached_tokens") or 0)


def _jsonl(records: Iterable[Any]) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def _page(items: list[dict[str, Any]], request: _HTTPRequest) -> dict[str, Any]:
    """A cursor page of `items` (newest first): `limit` (1 to 100, 20) of them after `after`."""
    limit = request.query.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        raise APIError("Invalid 'limit': expected an integer from 1 to 100.", param="limit")
    after = request.query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise APIError(f"Invalid 'after': no object with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[: int(limit)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > len(page),
    }


def _failure(status: int, code: str | None = None) -> APIError:
    if status == 429:
        return APIError(
            "Rate limit reached for requests. Please try again shortly.",
            status=429,
            kind="requests",
            code=code or "rate_limit_exceeded",
        )
    return APIError(
        "The server had an error while processing your request. Sorry about that!",
        status=status,
        kind="server_error",
    )


def _capacity_error(capacity: int, used: int, retry_ms: int) -> APIError:
    """The 429 of a request finding every capacity slot taken, with OpenAI's headers."""
    return APIError(
        f"Rate limit reached for requests: Limit {capacity} concurrent, Used {used}, "
        f"Requested 1. Please try again in {_duration(retry_ms)}.",
        status=429,
        kind="requests",
        code="rate_limit_exceeded",
        headers={
            "retry-after": str(math.ceil(retry_ms / 1000)),
            "retry-after-ms": str(retry_ms),
            **_rate_limit_headers(capacity, 0, retry_ms),
        },
    )


def _rate_limit_headers(capacity: int, remaining: int | None, reset_ms: int) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(capacity),
        "x-ratelimit-remaining-requests": str(max(0, remaining or 0)),
        "x-ratelimit-reset-requests": _duration(reset_ms),
    }


def _duration(ms: int) -> str:
    """Milliseconds in OpenAI's rate-limit duration format: 250ms, 1s, 1.5s, 2m0s."""
    if ms < 1000:
        return f"{ms}ms"
    minutes, seconds = divmod(ms / 1000, 60)
    text = f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class _Server(ThreadingHTTPServer):
    """The HTTP server, remembering its open connections so that close() can end them."""

    daemon_threads = True
    request_queue_size = 128  # bursts of parallel clients are accepted, not refused
    llm: ScriptedLLM

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            for connection in list(self.connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One connection: reads each request, lets the ScriptedLLM answer it, sends the answer."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in separate writes
    server: _Server

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        path, _, query = self.path.partition("?")
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        content_type = self.headers.get("content-type") or ""
        request = _HTTPRequest(method, path, dict(urllib.parse.parse_qsl(query)), content_type, raw)
        llm = self.server.llm
        try:
            answer = llm._answer(request)
        except APIError as error:
            headers = {}
            if error.status in (429, 500, 502, 503) and llm.retry_after_ms is not None:
                headers["retry-after-ms"] = str(llm.retry_after_ms)
            answer = _Answer(error.body, error.status, {**headers, **error.headers})
        except _Dropped:
            self.close_connection = True
            return
        except Exception as exc:
            llm.errors.append(exc)
            answer = _Answer(_failure(500).body, 500)
        try:
            self.send_answer(answer)
        except ConnectionError:
            self.close_connection = True  # the client gave up (e.g. its timeout)

    def send_answer(self, answer: _Answer) -> None:
        if answer.events is not None:
            self.send_events(answer.events, answer.headers)
        elif answer.raw is not None:
            self.send_body(answer.status, answer.raw, answer.content_type, answer.headers)
        else:
            self.send_json(answer.status, answer.payload, answer.headers)

    def send_body(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-request-id", f"req_{self.server.llm.request_count}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_body(status, json.dumps(body).encode(), "application/json", headers)

    def send_events(
        self,
        events: Iterable[tuple[str | None, dict[str, Any]]],
        headers: dict[str, str] | None = None,
    ) -> None:
        """Server-sent events in a chunked body; chat completions end with `data: [DONE]`."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        chat = False
        for name, data in events:
            chat = name is None
            head = f"event: {name}\n" if name else ""
            self._chunk(f"{head}data: {json.dumps(data)}\n\n".encode())
        if chat:
            self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        if self.server.llm.verbose:
            super().log_message(format, *args)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the scripted customer-service policy (or the scripted judge) until Ctrl-C or
    SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m spanscore.examples.llm_server", description=main.__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--capacity",
        type=int,
        default=None,
        help="answer at most this many model requests at once, the others with a 429",
    )
    parser.add_argument(
        "--delay-ms", type=int, default=0, help="wait this long before answering each request"
    )
    parser.add_argument(
        "--judge", action="store_true", help="answer as spanscore's scripted judge (judge_policy)"
    )
    parser.add_argument(
        "--users",
        type=int,
        metavar="TURNS",
        help="answer as simulated users that follow their scenario: the goal, then each "
        "fact they know, a message each (TURNS at most), then the goal is reached",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log every request")
    args = parser.parse_args(argv)
    policy: Policy = ScriptedPolicy()
    if args.judge:
        from .judge_policy import ScriptedJudge

        policy = ScriptedJudge()
    if args.users is not None:
        from .user_policy import ScenarioUsers

        policy = ScenarioUsers(args.users)
    with ScriptedLLM(
        policy,
        host=args.host,
        port=args.port,
        capacity=args.capacity,
        delay_s=args.delay_ms / 1000,
        verbose=not args.quiet,
    ) as llm:
        print(f"Scripted OpenAI-compatible API on {llm.base_url} (Ctrl-C stops)", flush=True)
        print(f"  export OPENAI_BASE_URL={llm.base_url} OPENAI_API_KEY=test", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
