"""A LangGraph ReAct agent with langchain-openai's ChatOpenAI: two turns on one thread, whose
thread id is the conversation id; a failing tool's error goes to the model as the tool message
(`handle_tool_errors=True`)."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import shop
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode

with warnings.catch_warnings():  # moved to `langchain.agents` (not installed), still shipped
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


def main() -> None:
    model_url, conversation_id = sys.argv[1:3]
    model = ChatOpenAI(model=shop.MODEL, base_url=model_url, api_key="test", max_retries=0)  # type: ignore[arg-type]
    tools = ToolNode([tool(shop.get_order), tool(shop.search_products)], handle_tool_errors=True)
    agent = create_react_agent(model, tools, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": conversation_id}}
    for user in shop.TURNS:
        agent.invoke({"messages": [{"role": "user", "content": user}]}, config)


if __name__ == "__main__":
    main()
