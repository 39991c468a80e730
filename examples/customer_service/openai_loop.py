"""The customer-service agent as a plain tool loop over the real `openai` client, instrumented.

For each user turn of a conversation the loop asks the model, runs the tools it requests
against the store, sends their results back, and repeats until the model answers with text.

Instrumented the hand-written way: `spanscore.instrumentation.instrument()` (in `main`) patches
the `openai` client (a `chat` span per model call, with the tool calls it requested), each
store tool is wrapped with `@spanscore.instrumentation.tool` (an `execute_tool` span per call,
linked to the model's call id by name and arguments), and each conversation runs inside
`conversation(plan.conversation_id)`. Without `instrument()` all of it costs next to nothing.
It works with the Chat Completions API (`api="chat"`) and the Responses API
(`api="responses"`), and against any OpenAI-compatible server: the real API, or the scripted
local one in `spanscore.examples.llm_server`::

    with ScriptedLLM(ScriptedPolicy()) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test")
        for plan in conversations():
            transcript = run_conversation(client, Store(), plan, api="responses")

The loop returns a transcript: a list of events, in order,

- ``{"type": "user", "text": ...}``
- ``{"type": "tool_call", "step": ..., "id": ..., "name": ..., "arguments": ...,
  "result": ..., "error": ...}``: `step` counts the model's responses within the turn (calls
  with the same step were requested together, in parallel); `result` is what the tool returned
  and `error` None, or `result` None and `error` the tool's error message;
- ``{"type": "assistant", "text": ...}``: the model's answer, which ends the turn.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import ResponseInputItemParam, ToolParam

import spanscore.instrumentation
from spanscore.instrumentation import conversation, tool

from .scripted import MODEL, TOOL_DEFINITIONS, Conversation, conversations
from .store import Store, ToolError

MAX_STEPS = 10  # model responses per user turn before the loop gives up

# TOOL_DEFINITIONS are in the Responses API's shape; Chat Completions nests them in "function".
RESPONSES_TOOLS = cast(list[ToolParam], TOOL_DEFINITIONS)
CHAT_TOOLS = cast(
    list[ChatCompletionToolParam],
    [
        {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        for tool in TOOL_DEFINITIONS
    ],
)

Event = dict[str, Any]
Tools = dict[str, Callable[..., Any]]


def instrumented_tools(store: Store) -> Tools:
    """The store's tools by name, each wrapped with `@tool`: every execution is an
    `execute_tool` span carrying the call id of the model response that requested it."""
    names = [str(definition["name"]) for definition in TOOL_DEFINITIONS]
    return {name: tool(name=name)(getattr(store, name)) for name in names}


AGENT_NAME = "customer-service"


def run_conversation(
    client: openai.OpenAI,
    store: Store,
    plan: Conversation,
    model: str = MODEL,
    api: Literal["chat", "responses"] = "chat",
) -> list[Event]:
    """Send the plan's user turns one after another; return the transcript (see above).

    Only the users' messages are taken from the plan: what the agent does is up to the model.
    """
    transcript: list[Event] = []
    chat_history: list[ChatCompletionMessageParam] = []
    responses_history: list[ResponseInputItemParam] = []
    tools = instrumented_tools(store)
    # Every span inside carries the conversation id, the scenario it belongs to, and the
    # agent's name (a plain tool loop has no framework to name it).
    with conversation(
        plan.conversation_id,
        scenario_id=plan.scenario_id,
        user_id=plan.user_id,
        **{"gen_ai.agent.name": AGENT_NAME},
    ):
        for turn in plan.turns:
            transcript.append({"type": "user", "text": turn.user})
            if api == "chat":
                chat_history.append({"role": "user", "content": turn.user})
                transcript += _chat_turn(client, tools, model, chat_history)
            else:
                responses_history.append({"role": "user", "content": turn.user})
                transcript += _responses_turn(client, tools, model, responses_history)
    return transcript


def simulated_agent(client: openai.OpenAI, model: str = MODEL) -> Callable[[str, Any], str]:
    """The agent as `spanscore simulate` drives it: a function of the user's message and the
    turn (`spanscore.evaluation.simulation.targets.Turn`), answering one message at a time.
    Each conversation keeps its own store and chat history in `turn.state`."""

    def answer(message: str, turn: Any) -> str:
        state = turn.state
        if not state:
            state["tools"] = instrumented_tools(Store())
            state["messages"] = []
        messages: list[ChatCompletionMessageParam] = state["messages"]
        messages.append({"role": "user", "content": message})
        events = _chat_turn(client, state["tools"], model, messages)
        return str(events[-1]["text"])

    return answer


_from_environment: Callable[[str, Any], str] | None = None


def agent_turn(message: str, turn: Any) -> str:
    """`simulated_agent` over the API in OPENAI_BASE_URL / OPENAI_API_KEY::

    spanscore simulate --agent spanscore.examples.customer_service.openai_loop:agent_turn
    """
    global _from_environment
    if _from_environment is None:
        _from_environment = simulated_agent(openai.OpenAI())
    return _from_environment(message, turn)


def _chat_turn(
    client: openai.OpenAI, tools: Tools, model: str, messages: list[ChatCompletionMessageParam]
) -> list[Event]:
    """One user turn with Chat Completions; `messages` grows with the model's and tools' ones."""
    events: list[Event] = []
    for step in range(MAX_STEPS):
        completion = client.chat.completions.create(
            model=model, messages=messages, tools=CHAT_TOOLS
        )
        message = completion.choices[0].message
        calls = [call for call in message.tool_calls or [] if call.type == "function"]
        if not calls:
            messages.append({"role": "assistant", "content": message.content or ""})
            events.append({"type": "assistant", "text": message.content or ""})
            return events
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in calls
                ],
            }
        )
        for call in calls:
            event = _execute(tools, step, call.id, call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": _output(event)})
            events.append(event)
    raise RuntimeError(f"no answer after {MAX_STEPS} model responses")


def _responses_turn(
    client: openai.OpenAI, tools: Tools, model: str, items: list[ResponseInputItemParam]
) -> list[Event]:
    """One user turn with the Responses API; `items` grows with the output and tool results."""
    events: list[Event] = []
    for step in range(MAX_STEPS):
        response = client.responses.create(model=model, input=items, tools=RESPONSES_TOOLS)
        calls = [item for item in response.output if item.type == "function_call"]
        # The output items go back as input as they are (the client serializes them).
        items += cast(list[ResponseInputItemParam], response.output)
        if not calls:
            events.append({"type": "assistant", "text": response.output_text})
            return events
        for call in calls:
            event = _execute(tools, step, call.call_id, call.name, call.arguments)
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": _output(event)}
            )
            events.append(event)
    raise RuntimeError(f"no answer after {MAX_STEPS} model responses")


def _execute(tools: Tools, step: int, call_id: str, name: str, arguments: str) -> Event:
    """Run one requested tool call; a failing tool is reported, not raised."""
    event: Event = {"type": "tool_call", "step": step, "id": call_id, "name": name}
    try:
        event["arguments"] = json.loads(arguments)
    except json.JSONDecodeError:
        return {**event, "arguments": arguments, "result": None, "error": "arguments are not JSON"}
    try:
        if name not in tools:
            raise ToolError(f"unknown tool {name!r}")
        event.update(result=tools[name](**event["arguments"]), error=None)
    except ToolError as exc:
        event.update(result=None, error=str(exc))
    return event


def _output(event: Event) -> str:
    """The tool result as the model reads it: the result's JSON, or {"error": ...}."""
    if event["error"] is not None:
        return json.dumps({"error": event["error"]})
    return json.dumps(event["result"])


def main() -> None:
    """Run the scripted conversations' user turns against the API in OPENAI_BASE_URL, sending
    the spans to the spanscore collector in OTEL_EXPORTER_OTLP_ENDPOINT (default: local).

    For instance against the local scripted model::

        python -m spanscore.examples.llm_server --port 8000 &
        OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=test \\
            python -m spanscore.examples.customer_service.openai_loop --api responses
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--api", choices=["chat", "responses"], default="chat")
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    spanscore.instrumentation.instrument(service_name="customer-service-loop")
    client = openai.OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY
    try:
        for plan in conversations():
            print(f"== {plan.conversation_id}")
            for event in run_conversation(client, Store(), plan, model=args.model, api=args.api):
                print("  ", json.dumps(event))
    finally:
        spanscore.instrumentation.uninstrument()  # flushes the spans


if __name__ == "__main__":
    main()
