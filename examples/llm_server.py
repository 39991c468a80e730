"""A deterministic local stand-in for the OpenAI API, for the demo, the examples and the tests.

`ScriptedLLM` is a small threaded HTTP server on loopback that the real `openai` client (sync
and async) talks to as if it were the OpenAI API::

    with ScriptedLLM(ScriptedPolicy()) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test")

It serves `POST /v1/chat/completions` and `POST /v1/responses` (plain JSON or server-sent
events with `stream=true`, tool calls including parallel ones, token usage) and
`GET /v1/models`, and answers malformed requests, unknown paths and unknown models with the
status codes and error bodies of the real API.

What the "model" answers is decided by a *policy*: a function that receives the request in one
simple form for both APIs (`LLMRequest`: messages with role, text, requested tool calls and tool
results, plus the tool definitions and the model) and returns either a final text or a list of
`(tool_name, arguments)` tool calls; the server assigns the call ids. `ScriptedPolicy` replays
the customer-service plans of `customer_service.scripted`.

A few knobs simulate an unreliable provider (for tests of code that calls an LLM): `delay_s`
delays every answer, `fail_first` answers the first requests with `fail_status` (500, 429, ...),
`garbage_first` answers the next ones with a 200 whose body is not JSON. `request_count` counts
every request received. The knobs are plain attributes and may be changed while serving.

Run it by hand with ``python -m spanscore.examples.llm_server --port 8000``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, TypeAlias

from .customer_service.scripted import Conversation, Turn, conversations
from .customer_service.store import Store

DEFAULT_MODELS = ("gpt-4.1-mini", "gpt-4.1", "gpt-4o-mini", "gpt-4o")
CREATED = 1_767_225_600  # the fixed creation time of every answer (2026-01-01), for determinism
CHUNK_CHARS = 12  # streamed texts and tool arguments arrive in pieces of this many characters


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
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


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
    n: int, request: LLMRequest, text: str, calls: list[ToolCall]
) -> dict[str, Any]:
    """The `chat.completion` object answering `request` with `text` or `calls`."""
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
        "usage": _chat_usage(prompt, completion),
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


def _chat_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_chunks(
    n: int, request: LLMRequest, text: str, calls: list[ToolCall]
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
        yield {**envelope, "choices": [], "usage": _chat_usage(*_usage(request, text, calls))}


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
    n: int, request: LLMRequest, text: str, calls: list[ToolCall], done: bool = True
) -> dict[str, Any]:
    """The `response` object answering `request` (`done=False`: as it starts, no output)."""
    body = request.body
    prompt, completion = _usage(request, text, calls)
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
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
    n: int, request: LLMRequest, text: str, calls: list[ToolCall]
) -> Iterator[dict[str, Any]]:
    """The events of the same answer, as the Responses API streams them.

    response.created, response.in_progress; per output item output_item.added, then the
    arguments (function_call_arguments.delta/.done) or the text (content_part.added,
    output_text.delta/.done, content_part.done), output_item.done; response.completed.
    """
    counter = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(counter), **fields}

    started = response_object(n, request, text, calls, done=False)
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
    yield event("response.completed", response=response_object(n, request, text, calls))


# ---- the server --------------------------------------------------------------------------


class ScriptedLLM:
    """An OpenAI-compatible HTTP server on loopback whose answers come from `policy`.

    Use it as a context manager (or `start()` / `close()`); `base_url` is what to give
    `openai.OpenAI(base_url=...)`. Requests for a model not in `models` get a 404 like the
    real API's. Knobs (plain attributes, read at each request):

    - `delay_s`: wait this long before answering each request (to provoke client timeouts);
    - `fail_first`: answer the first N requests with status `fail_status` and an OpenAI-style
      error body (500 and 429 are retried by the openai client);
    - `garbage_first`: answer the N requests after those with a 200 whose body is not JSON,
      `garbage` (content type, body): by default an HTML page, which the openai client returns
      as a plain `str` instead of raising (strict validation: APIResponseValidationError);
      with an "application/json" type it raises json.JSONDecodeError;
    - `retry_after_ms`: the `retry-after-ms` header sent with failures (None: no header), which
      the openai client obeys instead of its backoff (the default keeps retries fast).

    `request_count` counts every request received, including failed ones; exceptions raised
    while answering (by the policy, say) are answered with 500 and kept in `errors`.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Sequence[str] = DEFAULT_MODELS,
        delay_s: float = 0.0,
        fail_first: int = 0,
        fail_status: int = 500,
        garbage_first: int = 0,
        retry_after_ms: int | None = 10,
        verbose: bool = False,
    ) -> None:
        self.policy: Policy = policy or ScriptedPolicy()
        self.models = tuple(models)
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.garbage_first = garbage_first
        self.retry_after_ms = retry_after_ms
        self.garbage = ("text/html", b"<html><body>502 Bad Gateway</body></html>")
        self.verbose = verbose
        self.errors: list[Exception] = []
        self.host = host
        self._lock = threading.Lock()
        self._requests = 0
        self._answers = 0
        self._history: dict[str, list[Message]] = {}
        self._stopping = threading.Event()
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
    def request_count(self) -> int:
        with self._lock:
            return self._requests

    def start(self) -> ScriptedLLM:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, args=(0.02,), name="scripted-llm", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: waiting answers are cut short and open connections closed."""
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.close_connections()
        self._server.server_close()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # called by the handler threads

    def _arrived(self) -> int:
        with self._lock:
            self._requests += 1
            return self._requests - 1

    def _next_answer(self) -> int:
        with self._lock:
            self._answers += 1
            return self._answers

    def _answer(self, handler: _Handler, method: str, path: str, raw: bytes) -> None:
        index = self._arrived()
        if self.delay_s > 0:
            self._stopping.wait(self.delay_s)
        if index < self.fail_first:
            raise _failure(self.fail_status)
        if index < self.fail_first + self.garbage_first:
            content_type, garbage = self.garbage
            handler.send_body(200, garbage, content_type)
            return
        route = (method, path)
        if route == ("GET", "/v1/models"):
            models = [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "system"}
                for m in self.models
            ]
            handler.send_json(200, {"object": "list", "data": models})
            return
        if route not in (("POST", "/v1/chat/completions"), ("POST", "/v1/responses")):
            raise APIError(f"Invalid URL ({method} {path})", status=404)
        try:
            body = json.loads(raw)
        except ValueError:
            raise APIError(
                "We could not parse the JSON body of your request. The OpenAI API expects a "
                "JSON payload, but what was sent was not valid JSON."
            ) from None
        if not isinstance(body, dict):
            raise APIError("The request body must be a JSON object.")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise APIError("Invalid type for 'stream': expected a boolean.", param="stream")
        if path == "/v1/chat/completions":
            request = parse_chat(body, self.models)
            text, calls = _decide(self.policy, request)
            n = self._next_answer()
            if stream:
                handler.send_events((None, c) for c in chat_chunks(n, request, text, calls))
            else:
                handler.send_json(200, chat_completion(n, request, text, calls))
            return
        with self._lock:
            request, conversation = parse_responses(body, self.models, self._history)
        text, calls = _decide(self.policy, request)
        n = self._next_answer()
        if body.get("store", True) is not False:
            answer = Message("assistant", text, tuple(calls))
            with self._lock:
                self._history[f"resp_{n}"] = [*conversation, answer]
        if stream:
            handler.send_events((e["type"], e) for e in response_events(n, request, text, calls))
        else:
            handler.send_json(200, response_object(n, request, text, calls))


def _failure(status: int) -> APIError:
    if status == 429:
        return APIError(
            "Rate limit reached for requests. Please try again shortly.",
            status=429,
            kind="requests",
            code="rate_limit_exceeded",
        )
    return APIError(
        "The server had an error while processing your request. Sorry about that!",
        status=status,
        kind="server_error",
    )


class _Server(ThreadingHTTPServer):
    """The HTTP server, remembering its open connections so that close() can end them."""

    daemon_threads = True
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
    """One connection: reads each request and lets the ScriptedLLM answer it."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in separate writes
    server: _Server

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        llm = self.server.llm
        try:
            llm._answer(self, method, path, raw)
        except APIError as error:
            headers = {}
            if error.status in (429, 500, 502, 503) and llm.retry_after_ms is not None:
                headers["retry-after-ms"] = str(llm.retry_after_ms)
            self.send_json(error.status, error.body, headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout)
        except Exception as exc:
            llm.errors.append(exc)
            self.send_json(500, _failure(500).body)

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

    def send_events(self, events: Iterable[tuple[str | None, dict[str, Any]]]) -> None:
        """Server-sent events in a chunked body; chat completions end with `data: [DONE]`."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
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
    """Serve the scripted customer-service policy until Ctrl-C (or SIGTERM)."""
    parser = argparse.ArgumentParser(
        prog="python -m spanscore.examples.llm_server", description=main.__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    with ScriptedLLM(ScriptedPolicy(), host=args.host, port=args.port, verbose=True) as llm:
        print(f"Scripted OpenAI-compatible API on {llm.base_url} (Ctrl-C stops)", flush=True)
        print(f"  export OPENAI_BASE_URL={llm.base_url} OPENAI_API_KEY=test", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


if __name__ == "__main__":
    main()
