"""An ArkSim custom agent, in the shape of ArkSim's customer-service example (`custom_agent.py`):
a `BaseAgent` subclass of the real `arksim` package, one instance per conversation, `execute`
per user turn returning an `AgentResponse`. It runs the example customer-service agent over the
model at `MODEL_URL` (set by the test)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import openai
from arksim.config import AgentConfig
from arksim.simulation_engine.agent.base import BaseAgent
from arksim.simulation_engine.tool_types import AgentResponse

from spanscore.examples.customer_service.openai_loop import simulated_agent

MODEL_URL: str | None = None
CONFIGS: list[AgentConfig] = []  # what each instance was given, for the test to look at
CALLS: list[str] = []  # the methods called, in order, for the test to look at


class CustomerServiceAgent(BaseAgent):
    def __init__(self, agent_config: AgentConfig) -> None:
        super().__init__(agent_config)
        CONFIGS.append(agent_config)
        self.chat_id = str(uuid.uuid4())
        client = openai.OpenAI(base_url=MODEL_URL, api_key="test", max_retries=0)
        self._answer = simulated_agent(client)
        self._turn = SimpleNamespace(state={})

    async def get_chat_id(self) -> str:
        CALLS.append("get_chat_id")
        return self.chat_id

    async def execute(self, user_query: str, **kwargs: object) -> AgentResponse:
        CALLS.append("execute")
        text = await asyncio.to_thread(self._answer, user_query, self._turn)
        return AgentResponse(content=text, tool_calls=[])

    async def close(self) -> None:
        CALLS.append("close")
