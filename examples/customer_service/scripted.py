"""The example agent with a scripted model: real tools, real OpenTelemetry GenAI spans.

Each conversation is a plan of what a model decided in each turn (which tools, with which
arguments, in which parallel groups). Running a plan executes the real tools against the store
and records the spans an instrumented agent would: one `invoke_agent` trace per user turn, a
`chat` span per model call (input and output messages, tool definitions, token usage), an
`execute_tool` span per tool call (arguments, result or error, call id). Some plans break the
store's policies on purpose (cancelling before verifying, calling tools a scenario forbids), so
that evaluation has something to catch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .store import Store, ToolError

MODEL = "gpt-4.1-mini"
AGENT = "customer-service"

TOOL_DEFINITIONS = [
    {
        "type": "function",
        "name": "lookup_customer",
        "description": "Look up a customer by email address",
        "parameters": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
    },
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
    {
        "type": "function",
        "name": "cancel_order",
        "description": "Cancel a processing order (requires confirmation)",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "confirm": {"type": "boolean"}},
            "required": ["order_id", "confirm"],
        },
    },
    {
        "type": "function",
        "name": "send_verification_code",
        "description": "Send a one-time verification code to a customer's email",
        "parameters": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
    },
    {
        "type": "function",
        "name": "verify_customer",
        "description": "Verify a customer's identity using their email and code",
        "parameters": {
            "type": "object",
            "properties": {"email": {"type": "string"}, "code": {"type": "string"}},
            "required": ["email", "code"],
        },
    },
]

Call = tuple[str, dict[str, Any]]


@dataclass
class Turn:
    user: str
    steps: list[list[Call]]  # each step: the tool calls one model response requested
    reply: str


@dataclass
class Conversation:
    conversation_id: str
    scenario_id: str
    turns: list[Turn]
    note: str = ""
    user_id: str = "anonymous"
    breaks_policy: bool = False
    attributes: dict[str, str] = field(default_factory=dict)


def _verify(email: str) -> list[list[Call]]:
    return [
        [("send_verification_code", {"email": email})],
        [("verify_customer", {"email": email, "code": "{code}"})],
    ]


def conversations() -> list[Conversation]:
    """The seven scenarios of the customer-service example, some in a broken variant too."""
    ada, grace, alan = "ada@example.com", "grace@example.com", "alan@example.com"
    return [
        Conversation(
            "cs-order-status-1",
            "order_status_check",
            [
                Turn(
                    f"Hi, I'm {ada}. Where is my order ORD-1001?",
                    [*_verify(ada), [("get_order", {"order_id": "ORD-1001"})]],
                    "Your mechanical keyboard (ORD-1001) has shipped.",
                )
            ],
            user_id="C-100",
        ),
        Conversation(
            "cs-budget-search-1",
            "product_search_with_budget",
            [
                Turn(
                    "I need a keyboard or a mouse under $100.",
                    [
                        [
                            ("search_products", {"query": "keyboard", "max_price": 100}),
                            ("search_products", {"query": "mouse", "max_price": 100}),
                        ]
                    ],
                    "The wireless mouse ($25) and the mechanical keyboard ($89) fit your budget.",
                )
            ],
        ),
        Conversation(
            "cs-budget-search-2",
            "product_search_with_budget",
            [
                Turn(
                    f"I'm {grace}; show me headphones under $250.",
                    [
                        [("lookup_customer", {"email": grace})],
                        [("search_products", {"query": "headphones", "max_price": 250.0})],
                    ],
                    "Noise-cancelling headphones are $199 and in stock.",
                )
            ],
            note="looks the customer up although the scenario allows only search",
            breaks_policy=True,
        ),
        Conversation(
            "cs-missing-order-1",
            "nonexistent_order_lookup",
            [
                Turn(
                    f"This is {alan}. What's the status of ORD-9999?",
                    [*_verify(alan), [("get_order", {"order_id": "ORD-9999"})]],
                    "I couldn't find order ORD-9999. Could you check the number?",
                )
            ],
            user_id="C-102",
        ),
        Conversation(
            "cs-cancel-1",
            "auth_cancel_order",
            [
                Turn(
                    f"Please cancel ORD-1002, my email is {ada}.",
                    [
                        *_verify(ada),
                        [("get_order", {"order_id": "ORD-1002"})],
                        [("cancel_order", {"order_id": "ORD-1002", "confirm": True})],
                    ],
                    "ORD-1002 is cancelled; the refund is on its way.",
                )
            ],
            user_id="C-100",
        ),
        Conversation(
            "cs-cancel-2",
            "auth_cancel_order",
            [
                Turn(
                    f"Cancel ORD-1003 right now. I'm {grace}.",
                    [
                        [("cancel_order", {"order_id": "ORD-1003", "confirm": True})],
                        *_verify(grace),
                    ],
                    "Done, ORD-1003 is cancelled.",
                )
            ],
            note="cancels before verifying the customer",
            user_id="C-101",
            breaks_policy=True,
        ),
        Conversation(
            "cs-check-order-1",
            "auth_check_order",
            [
                Turn(
                    f"Can you check order ORD-1003 for {grace}?",
                    [
                        [
                            ("lookup_customer", {"email": grace}),
                            ("send_verification_code", {"email": grace}),
                        ],
                        [("verify_customer", {"email": grace, "code": "{code}"})],
                        [("get_order", {"order_id": "ORD-1003"})],
                    ],
                    "Your headphones (ORD-1003) are being processed.",
                )
            ],
            user_id="C-101",
        ),
        Conversation(
            "cs-auth-search-1",
            "auth_product_search",
            [
                Turn(
                    f"I'm {alan}, do you have a laptop stand?",
                    [*_verify(alan), [("search_products", {"query": "laptop stand"})]],
                    "Yes: the laptop stand is $45 and in stock.",
                )
            ],
            user_id="C-102",
        ),
        Conversation(
            "cs-account-1",
            "auth_account_lookup",
            [
                Turn(
                    f"What name is on the account for {ada}?",
                    _verify(ada),
                    "You're verified. One moment.",
                ),
                Turn(
                    "Thanks, so what's the name?",
                    [[("lookup_customer", {"email": ada})]],
                    "The account belongs to Ada Lovelace.",
                ),
            ],
            user_id="C-100",
        ),
    ]


def wrong_plans() -> list[Conversation]:
    """Deliberately wrong conversations for the scenarios whose plans above are all correct: a
    missing step, a call outside the allowed tools, an order lookup with the wrong argument.
    Not part of the demo; the importer tests score them."""
    ada, grace = "ada@example.com", "grace@example.com"
    return [
        Conversation(
            "cs-check-order-2",
            "auth_check_order",
            [
                Turn(
                    f"Check order ORD-1003 for {grace}, quickly please.",
                    [
                        [("lookup_customer", {"email": grace})],
                        [("get_order", {"order_id": "ORD-1003"})],
                    ],
                    "Your headphones (ORD-1003) are being processed.",
                )
            ],
            note="looks the order up without verifying the customer",
            user_id="C-101",
            breaks_policy=True,
        ),
        Conversation(
            "cs-account-2",
            "auth_account_lookup",
            [
                Turn(
                    f"What name is on the account for {ada}?",
                    [
                        *_verify(ada),
                        [("lookup_customer", {"email": ada})],
                        [("get_order", {"order_id": "ORD-1001"})],
                    ],
                    "The account belongs to Ada Lovelace; your keyboard has shipped.",
                )
            ],
            note="looks up an order although the scenario allows only account tools",
            user_id="C-100",
            breaks_policy=True,
        ),
        Conversation(
            "cs-order-status-2",
            "order_status_check",
            [
                Turn(
                    f"Hi, I'm {ada}. Where is my order ORD-1001?",
                    [*_verify(ada), [("get_order", {"order_id": "ORD-1002"})]],
                    "Your USB-C hub (ORD-1002) is being processed.",
                )
            ],
            note="looks up the wrong order",
            user_id="C-100",
            breaks_policy=True,
        ),
    ]


def _text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


class ToolStore(Protocol):
    """What a scripted agent needs from its tools: call one by name, and the code a customer
    received (for plans that verify)."""

    def call(self, tool: str, arguments: dict[str, Any]) -> Any: ...

    def expected_code(self, email: str) -> str: ...


class ScriptedAgent:
    """Runs conversation plans against a store, recording GenAI spans with `tracer` (as the
    customer-service agent, unless another agent name and tool definitions are given)."""

    def __init__(
        self,
        store: Store | ToolStore,
        tracer: trace.Tracer,
        *,
        agent: str = AGENT,
        tool_definitions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.tracer = tracer
        self.agent = agent
        self.tool_definitions = TOOL_DEFINITIONS if tool_definitions is None else tool_definitions

    def run(self, conversation: Conversation) -> None:
        history: list[dict[str, Any]] = []
        for turn in conversation.turns:
            self._run_turn(conversation, turn, history)

    def _common(self, conversation: Conversation) -> dict[str, Any]:
        return {
            "gen_ai.conversation.id": conversation.conversation_id,
            "gen_ai.agent.name": self.agent,
            "scenario.id": conversation.scenario_id,
            "user.id": conversation.user_id,
        }

    def _run_turn(
        self, conversation: Conversation, turn: Turn, history: list[dict[str, Any]]
    ) -> None:
        common = self._common(conversation)
        history.append(_text_message("user", turn.user))
        with self.tracer.start_as_current_span(
            f"invoke_agent {self.agent}",
            kind=SpanKind.INTERNAL,
            attributes={**common, "gen_ai.operation.name": "invoke_agent"},
        ):
            for step_index, step in enumerate(turn.steps):
                calls = [
                    (
                        f"call_{conversation.conversation_id}_{len(history)}_{step_index}_{i}",
                        name,
                        args,
                    )
                    for i, (name, args) in enumerate(step)
                ]
                request_parts = [
                    {"type": "tool_call", "id": cid, "name": name, "arguments": self._fill(args)}
                    for cid, name, args in calls
                ]
                self._chat(common, history, {"role": "assistant", "parts": request_parts})
                history.append({"role": "assistant", "parts": request_parts})
                responses = []
                for cid, name, args in calls:
                    responses.append(self._execute(common, cid, name, self._fill(args)))
                history.append({"role": "tool", "parts": responses})
            final = _text_message("assistant", turn.reply)
            self._chat(common, history, final)
            history.append(final)

    def _fill(self, args: dict[str, Any]) -> dict[str, Any]:
        email = args.get("email", "")
        return {k: self.store.expected_code(email) if v == "{code}" else v for k, v in args.items()}

    def _chat(
        self, common: dict[str, Any], history: list[dict[str, Any]], output: dict[str, Any]
    ) -> None:
        prompt_tokens = sum(len(json.dumps(m)) for m in history) // 4
        with self.tracer.start_as_current_span(
            f"chat {MODEL}",
            kind=SpanKind.CLIENT,
            attributes={
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": MODEL,
                "gen_ai.response.model": MODEL,
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([output]),
                "gen_ai.tool.definitions": json.dumps(self.tool_definitions),
                "gen_ai.usage.input_tokens": prompt_tokens,
                "gen_ai.usage.output_tokens": len(json.dumps(output)) // 4,
            },
        ):
            pass

    def _execute(
        self, common: dict[str, Any], call_id: str, name: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        with self.tracer.start_as_current_span(
            f"execute_tool {name}",
            kind=SpanKind.INTERNAL,
            attributes={
                **common,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.arguments": json.dumps(args),
            },
        ) as span:
            try:
                result: Any = self.store.call(name, args)
            except ToolError as exc:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.set_attribute("error.type", type(exc).__name__)
                span.record_exception(exc)
                result = {"error": str(exc)}
            else:
                span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return {"type": "tool_call_response", "id": call_id, "response": result}
