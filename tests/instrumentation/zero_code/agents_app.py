"""An OpenAI Agents SDK agent (Responses API): two `Runner.run` calls of one conversation, whose
`group_id` is the conversation id; a failing tool's error is sent to the model as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import shop
from agents import Agent, RunConfig, Runner, set_default_openai_api, set_default_openai_client
from agents.tool import function_tool
from openai import AsyncOpenAI


def failure(ctx: Any, error: Exception) -> str:
    return json.dumps({"error": str(error)})


@function_tool(failure_error_function=failure)
def get_order(order_id: str) -> str:
    """Get order details by order ID"""
    return json.dumps(shop.get_order(order_id))


@function_tool(failure_error_function=failure)
def search_products(query: str, max_price: float) -> str:
    """Search the product catalog by keyword and price limit"""
    return json.dumps(shop.search_products(query, max_price))


async def conversation(conversation_id: str) -> None:
    agent = Agent(
        name="shop-assistant",
        instructions="You are a customer-service agent. Use the tools to answer.",
        model=shop.MODEL,
        tools=[get_order, search_products],
    )
    items: list[Any] = []
    for user in shop.TURNS:
        items = [*items, {"role": "user", "content": user}]
        config = RunConfig(group_id=conversation_id, workflow_name="support")
        result = await Runner.run(agent, items, run_config=config)
        items = result.to_input_list()


def main() -> None:
    model_url, conversation_id = sys.argv[1:3]
    set_default_openai_client(
        AsyncOpenAI(base_url=model_url, api_key="test", max_retries=0), use_for_tracing=False
    )
    set_default_openai_api("responses")
    asyncio.run(conversation(conversation_id))


if __name__ == "__main__":
    main()
