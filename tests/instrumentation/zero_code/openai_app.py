"""A plain tool loop over the `openai` client (Chat Completions, or the Responses API with
`responses` as third argument). The conversation id goes in OpenTelemetry baggage under
`spanscore.gen_ai.conversation.id`, as an upstream service would send it in a W3C `baggage`
header."""

from __future__ import annotations

import sys
from typing import Any

import openai
import shop
from opentelemetry import baggage, context


def chat_turn(client: openai.OpenAI, messages: list[Any]) -> None:
    while True:
        completion = client.chat.completions.create(
            model=shop.MODEL, messages=messages, tools=shop.CHAT_TOOLS
        )
        message = completion.choices[0].message
        calls = message.tool_calls or []
        if not calls:
            messages.append({"role": "assistant", "content": message.content or ""})
            return
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            output = shop.run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


def responses_turn(client: openai.OpenAI, items: list[Any]) -> None:
    while True:
        response = client.responses.create(model=shop.MODEL, input=items, tools=shop.TOOLS)
        calls = [item for item in response.output if item.type == "function_call"]
        items += response.output
        if not calls:
            return
        for call in calls:
            output = shop.run_tool(call.name, call.arguments)
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": output}
            )


def main() -> None:
    model_url, conversation_id = sys.argv[1:3]
    api = sys.argv[3] if len(sys.argv) > 3 else "chat"
    client = openai.OpenAI(base_url=model_url, api_key="test", max_retries=0)
    context.attach(baggage.set_baggage("spanscore.gen_ai.conversation.id", conversation_id))
    history: list[Any] = []
    for user in shop.TURNS:
        history.append({"role": "user", "content": user})
        (chat_turn if api == "chat" else responses_turn)(client, history)


if __name__ == "__main__":
    main()
