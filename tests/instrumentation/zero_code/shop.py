"""The apps' tools and data, and the two user turns of the conversation they hold (the scripted
model answers them with a parallel pair of `get_order` calls, one of which fails, then one
`search_products` call)."""

from __future__ import annotations

import json
from typing import Any

MODEL = "gpt-4.1-mini"
TURN_1 = "Where are my orders ORD-1001 and ORD-9999?"
TURN_2 = "Any keyboards under $100?"
TURNS = (TURN_1, TURN_2)
MISSING = "order ORD-9999 not found"
SEARCH = {"query": "keyboard", "max_price": 100.0}

ORDERS = {"ORD-1001": {"order_id": "ORD-1001", "status": "shipped", "item": "Mechanical keyboard"}}
PRODUCTS = [{"name": "Mechanical keyboard", "price": 89.0}, {"name": "Monitor", "price": 199.0}]

# In the Responses API's shape (Chat Completions nests them in "function").
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_order",
        "description": "Get order details by order ID",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
    {
        "type": "function",
        "name": "search_products",
        "description": "Search the product catalog by keyword and optional price filter",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "max_price": {"type": "number"}},
            "required": ["query"],
        },
    },
]
CHAT_TOOLS = [
    {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS
]


class ToolError(Exception):
    pass


def get_order(order_id: str) -> dict[str, Any]:
    """Get order details by order ID"""
    if order_id not in ORDERS:
        raise ToolError(f"order {order_id} not found")
    return ORDERS[order_id]


def search_products(query: str, max_price: float | None = None) -> list[dict[str, Any]]:
    """Search the product catalog by keyword and optional price filter"""
    return [
        p
        for p in PRODUCTS
        if query.lower() in str(p["name"]).lower()
        and (max_price is None or p["price"] <= max_price)
    ]


FUNCTIONS = {"get_order": get_order, "search_products": search_products}


def run_tool(name: str, arguments: str) -> str:
    """A requested call's output as the model reads it: the result's JSON, or {"error": ...}."""
    try:
        return json.dumps(FUNCTIONS[name](**json.loads(arguments)))
    except ToolError as exc:
        return json.dumps({"error": str(exc)})
