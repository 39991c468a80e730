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

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .assertions import (
    ForbiddenCallsAssertion,
    GoalsAssertion,
    OrderAssertion,
    ResponseAssertion,
    ToolCallsAssertion,
)
from .metrics import (
    METRIC_ASSERTIONS_DOC,
    Correctness,
    Efficiency,
    Latency,
    MetricAssertion,
    TokenUsage,
    ToolCallRubric,
    ToolCallValidity,
    ToolDescriptionReliability,
    ToolErrors,
    ToolNameReliability,
    TurnCount,
)
from .scoring import (
    REGISTRY,
    AssertionBase,
    EvalContext,
    MetricRegistry,
    Score,
    ToolSpec,
)
from .trajectory import Trajectory

# Every assertion type a suite may list, told apart by its `type` field.
Assertion = Annotated[
    ToolCallsAssertion
    | ForbiddenCallsAssertion
    | OrderAssertion
    | GoalsAssertion
    | ResponseAssertion
    | MetricAssertion
    | ToolCallValidity
    | ToolErrors
    | Efficiency
    | Correctness
    | ToolNameReliability
    | ToolDescriptionReliability
    | TurnCount
    | Latency
    | TokenUsage
    | ToolCallRubric,
    Field(discriminator="type"),
]


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
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


class Scenario(_Model):
    id: str = Field(description="scenario id; the `scenario_id` of its scores")
    description: str | None = None
    select: Selector | None = Field(
        None,
        description="conversations it applies to; default: attribute scenario.id equal to id",
    )
    assertions: list[Assertion] = Field(default_factory=list)

    @property
    def selector(self) -> Selector:
        return self.select or Selector(attributes={"scenario.id": self.id})


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


class Gate(_Model):
    """A threshold the run must meet; a missed gate makes `spanscore evaluate` exit 1."""

    metric: str | None = Field(None, description="metric name; default: every metric")
    scenario: str | None = Field(None, description="scenario or policy id; default: all")
    min_pass_rate: float | None = Field(None, ge=0, le=1)
    min_mean: float | None = Field(None, description="minimum mean value")

    @model_validator(mode="after")
    def _has_threshold(self) -> Gate:
        if self.min_pass_rate is None and self.min_mean is None:
            raise ValueError("a gate needs min_pass_rate or min_mean")
        return self


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
        description="Python files of @metric functions, relative to the suite file",
    )
    metrics: list[Assertion] = Field(
        default_factory=list, description="assertions and metrics scored on every conversation"
    )
    policies: list[Policy] = Field(default_factory=list)
    scenarios: list[Scenario] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)

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

    def attribute_keys(self) -> list[str]:
        """The span attributes scenario selection reads (to load with the trajectories)."""
        keys: dict[str, None] = {}
        for item in self.groups():
            for key in item.selector.attributes:
                keys[key] = None
        return list(keys)


class ScoreRow(NamedTuple):
    scenario_id: str | None
    metric: str
    score: Score


@dataclass
class LoadedSuite:
    """A validated suite, ready to score: its custom metrics loaded, its hash computed."""

    suite: Suite
    path: Path | None
    content_hash: str
    registry: MetricRegistry
    base_dir: Path = field(default_factory=Path.cwd)  # custom metric paths are relative to it
    context: EvalContext = field(init=False)
    _selecting: list[Policy | Scenario] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.context = EvalContext(
            tools={t.name: t for t in self.suite.tools}, registry=self.registry
        )
        self._selecting = self.suite.groups()

    @property
    def name(self) -> str:
        return self.suite.name

    def document(self) -> dict[str, Any]:
        """The validated suite as a document `load_suite(doc, base_dir=...)` reads back the
        same (fields left at their defaults stay out, so their meaning is kept)."""
        return self.suite.model_dump(mode="json", exclude_unset=True)

    def attribute_keys(self) -> list[str]:
        return self.suite.attribute_keys()

    def groups(self, trajectory: Trajectory) -> Iterator[tuple[str | None, list[Any]]]:
        """(scenario id, assertions) for every group that applies to the trajectory."""
        if self.suite.metrics:
            yield None, list(self.suite.metrics)
        for item in self.suite.groups():
            if item.selector.selects(trajectory):
                yield item.id, list(item.assertions)

    def score(self, trajectory: Trajectory) -> list[ScoreRow]:
        """Every score the suite gives this conversation. Never raises for one assertion's
        failure: that assertion gets an `error` score."""
        rows: list[ScoreRow] = []
        for scenario_id, assertions in self.groups(trajectory):
            for assertion in assertions:
                try:
                    score = assertion.evaluate(trajectory, self.context)
                except Exception as exc:  # one bad assertion, not the run
                    score = Score.failed_with(f"{type(exc).__name__}: {exc}")
                rows.append(ScoreRow(scenario_id, assertion.metric_name, score))
        return rows


