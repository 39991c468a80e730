"""`AssertionBase`: one entry of a scenario's `assertions` (or the suite's `metrics`), a typed,
validated configuration that scores one trajectory."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory


class AssertionBase(BaseModel):
    """One entry of a scenario's `assertions` (or the suite's `metrics`): a typed, validated
    configuration that scores one trajectory. Subclasses set `type` (a Literal) and
    implement `evaluate`; `check` reports problems found after loading (unknown metrics...)."""

    model_config = ConfigDict(extra="forbid")
    # Scored only on simulated conversations (it judges the simulated user).
    simulated_only: ClassVar[bool] = False

    type: str
    name: str | None = Field(None, description="metric name in the scores (default: the type)")
    description: str | None = None
    threshold: float | None = Field(
        None, description="pass when the score is at least this (overrides the mode's rule)"
    )

    @property
    def metric_name(self) -> str:
        return self.name or self.type

    @abstractmethod
    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        """Score one trajectory: every assertion type gives its rule here."""

    def check(self, registry: MetricRegistry) -> list[str]:
        return []

    def may_judge(self, registry: MetricRegistry) -> bool:
        """Whether scoring may ask the LLM judge (it then runs in a judge session)."""
        return False

    if not TYPE_CHECKING:  # as pydantic's own: mypy must not allow any attribute

        def __getattr__(self, item: str) -> Any:
            # Private attributes hold what an assertion works out once per suite (its plan,
            # its prepared expectation) and are read on every conversation: straight from
            # their dict. Pydantic's own way asks each whether it is a descriptor, through an
            # exception, on every read (3-5 us; 16 reads a conversation on the bench's suite).
            private = object.__getattribute__(self, "__pydantic_private__")
            if private is not None and item in private and item in _plain_private(type(self)):
                return private[item]
            return super().__getattr__(item)

    def graded(self, value: float, passed: bool, **fields: Any) -> Score:
        """A graded score; `threshold`, when set, decides pass/fail instead of the rule."""
        value = min(1.0, max(0.0, value))
        if self.threshold is not None:
            passed = value >= self.threshold
        return Score(value=value, passed=passed, threshold=self.threshold, **fields)


_PLAIN_PRIVATE: dict[type, frozenset[str]] = {}


def _plain_private(cls: type[AssertionBase]) -> frozenset[str]:
    """The class's private attributes whose default is not a descriptor (pydantic calls a
    descriptor's `__get__` on each read: those are left to it)."""
    found = _PLAIN_PRIVATE.get(cls)
    if found is None:
        found = _PLAIN_PRIVATE[cls] = frozenset(
            name
            for name, attribute in cls.__private_attributes__.items()
            if not hasattr(attribute, "__get__")
        )
    return found
