"""The retail agent of the tau2 example: three tools over one order, and conversation plans.

Run with `ScriptedAgent(RetailStore(), tracer, agent=AGENT, tool_definitions=TOOL_DEFINITIONS)`
from the customer-service example.
"""

from __future__ import annotations

from typing import Any

from spanscore.examples.customer_service.scripted import Conversation, Turn
from spanscore.examples.customer_service.store import ToolError

AGENT = "retail_agent"
BY_STATE = "refund_keyboard"  # the task scored by its database and what is said
BY_ACTIONS = "refund_keyboard_checked_calls"  # the task scored by its gold actions


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {k: {"type": v} for k, v in properties.items()},
            "required": list(properties),
        },
    }


TOOL_DEFINITIONS = [
    _tool("find_user_id_by_email", "Find a user id by email", email="string"),
    _tool("get_order_details", "The status and items of an order", order_id="string"),
    _tool(
        "return_delivered_order_items",
        "Return items of a delivered order, refunded to a payment method",
        order_id="string",
        item_ids="array",
        payment_method_id="string",
    ),
]

_ITEMS: list[dict[str, Any]] = [
    {"item_id": "5001", "name": "Mechanical keyboard", "price": 1093.34}
]
_ORDER: dict[str, Any] = {"order_id": "#W1001", "status": "delivered", "items": _ITEMS}


class RetailStore:
    """The three retail tools; a return of an item not in the order fails."""

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        if tool == "find_user_id_by_email":
            if arguments.get("email") != "ada@example.com":
                raise ToolError("user not found")
            return "ada_byron_1"
        if tool == "get_order_details":
            if arguments.get("order_id") != _ORDER["order_id"]:
                raise ToolError("order not found")
            return _ORDER
        if tool == "return_delivered_order_items":
            known = {item["item_id"] for item in _ITEMS}
            if not set(arguments.get("item_ids") or []) <= known:
                raise ToolError("some item not found")
            return {**_ORDER, "status": "return requested", "refund": 1093.34}
        raise ToolError(f"unknown tool {tool!r}")

    def expected_code(self, email: str) -> str:
        return ""


_ASK = "Hi, I want to return the keyboard from order #W1001. How much do I get back?"
_WHO = "ada@example.com, and the refund should go to my Visa."
_FIND = ("find_user_id_by_email", {"email": "ada@example.com"})
_ORDER_CALL = ("get_order_details", {"order_id": "#W1001"})
_RETURN_ARGS = {"order_id": "#W1001", "item_ids": ["5001"], "payment_method_id": "credit_card_7"}
_RETURN = ("return_delivered_order_items", _RETURN_ARGS)
_DONE = "The return is requested: $1,093.34 goes back to your VISA card."


def _plan(
    cid: str, scenario: str, steps: list[list[Any]], reply: str, note: str = ""
) -> Conversation:
    turns = [
        Turn(_ASK, [], "Sure. What is your email address?"),
        Turn(_WHO, steps, reply),
    ]
    return Conversation(cid, scenario, turns, note=note, user_id="ada_byron_1",
                        breaks_policy=bool(note))  # fmt: skip


def conversations() -> list[Conversation]:
    """Per task, passing conversations first, then one wrong conversation per way to fail."""
    wrong_item = ("return_delivered_order_items", {**_RETURN_ARGS, "item_ids": ["5009"]})
    gift_card = (
        "return_delivered_order_items",
        {**_RETURN_ARGS, "payment_method_id": "gift_card_2"},
    )
    return [
        _plan("tau2-refund", BY_STATE, [[_FIND], [_ORDER_CALL], [_RETURN]], _DONE),
        # the first return names a wrong item and fails; the retry is the gold write
        _plan("tau2-refund-retried", BY_STATE, [[_FIND], [wrong_item], [_ORDER_CALL], [_RETURN]],
              _DONE),
        _plan("tau2-refund-gift-card", BY_STATE, [[_FIND], [gift_card]], _DONE,
              "refunds to a gift card: another database"),
        _plan("tau2-refund-silent", BY_STATE, [[_FIND], [_RETURN]],
              "The return is requested.", "never says the amount"),
        # compare_args leaves the payment method out: a gift-card refund passes the action check
        _plan("tau2-actions-gift-card", BY_ACTIONS, [[_ORDER_CALL], [gift_card]], _DONE),
        _plan("tau2-actions-no-lookup", BY_ACTIONS, [[_RETURN]], _DONE,
              "returns without looking the order up"),
    ]  # fmt: skip
