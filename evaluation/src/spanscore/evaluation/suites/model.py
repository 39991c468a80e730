"""Suites: the YAML or JSON file a team writes to say what a good conversation is.

A suite holds scenarios (assertions for the conversations a scenario selects), policies
(assertions for every conversation, or every conversation a policy selects), suite-wide
metrics, an optional tools catalog (JSON Schemas; otherwise the tool definitions the agent
recorded are used), custom metric files and gates. `spanscore schema suite` prints the JSON
Schema of the file for editor completion.

Loading never half-works: every problem is reported with the file, the line and the path into
the document, and what was expected, before anything is scored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from spanscore.evaluation.assertions import goals, ordering, response, tool_calls
from spanscore.evaluation.judged import (
    agentevals,
    arksim,
    dokimos,
    fidelity,
    rubrics,
    tool_selection,
)
from spanscore.evaluation.llm.types import JudgeConfig
from spanscore.evaluation.matching.patterns import check_pattern
from spanscore.evaluation.metrics import (
    correctness,
    counts,
    custom,
    efficiency,
    rubric,
    tool_errors,
    tool_reliability,
    validity,
)
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import ASSERTION_TYPES
from spanscore.evaluation.scoring.registry import ToolSpec
from spanscore.evaluation.suites.users import SimulatedUser, SimulatorConfig
from spanscore.evaluation.trajectory.model import Trajectory

# The span attribute that marks a simulated conversation (`spanscore simulate`).
SIMULATION_ATTRIBUTE = "simulation.id"

# The modules whose built-in assertion types register themselves (`@assertion`) when imported:
# a suite's entries are one of the registered types, told apart by their `type` field.
BUILTIN_MODULES = (
    tool_calls,
    ordering,
    goals,
    response,
    custom,
    validity,
    tool_errors,
    efficiency,
    correctness,
    tool_reliability,
    counts,
    rubric,
    rubrics,
    arksim,
    dokimos,
    tool_selection,
    agentevals,
    fidelity,
)
if TYPE_CHECKING:
    Assertion = AssertionBase
else:
    Assertion = ASSERTION_TYPES.union()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Selector(_Model):
    """Which conversations a scenario or policy applies to. Every given condition must hold;
    an empty selector selects every conversation."""

    attributes: dict[str, str | int | float | bool | list[str | int | float | bool]] = Field(
        default_factory=dict,
        description="span attribute -> value (or any of a list of values), e.g. "
        "{'scenario.id': 'refund'}; compared as text",
    )
    agent: str | list[str] | None = Field(None, description="agent name (or any of several)")
    service: str | list[str] | None = Field(None, description="service.name (or any of several)")
    first_user_message: str | None = Field(
        None, description="regular expression searched in the conversation's first user message"
    )
    conversation_id: str | list[str] | None = Field(
        None,
        description="the conversation's id (or any of several): one conversation, as "
        "`spanscore promote` selects the conversation a scenario was made from",
    )

    @field_validator("first_user_message")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            _compile(pattern)
        return pattern

    def selects(self, trajectory: Trajectory) -> bool:
        for key, wanted in self.attributes.items():
            if not _text_in(trajectory.attributes.get(key), wanted):
                return False
        if self.agent is not None and not _text_in(trajectory.agent_name, self.agent):
            return False
        if self.service is not None and not _text_in(trajectory.service_name, self.service):
            return False
        if self.conversation_id is not None and not _text_in(
            trajectory.conversation_id, self.conversation_id
        ):
            return False
        if self.first_user_message is not None:
            first = trajectory.first_user_message
            if first is None or not _compile(self.first_user_message).search(first):
                return False
        return True


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _text_in(actual: Any, wanted: Any) -> bool:
    if actual is None:
        return False
    options = wanted if isinstance(wanted, list) else [wanted]
    return _text(actual) in {_text(o) for o in options}


def _compile(pattern: str) -> re.Pattern[str]:
    return check_pattern(pattern)


class Scenario(_Model):
    id: str = Field(description="scenario id; the `scenario_id` of its scores")
    description: str | None = None
    select: Selector | None = Field(
        None,
        description="conversations it applies to; default: attribute scenario.id equal to id",
    )
    assertions: list[Assertion] = Field(default_factory=list)
    user: SimulatedUser | None = Field(
        None,
        description="the simulated user `spanscore simulate` plays for this scenario",
    )

    @property
    def selector(self) -> Selector:
        return self.select or Selector(attributes={"scenario.id": self.id})

    def applies_to(self, trajectory: Trajectory) -> bool:
        """Whether the scenario scores the conversation: the ones it selects, and the trials
        `spanscore simulate` played of it, whatever its `select:` says (a scenario promoted
        from one conversation selects that one, and its assertions judge its replays too)."""
        if self.selector.selects(trajectory):
            return True
        attributes = trajectory.attributes
        return SIMULATION_ATTRIBUTE in attributes and _text_in(
            attributes.get("scenario.id"), self.id
        )


class Policy(_Model):
    id: str = Field(description="policy id; the `scenario_id` of its scores")
    description: str | None = None
    select: Selector = Field(
        default_factory=Selector, description="conversations it applies to; default: all"
    )
    assertions: list[Assertion] = Field(default_factory=list)

    @property
    def selector(self) -> Selector:
        return self.select

    def applies_to(self, trajectory: Trajectory) -> bool:
        return self.select.selects(trajectory)


class Gate(_Model):
    """A threshold the run must meet; a missed gate makes `spanscore evaluate` exit 1. A gate
    covers the scores of its scenario and metric (both default to all) and sets one of
    `min_pass_rate`, `min_score_pass_rate` and `min_mean`."""

    metric: str | None = Field(
        None, description="the metric (assertion name) the gate covers; default: every metric"
    )
    scenario: str | None = Field(
        None, description="the scenario or policy id the gate covers; default: all of them"
    )
    min_pass_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="minimum share of conversations that pass: a conversation passes when "
        "every pass/fail score it has in the gate's scope passed (an error is no pass); 1.0: "
        "every conversation must pass",
    )
    min_score_pass_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="minimum share of the pass/fail scores in the gate's scope that passed, "
        "counted score by score (a conversation that failed one of its two scores counts "
        "half); errors are left out",
    )
    min_mean: float | None = Field(
        None,
        description="minimum mean value of the scores in the gate's scope, each conversation "
        "counted once per metric (errors left out)",
    )
    pass_k: int | None = Field(
        None,
        ge=1,
        description="measure pass^k over a simulation's trials instead (every one of k trials "
        "of a scenario passes, averaged over scenarios; tau-bench's figure): the gate needs "
        "min_pass_rate",
    )
    allow_empty: bool = Field(
        False,
        description="pass when the run has no score to measure (default: an empty gate fails)",
    )

    @model_validator(mode="after")
    def _has_threshold(self) -> Gate:
        set_ = [
            name
            for name in ("min_pass_rate", "min_score_pass_rate", "min_mean")
            if getattr(self, name) is not None
        ]
        if len(set_) != 1:
            raise ValueError(
                "a gate needs one of min_pass_rate (conversations), min_score_pass_rate "
                f"(scores) or min_mean{f'; it sets {len(set_)}' if set_ else ''}"
            )
        if self.pass_k is not None and (self.min_pass_rate is None or self.metric is not None):
            raise ValueError(
                "a pass_k gate needs min_pass_rate, and no metric (a trial passes "
                "when all its scores pass)"
            )
        return self

    @property
    def measure(self) -> tuple[str, float]:
        """(what the gate measures, in words; its threshold): what `evaluate` prints and the
        report shows."""
        if self.pass_k is not None and self.min_pass_rate is not None:
            return f"pass^{self.pass_k}", self.min_pass_rate
        if self.min_pass_rate is not None:
            return "conversation pass rate", self.min_pass_rate
        if self.min_score_pass_rate is not None:
            return "score pass rate", self.min_score_pass_rate
        assert self.min_mean is not None
        return "mean", self.min_mean

    @property
    def scope(self) -> str:
        """What the gate covers, in words: "scenario/metric", one of them, or all."""
        named = "/".join(x for x in (self.scenario, self.metric) if x)
        return named or ("all scenarios" if self.pass_k is not None else "all scores")


class Suite(_Model):
    """A suite file. `spanscore schema suite` prints this model's JSON Schema."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"title": "spanscore suite"})

    name: str
    description: str | None = None
    tools: list[ToolSpec] = Field(
        default_factory=list,
        description="tools catalog with JSON Schemas; tools not listed use the definitions "
        "the agent recorded (gen_ai.tool.definitions)",
    )
    custom_metrics: list[str] = Field(
        default_factory=list,
        description="Python files of @metric functions, relative to the suite file and inside "
        "its folder (a file elsewhere is run only with `evaluate --allow-outside-metrics`)",
    )
    time_limit_s: float = Field(
        30.0,
        ge=0,
        description="longest one assertion or metric may take on one conversation; past it, "
        "its score is an error and the run goes on (0: no limit)",
    )
    judge: JudgeConfig | None = Field(
        None,
        description="the LLM judge: endpoint, model, concurrency, budget, cache, batch mode "
        "(default: OPENAI_BASE_URL / OPENAI_API_KEY and gpt-4.1-mini)",
    )
    simulator: SimulatorConfig | None = Field(
        None,
        description="the model that plays the scenarios' simulated users (`spanscore "
        "simulate`); default: the judge's endpoint and key, at temperature 0.7",
    )
    metrics: list[Assertion] = Field(
        default_factory=list, description="assertions and metrics scored on every conversation"
    )
    policies: list[Policy] = Field(default_factory=list)
    scenarios: list[Scenario] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    min_conversations: int = Field(
        0,
        ge=0,
        description="a run with fewer conversations fails (exit 1), as a missed gate does",
    )
    strict: bool = Field(
        False,
        description="warnings fail the run: a scenario or policy that selected no "
        "conversation, a metric that gave an error on every conversation, what an imported "
        "native file could not carry over",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Suite:
        seen: set[str] = set()
        for item in self.groups():
            if item.id in seen:
                raise ValueError(f"scenario or policy id {item.id!r} is used twice")
            seen.add(item.id)
        return self

    def groups(self) -> list[Policy | Scenario]:
        """Policies, then scenarios: everything that selects conversations."""
        return [*self.policies, *self.scenarios]

    def gate_problem(self, gate: Gate) -> tuple[str, str] | None:
        """(field, message) when the gate names a scenario or metric this suite does not have
        (a typo would otherwise measure nothing and pass), else None."""
        groups = {g.id: g for g in self.groups()}
        if gate.scenario is not None and gate.scenario not in groups:
            return "scenario", _unknown("scenario or policy", gate.scenario, list(groups))
        if gate.metric is not None:
            what = "metric"
            if gate.scenario is not None:
                names = [a.metric_name for a in groups[gate.scenario].assertions]
                what = f"metric in {gate.scenario!r}"
            else:
                names = [a.metric_name for a in self.metrics]
                names += [a.metric_name for g in groups.values() for a in g.assertions]
            if gate.metric not in names:
                return "metric", _unknown(what, gate.metric, names)
        return None

    def attribute_keys(self) -> list[str]:
        """The span attributes scenario selection reads (to load with the trajectories)."""
        keys: dict[str, None] = {}
        for item in self.groups():
            for key in item.selector.attributes:
                keys[key] = None
        if any(s.user is not None for s in self.scenarios):
            keys[SIMULATION_ATTRIBUTE] = None  # metrics only simulated conversations get
        return list(keys)


def _unknown(what: str, name: str, known: Sequence[str]) -> str:
    import difflib

    message = f"no {what} named {name!r} in this suite"
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=1)
    if close:
        return f"{message} (did you mean {close[0]!r}?)"
    shown = ", ".join(repr(k) for k in dict.fromkeys(known))
    return f"{message} (it has {shown})" if shown else message