# --- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SuiteError(ValueError):
    """The suite cannot be used; `problems` says where and why, one entry per problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def load_suite(
    source: str | Path | Mapping[str, Any],
    *,
    registry: MetricRegistry | None = None,
    name: str | None = None,
    base_dir: str | Path | None = None,
    format: str | None = None,  # noqa: A002 (the user-facing word)
) -> LoadedSuite:
    """Read, validate and prepare a suite (a file path, or an already parsed document whose
    custom metric files are relative to `base_dir`, default the working directory).

    Another tool's native test file (ArkSim scenarios, watsonx datasets or a directory of them,
    tool-selection datasets, ADK eval sets, agentevals trajectories) is accepted too: it is
    recognised by its shape, or named by `format`, and converted by its importer first
    (`spanscore.evaluation.importers`).

    Raises `SuiteError` naming file, line and path of every problem."""
    if isinstance(source, Mapping):
        label = name or "<suite>"
        data: Any = dict(source)
        root: yaml.Node | None = None
        base = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
        path = None
    else:
        path = Path(source)
        label = str(path)
        if path.is_dir():  # a directory of watsonx datasets
            data, root = None, None
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise SuiteError([Problem(label, None, "", "file not found")]) from None
            except (OSError, UnicodeDecodeError) as exc:
                raise SuiteError([Problem(label, None, "", f"cannot read: {exc}")]) from None
            data, root = _parse(text, label, path.suffix.lower())
        base = path.resolve().parent
    data, root, label = _import_native(data, root, label, path, format)
    if not isinstance(data, dict):
        raise SuiteError([Problem(label, 1, "", "expected a mapping (name, scenarios, ...)")])
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A value that fits no member of a union gets one error per member: keep those of the
        # members whose shape (mapping or list) the value has.
        found = [p for p in (_problem(label, root, data, e) for e in errors) if p is not None]
        if not found:
            found = [
                _problem(label, root, data, errors[0], lenient=True)
                or Problem(label, None, "", str(exc))
            ]
        raise SuiteError(list(dict.fromkeys(found))) from None
    registry = MetricRegistry(parent=registry or REGISTRY)
    problems: list[Problem] = []
    for i, metric_file in enumerate(suite.custom_metrics):
        where: tuple[str | int, ...] = ("custom_metrics", i)
        try:
            registry.load_file(base / metric_file)
        except Exception as exc:  # a broken metric file is a suite problem
            problems.append(_at(label, root, data, where, f"{type(exc).__name__}: {exc}"))
    for where, assertion in _assertions(suite):
        for message in assertion.check(registry):
            problems.append(_at(label, root, data, where, message))
    for group, seen in _duplicate_metric_names(suite):
        problems.append(
            _at(label, root, data, group, f"two assertions are both named {seen!r}: name one")
        )
    if problems:
        raise SuiteError(problems)
    content_hash = hashlib.sha256(
        json.dumps(suite.model_dump(mode="json"), sort_keys=True).encode()
        + b"".join(_file_digest(base / f) for f in suite.custom_metrics)
    ).hexdigest()[:16]
    return LoadedSuite(
        suite=suite, path=path, content_hash=content_hash, registry=registry, base_dir=base
    )


def _import_native(
    data: Any, root: yaml.Node | None, label: str, path: Path | None, fmt: str | None
) -> tuple[Any, yaml.Node | None, str]:
    """A native file of another tool, converted by its importer (lines then refer to nothing:
    the suite is generated)."""
    from . import importers

    if fmt in ("spanscore", "suite"):
        return data, root, label
    if fmt is None or fmt == "auto":
        fmt = importers.detect(data) if data is not None else None
        if fmt is None and path is not None and path.is_dir():
            fmt = importers.detect_path(path)
        if fmt is None:
            if data is None:
                raise SuiteError([Problem(label, None, "", "a directory, not a suite file")])
            return data, root, label
    try:
        if path is not None and path.is_dir():
            result = importers.import_file(fmt, path)
        else:
            result = importers.convert(fmt, data, path or Path(label))
    except importers.ImporterError as exc:
        raise SuiteError([Problem(label, None, "", str(exc))]) from None
    return result.suite, None, f"{label} (imported as {fmt})"


def _file_digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""


def _assertions(suite: Suite) -> Iterator[tuple[tuple[str | int, ...], AssertionBase]]:
    for i, assertion in enumerate(suite.metrics):
        yield ("metrics", i), assertion
    for i, policy in enumerate(suite.policies):
        for j, assertion in enumerate(policy.assertions):
            yield ("policies", i, "assertions", j), assertion
    for i, scenario in enumerate(suite.scenarios):
        for j, assertion in enumerate(scenario.assertions):
            yield ("scenarios", i, "assertions", j), assertion


def _duplicate_metric_names(suite: Suite) -> Iterator[tuple[tuple[str | int, ...], str]]:
    groups: list[tuple[tuple[str | int, ...], list[Any]]] = [(("metrics",), suite.metrics)]
    groups += [(("policies", i, "assertions"), p.assertions) for i, p in enumerate(suite.policies)]
    groups += [
        (("scenarios", i, "assertions"), s.assertions) for i, s in enumerate(suite.scenarios)
    ]
    for where, assertions in groups:
        seen: set[str] = set()
        for assertion in assertions:
            if assertion.metric_name in seen:
                yield where, assertion.metric_name
            seen.add(assertion.metric_name)


def _parse(text: str, label: str, suffix: str) -> tuple[Any, yaml.Node | None]:
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(
                [Problem(label, exc.lineno, "", f"invalid JSON: {exc.msg} (column {exc.colno})")]
            ) from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise SuiteError([Problem(label, line, "", f"invalid YAML: {problem}")]) from None
    try:  # JSON is YAML: one way to find lines for both
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    return data, root


def _problem(
    label: str, root: yaml.Node | None, data: Any, err: Mapping[str, Any], lenient: bool = False
) -> Problem | None:
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
        shown = json.dumps(err["input"], default=str)
        if len(shown) <= 80 and not isinstance(err["input"], dict | list):
            message += f" (got {shown})"
    if err["type"] == "extra_forbidden":
        message = "unknown field (check the spelling; `spanscore schema suite` lists the fields)"
    return _locate(label, root, data, tuple(err["loc"]), message, lenient=lenient)


def _at(
    label: str, root: yaml.Node | None, data: Any, loc: tuple[Any, ...], message: str
) -> Problem:
    return _locate(label, root, data, loc, message) or Problem(label, None, "", message)


def _locate(
    label: str,
    root: yaml.Node | None,
    data: Any,
    loc: tuple[Any, ...],
    message: str,
    lenient: bool = True,
) -> Problem | None:
    """A problem at `loc` (a pydantic location: keys, indexes and union tags). None when the
    location is a union member the value does not have the shape of (unless `lenient`)."""
    parts: list[str] = []
    node = root
    value = data
    for key in loc:
        if isinstance(key, int) and isinstance(value, list) and 0 <= key < len(value):
            parts.append(f"[{key}]")
            value = value[key]
            if isinstance(node, yaml.SequenceNode) and key < len(node.value):
                node = node.value[key]
        elif isinstance(key, str) and isinstance(value, dict) and key in value:
            parts.append(f".{key}" if parts else key)
            value = value[key]
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == key), node)
        elif isinstance(value, dict) and value.get("type") == key:
            continue  # the tag of a discriminated union member
        elif isinstance(key, str) and "[" in key:  # a union member: `list[...]`, `function-...`
            wants_list = key.startswith("list[")
            if not lenient and wants_list != isinstance(value, list):
                return None
        else:  # a missing field, named after the mapping it is missing from
            parts.append(f".{key}" if parts else str(key))
            break
    line = node.start_mark.line + 1 if node is not None else None
    return Problem(label, line, "".join(parts), message)


def suite_json_schema() -> dict[str, Any]:
    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("description", METRIC_ASSERTIONS_DOC)
    return schema
