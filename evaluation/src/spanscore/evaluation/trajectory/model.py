"""Trajectories: each conversation rebuilt from its spans, whatever produced them.

A trajectory is conversation -> turns -> steps. A step is a model call, a tool call or an agent
hand-off, in causal order. The collector has already read every producer's convention into the
same `spans` columns (`operation`, `tool_*`, `user_message`, `tool_calls_requested`,
`tool_results`, `response_text`), and the rules that make conversations, turns and tool calls
of them are SQL, written once in `spanscore.lake.schema` and shared with the `tool_calls`,
`turns` and `conversations` views (docs/conversations.md). Rebuilding is one query over a
window (`trajectory_rows`) and one pass in Python that only assembles what it returns: parsing
arguments and results (JSON, else a Python literal repr read with `ast.literal_eval`, never
`eval`; anything else stays a string) and saying what could not be read. Nothing is fatal: a
conversation gets a warning and the rest is rebuilt.
"""

from __future__ import annotations

import datetime as dt
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

# The models' validators and serializers are built when first used, not when the module is
# imported: the assembler makes models without validating them, and `spanscore show` prints
# them without serializing them, so it never pays the build (a sixth of its time cold).
_DEFERRED = ConfigDict(defer_build=True)


class ToolCall(BaseModel):
    model_config = _DEFERRED

    kind: Literal["tool_call"] = "tool_call"
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None  # the error's type, else its message
    error_message: str | None = None  # what the failure said (status description, exception)
    call_id: str | None = None
    span_id: str | None = None
    trace_id: str | None = None
    start_time: dt.datetime | None = None
    latency_ms: float | None = None
    parallel_group: int | None = None  # steps requested by the same model response
    source: Literal["span", "messages", "span+messages"] = "span"


class ModelCall(BaseModel):
    model_config = _DEFERRED

    kind: Literal["model_call"] = "model_call"
    span_id: str
    trace_id: str
    name: str
    start_time: dt.datetime | None = None
    latency_ms: float | None = None
    requested: list[str] = Field(default_factory=list)  # names of the tools it asked for
    response_text: str | None = None
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class Handoff(BaseModel):
    model_config = _DEFERRED

    kind: Literal["handoff"] = "handoff"
    span_id: str
    from_agent: str | None = None
    to_agent: str | None = None
    start_time: dt.datetime | None = None


Step = Annotated[ToolCall | ModelCall | Handoff, Field(discriminator="kind")]


class Turn(BaseModel):
    model_config = _DEFERRED

    index: int
    user_message: str | None = None
    steps: list[Step] = Field(default_factory=list)
    final_response: str | None = None

    @cached_property
    def tool_calls(self) -> list[ToolCall]:
        """The turn's tool calls in order (computed once: a trajectory is read, not edited)."""
        return [s for s in self.steps if isinstance(s, ToolCall)]


class Trajectory(BaseModel):
    model_config = _DEFERRED

    conversation_id: str
    agent_name: str | None = None
    service_name: str | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    span_count: int = 0
    # Conversation-level attributes (scenario.id, user.id, gen_ai.tool.definitions, and any
    # attribute asked for when loading): the first value a span of the conversation carries.
    attributes: dict[str, Any] = Field(default_factory=dict)
    turns: list[Turn] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @cached_property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call in order (computed once: a trajectory is read, not edited)."""
        return [c for t in self.turns for c in t.tool_calls]

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Text derived from the trajectory once and reused (the judge's transcript); it
        travels with the trajectory to the process that scores it again."""
        return {}

    @property
    def model_calls(self) -> list[ModelCall]:
        return [s for t in self.turns for s in t.steps if isinstance(s, ModelCall)]

    @property
    def first_user_message(self) -> str | None:
        return next((t.user_message for t in self.turns if t.user_message is not None), None)

    @property
    def final_response(self) -> str | None:
        return next(
            (t.final_response for t in reversed(self.turns) if t.final_response is not None),
            None,
        )
