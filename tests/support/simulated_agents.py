"""Agents the simulation tests drive (`simulate --agent tests.support.simulated_agents:NAME`).

`customer_service` is the example agent (the `openai` tool loop, instrumented) over the model
at `MODEL_URL`, which the test sets; `by_scenario` misbehaves as its scenario's id says, for
the faults a simulation must survive; `RELEASE` lets a hanging agent go when the test ends.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import openai

from spanscore.examples.customer_service.openai_loop import simulated_agent

MODEL_URL: str | None = None
RELEASE = threading.Event()
_agents: dict[str, Any] = {}


def customer_service(message: str, turn: Any) -> str:
    if MODEL_URL not in _agents:
        client = openai.OpenAI(base_url=MODEL_URL, api_key="test", max_retries=0)
        _agents[str(MODEL_URL)] = simulated_agent(client)
    return str(_agents[str(MODEL_URL)](message, turn))


def by_scenario(message: str, turn: Any) -> Any:
    """Raises, answers garbage, hangs, or answers, as the scenario id says."""
    if turn.scenario_id == "raises":
        raise RuntimeError("the agent crashed on purpose")
    if turn.scenario_id == "garbage":
        return 42
    if turn.scenario_id == "hangs":
        RELEASE.wait(120)
        return "too late"
    return f"Glad to help with: {message}"


async def async_echo(message: str) -> str:
    await asyncio.sleep(0)
    return f"echo: {message}"
