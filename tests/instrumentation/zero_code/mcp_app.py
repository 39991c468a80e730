"""A tool loop over the async `openai` client whose tools are served over MCP: the shop's tools
in a server process (`shop_mcp_server.py`, over stdio), reached through `mcp.Client` (a failing
tool comes back as an `isError` result, whose text is sent to the model). The conversation id
goes in OpenTelemetry baggage under `spanscore.gen_ai.conversation.id`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import openai
import shop
from mcp import Client, StdioServerParameters
from opentelemetry import baggage, context

SERVER = StdioServerParameters(
    command=sys.executable, args=[str(Path(__file__).with_name("shop_mcp_server.py"))]
)


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def conversation(model_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=model_url, api_key="test", max_retries=0)
    messages: list[Any] = []
    async with Client(SERVER) as tools:
        for user in shop.TURNS:
            messages.append({"role": "user", "content": user})
            while True:
                completion = await client.chat.completions.create(
                    model=shop.MODEL, messages=messages, tools=shop.CHAT_TOOLS
                )
                message = completion.choices[0].message
                if not message.tool_calls:
                    messages.append({"role": "assistant", "content": message.content or ""})
                    break
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    arguments = json.loads(call.function.arguments)
                    result = await tools.call_tool(call.function.name, arguments)
                    output = (
                        json.dumps({"error": text_of(result)})
                        if result.is_error
                        else text_of(result)
                    )
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


def main() -> None:
    model_url, conversation_id = sys.argv[1:3]
    context.attach(baggage.set_baggage("spanscore.gen_ai.conversation.id", conversation_id))
    asyncio.run(conversation(model_url))


if __name__ == "__main__":
    main()