def located_assertions(suite: Suite) -> Iterator[tuple[tuple[str | int, ...], AssertionBase]]:
    for i, assertion in enumerate(suite.metrics):
        yield ("metrics", i), assertion
    for i, policy in enumerate(suite.policies):
        for j, assertion in enumerate(policy.assertions):
            yield ("policies", i, "assertions", j), assertion
    for i, scenario in enumerate(suite.scenarios):
        for j, assertion in enumerate(scenario.assertions):
            yield ("scenarios", i, "assertions", j), assertion


_BUILTIN_VERSION = ASSERTION_TYPES.version
_WITH_PLUGINS: dict[int, type[Suite]] = {}


def suite_model() -> type[Suite]:
    """The suite model for the assertion types registered now: `Suite` itself, or, once a
    plugin has registered types, a subclass whose entries may be those types too (the models
    are made once per set of types)."""
    version = ASSERTION_TYPES.version
    if version == _BUILTIN_VERSION:
        return Suite
    model = _WITH_PLUGINS.get(version)
    if model is None:
        entries: Any = list[ASSERTION_TYPES.union()]  # type: ignore[misc]
        fields = Scenario.model_fields
        scenario = create_model(
            "Scenario",
            __base__=Scenario,
            __module__=__name__,
            assertions=(entries, fields["assertions"]),
        )
        policy = create_model(
            "Policy",
            __base__=Policy,
            __module__=__name__,
            assertions=(entries, Policy.model_fields["assertions"]),
        )
        fields = Suite.model_fields
        model = create_model(
            "Suite",
            __base__=Suite,
            __module__=__name__,
            metrics=(entries, fields["metrics"]),
            policies=(list[policy], fields["policies"]),
            scenarios=(list[scenario], fields["scenarios"]),
        )
        _WITH_PLUGINS.clear()
        _WITH_PLUGINS[version] = model
    return model
