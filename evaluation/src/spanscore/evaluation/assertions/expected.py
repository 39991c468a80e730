"""Scenario assertions over a trajectory's tool calls and answers.

- `tool_calls`: the calls made against the calls expected, in one of the match modes
  (`modes.py`, one row each), with optional calls, repetitions, parallel steps, per-tool
  argument rules and name normalisation.
- `forbidden`: calls that must never be made.
- `order`: "every call to B comes after a call to A" (verify before cancel).
- `goals`: a goal dependency graph of required calls and text goals (watsonx Orchestrate's
  ground truth shape), passing when every goal is met in an order its dependencies allow.
- `response`: checks of the final answer (keywords, pattern, similarity to an expected text).

Each gives one graded `Score` (value in [0, 1]) and a pass/fail by the rule documented on the
mode; docs/assertions.md has every rule and formula. Pairing of repeated calls is optimal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from spanscore.evaluation.matching.arguments import (
    ArgMode,
    ArgumentResult,
    ArgumentRule,
    match_arguments,
)
from spanscore.evaluation.trajectory.model import ToolCall


@lru_cache(maxsize=4096)
def normalize_name(name: str) -> str:
    """Tool-name normalisation: case and the separators - _ . and spaces do not count."""
    return re.sub(r"[-_.\s]", "", name).casefold()


class ArgumentOverride(BaseModel):
    """Per-tool argument settings of an assertion (`tools: {get_order: {match: partial}}`)."""

    model_config = ConfigDict(extra="forbid")

    match: ArgMode | None = None
    rules: dict[str, ArgumentRule] = Field(default_factory=dict)


class ExpectedCall(BaseModel):
    """One expected tool call. In a suite, a bare tool name is enough (`- get_order`: the name
    only, arguments not compared)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    string_shorthand: ClassVar[dict[str, Any]] = {
        "type": "string",
        "description": "a tool name: the call, arguments not compared",
    }

    name: str = Field(validation_alias=AliasChoices("name", "tool"), description="tool name")
    arguments: dict[str, Any] | None = Field(
        None, description="expected arguments; absent: arguments are not compared"
    )
    match: ArgMode | None = Field(
        None,
        description="argument key sets: exact (default when arguments are given), partial "
        "(expected keys present, extras allowed), superset (no unexpected keys), ignore",
    )
    rules: dict[str, ArgumentRule] = Field(
        default_factory=dict, description="per-argument rules, by dot path"
    )
    optional: bool = Field(False, description="the call may be left out")
    min: int | None = Field(None, ge=0, description="fewest repetitions (default 1; optional: 0)")
    max: int | None = Field(
        None, ge=1, description="most repetitions (default: max(min, 1)); null: unbounded"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _bounds(self) -> ExpectedCall:
        low, high = self.bounds
        if high is not None and low > high:
            raise ValueError(f"min ({low}) is more than max ({high})")
        if self.optional and self.min:
            raise ValueError("an optional call cannot have min >= 1")
        return self

    @property
    def bounds(self) -> tuple[int, int | None]:
        low = self.min if self.min is not None else (0 if self.optional else 1)
        if "max" in self.model_fields_set:
            return low, self.max
        return low, max(low, 1)


ExpectedStep = ExpectedCall | list[ExpectedCall]


@dataclass
class Item:
    """An expected call as the matcher uses it: bounds resolved, group known."""

    call: ExpectedCall
    index: int
    group: int | None  # expected parallel step it belongs to
    low: int
    high: int | None


_NAMES_ONLY = ArgumentResult()  # no checks: passed, score 1


class CallMatcher:
    """Whether an actual call satisfies an expected one, with the assertion's settings."""

    def __init__(
        self,
        default_mode: ArgMode,
        overrides: Mapping[str, ArgumentOverride],
        normalize: bool,
    ) -> None:
        self.default_mode = default_mode
        self.normalize = normalize
        self.overrides = {self.key(k): v for k, v in overrides.items()}
        self._cache: dict[tuple[int, int], ArgumentResult | None] = {}
        self._keys: dict[str, str] = {}
        self._settings: dict[int, tuple[ArgMode, dict[str, ArgumentRule]] | None] = {}

    def key(self, name: str) -> str:
        if not self.normalize:
            return name
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = normalize_name(name)
        return key

    def settings(self, expected: ExpectedCall) -> tuple[ArgMode, dict[str, ArgumentRule]] | None:
        """The key-set mode and rules that apply to an expected call; None: names only."""
        if id(expected) in self._settings:
            return self._settings[id(expected)]
        override = self.overrides.get(self.key(expected.name))
        rules = {**(override.rules if override else {}), **expected.rules}
        mode = expected.match or (override.match if override else None) or self.default_mode
        names_only = expected.arguments is None and not rules
        found = self._settings[id(expected)] = None if names_only else (mode, rules)
        return found

    def compare(self, expected: ExpectedCall, actual: ToolCall) -> ArgumentResult | None:
        """None when the names differ; else the argument comparison (made once per pair: the
        pairing, its details and the goals ask again)."""
        key = (id(expected), id(actual))
        cache = self._cache
        if key in cache:
            return cache[key]
        if self.key(expected.name) != self.key(actual.name):
            result = None
        elif (settings := self.settings(expected)) is None:
            result = _NAMES_ONLY
        else:
            mode, rules = settings
            result = match_arguments(expected.arguments, actual.arguments, mode=mode, rules=rules)
        cache[key] = result
        return result

    def weight(self, expected: ExpectedCall, actual: ToolCall) -> float | None:
        """A pair's weight in [0, 1] when the actual call satisfies the expected one."""
        result = self.compare(expected, actual)
        if result is None or not result.passed:
            return None
        return result.score
