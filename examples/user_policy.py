"""The simulated users of the customer-service example, played deterministically by the local
OpenAI-compatible server (`llm_server.ScriptedLLM`), so that `spanscore simulate` and the demo
need no API key.

`ScriptedUsers` answers the questions `spanscore simulate` asks its user model: it recognises
the scenario by the user's goal in the system prompt, picks one of that scenario's plans
(`customer_service.scripted`) by the request's seed (each trial has its own, so trials of a
scenario with a polite and a pushy plan alternate between them), and says the plan's user
messages one by one; after the last one it ends the conversation with `goal_reached`. It
answers in the JSON shape the simulator asks for (`message`, `outcome`).

`ScenarioUsers` plays the users of any suite (``python -m spanscore.examples.llm_server
--users TURNS``): each says its goal, then what it knows, a message each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from spanscore.evaluation.simulation.user_model import read_scenario

from .customer_service.scripted import Conversation, conversations
from .llm_server import LLMRequest, Reply


class ScriptedUsers:
    """A policy for `ScriptedLLM` (see the module doc)."""

    def __init__(self, goals: Mapping[str, str], plans: list[Conversation] | None = None) -> None:
        """`goals`: scenario id -> the goal its `user:` block gives."""
        by_scenario: dict[str, list[Conversation]] = {}
        for plan in conversations() if plans is None else plans:
            by_scenario.setdefault(plan.scenario_id, []).append(plan)
        self.plans = {
            goal: by_scenario[scenario]
            for scenario, goal in goals.items()
            if scenario in by_scenario
        }
        self.calls = 0

    def __call__(self, request: LLMRequest) -> Reply:
        self.calls += 1
        system = request.messages[0].text if request.messages else ""
        plans = next((p for goal, p in self.plans.items() if goal in system), None)
        if plans is None:
            return json.dumps({"message": "", "outcome": "gave_up"})
        seed = request.body.get("seed")
        plan = plans[(seed if isinstance(seed, int) else 0) % len(plans)]
        said = sum(1 for m in request.messages if m.role == "assistant")
        if said >= len(plan.turns):
            return json.dumps({"message": "", "outcome": "goal_reached"})
        return json.dumps({"message": plan.turns[said].user, "outcome": "continue"})


class ScenarioUsers:
    """Users that follow their scenario, whatever it is, for a simulation without an API key
    (``python -m spanscore.examples.llm_server --users TURNS``) and the simulation benchmark.

    A user says its goal first (unless the scenario's `opening` said something before), then
    each fact of its `knowledge`, one a message, in order, and then ends the conversation
    with `goal_reached`: at most `turns` messages in all. It reads its scenario from the
    system prompt `spanscore simulate` writes, so an agent that does what the goal asks, with
    the facts it is given, passes. It does not read the agent's replies: a fact comes in its
    turn, whatever the agent asked."""

    def __init__(self, turns: int) -> None:
        self.turns = turns

    def __call__(self, request: LLMRequest) -> Reply:
        system = request.messages[0].text if request.messages else ""
        goal, facts = read_scenario(system)
        plan = [goal, *facts][: self.turns] if goal else []
        said = sum(1 for m in request.messages if m.role == "assistant")
        if said >= len(plan):
            return json.dumps({"message": "", "outcome": "goal_reached"})
        return json.dumps({"message": plan[said], "outcome": "continue"})
