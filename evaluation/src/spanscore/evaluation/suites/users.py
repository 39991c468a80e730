"""What a suite says about simulated users: a scenario's `user:` block, and the suite's
`simulator:` block (the model that plays the users).

`spanscore simulate` drives the agent with one simulated user per trial of each scenario that
has a `user:` block; the same scenario's assertions then judge the conversation. The fields
are the union of what the simulators our users come from describe (docs/simulation.md maps
ArkSim's, watsonx's, Google ADK's and tau2-bench's fields onto these).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanscore.evaluation.llm.types import JudgeConfig


class SimulatedUser(BaseModel):
    """A scenario's simulated user: who they are, what they want, what they know."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(
        min_length=1,
        description="what the user wants from the agent (ArkSim `goal`, watsonx `story`, ADK "
        "`conversation_plan`, tau2 `reason_for_call`)",
    )
    profile: str | None = Field(None, description="who the user is (ArkSim `user_profile`)")
    persona: str | None = Field(
        None, description="how the user speaks and behaves (tau2 `persona`)"
    )
    knowledge: list[str] = Field(
        default_factory=list,
        description="facts the user knows and gives when asked (ArkSim `knowledge`, tau2 "
        "`known_info`)",
    )
    unknown: list[str] = Field(
        default_factory=list,
        description="what the user does not know: asked for it, they say they do not know, "
        "and never invent it (tau2 `unknown_info`)",
    )
    instructions: str | None = Field(
        None,
        description="how the user goes about it, step by step (tau2 `task_instructions`)",
    )
    agent_context: str | None = Field(
        None, description="what the user knows about the agent (ArkSim `agent_context`)"
    )
    opening: str | None = Field(
        None,
        description="the first message, sent as it is (watsonx `starting_sentence`, ADK "
        "`starting_prompt`); default: the simulated user writes it",
    )
    stop_when: str | None = Field(
        None,
        description="when the user ends the conversation (default: when the goal is reached, "
        "or clearly cannot be)",
    )
    max_turns: int | None = Field(
        None, ge=1, description="user messages at most (default: `simulate --max-turns`)"
    )


class SimulatorConfig(JudgeConfig):
    """The suite's `simulator:` block: the model that plays the users, on the same machinery
    as the judge (adaptive concurrency, retries, Retry-After, cost, a cache in the lake)."""

    temperature: float = Field(
        0.7, ge=0, le=2, description="sampling temperature of the users' messages"
    )
    max_tokens: int = Field(300, ge=1, description="longest user message, in tokens")

    def cache_scope(self, endpoint: str) -> str:
        """The whole endpoint, port and path included: a user model on another port or
        server (restarted elsewhere, another one on the host) is another user model, and the
        turns the first one wrote are not replayed for it."""
        return endpoint.rstrip("/")

    @model_validator(mode="after")
    def _no_batch(self) -> SimulatorConfig:
        if self.batch:
            raise ValueError("the simulator answers turn by turn: batch mode cannot be used")
        return self
