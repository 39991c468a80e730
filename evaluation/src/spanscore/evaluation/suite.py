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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, NamedTuple, get_args

import yaml
from pydantic import (
    AliasChoices,
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
from .judge import JudgeAnswer, JudgeConfig, JudgeRequest
from .judged import JudgedRubric
from .judged_builtins import (
    AgentBehaviorFailure,
    Helpfulness,
    TaskCompletion,
    ToolArgumentHallucination,
    ToolCallBehaviorFailure,
    ToolDescriptionSemantics,
    ToolNameSemantics,
    ToolSelection,
    TrajectoryJudge,
)
from .judging import JudgeFailed, JudgePending, JudgeSession, judging
from .limits import TimeLimitExceeded, Watchdog, check_pattern
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
    judge_failed,
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
    | ToolCallRubric
    | JudgedRubric
    | Helpfulness
    | AgentBehaviorFailure
    | ToolCallBehaviorFailure
    | TaskCompletion
    | ToolArgumentHallucination
    | ToolSelection
    | TrajectoryJudge
    | ToolNameSemantics
    | ToolDescriptionSemantics,
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
    return check_pattern(pattern)


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
    allow_empty: bool = Field(
        False,
        description="pass when the run has no score to measure (default: an empty gate fails)",
    )

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
        return list(keys)


def _unknown(what: str, name: str, known: Sequence[str]) -> str:
    import difflib

    message = f"no {what} named {name!r} in this suite"
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=1)
    if close:
        return f"{message} (did you mean {close[0]!r}?)"
    shown = ", ".join(repr(k) for k in dict.fromkeys(known))
    return f"{message} (it has {shown})" if shown else message


class ScoreRow(NamedTuple):
    scenario_id: str | None
    metric: str
    score: Score


# How many times one assertion may be scored again with new answers (LLM, then embeddings...).
MAX_JUDGE_ROUNDS = 4


@dataclass
class Deferred:
    """A conversation's assertions that wait for the judge, and the questions they asked."""

    trajectory: Trajectory
    items: list[tuple[str | None, int]]  # (scenario id, position in LoadedSuite.assertions)
    requests: dict[str, JudgeRequest]
    rounds: int = 0


@dataclass
class LoadedSuite:
    """A validated suite, ready to score: its custom metrics loaded, its hash computed."""

    suite: Suite
    path: Path | None
    content_hash: str
    registry: MetricRegistry
    base_dir: Path = field(default_factory=Path.cwd)  # custom metric paths are relative to it
    dropped: list[str] = field(default_factory=list)  # what an imported native file lost
    allow_outside_metrics: bool = False  # custom metric files outside base_dir were allowed
    context: EvalContext = field(init=False)
    watchdog: Watchdog | None = field(default=None, init=False, repr=False)
    _selecting: list[Policy | Scenario] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.context = EvalContext(
            tools={t.name: t for t in self.suite.tools}, registry=self.registry
        )
        self._selecting = self.suite.groups()
        self._scenarios: dict[str | None, dict[str, Any]] = {
            g.id: {"id": g.id, "description": g.description} for g in self._selecting
        }
        # Positions name assertions across processes (a worker's copies are other objects).
        self.assertions = [a for _, a in _assertions(self.suite)]
        self._position = {id(a): i for i, a in enumerate(self.assertions)}
        self._judged = {i for i, a in enumerate(self.assertions) if a.may_judge(self.registry)}

    @property
    def uses_judge(self) -> bool:
        """Whether scoring may ask the LLM judge."""
        return bool(self._judged)

    def judge_config(self) -> JudgeConfig:
        return self.suite.judge or JudgeConfig()

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

    def score(self, trajectory: Trajectory, judge: Any = None) -> list[ScoreRow]:
        """Every score the suite gives this conversation. Never raises for one assertion's
        failure: that assertion gets an `error` score.

        Judged metrics ask `judge` (a `judge_pool.JudgeRunner`; default: one made from the
        suite's `judge` block for this call, without the lake's cache)."""
        rows, deferred = self.score_deterministic(trajectory)
        if deferred is None:
            return rows
        if judge is not None:
            return rows + self.finish(deferred, judge.answer)
        from .judge_pool import JudgeRunner

        with JudgeRunner(self.judge_config()) as runner:
            return rows + self.finish(deferred, runner.answer)

    def score_deterministic(self, trajectory: Trajectory) -> tuple[list[ScoreRow], Deferred | None]:
        """The scores that need no judge, and what waits for it (None: nothing)."""
        position = self._position
        items = [(sid, position[id(a)]) for sid, group in self.groups(trajectory) for a in group]
        rows, waiting, requests = self.evaluate_items(trajectory, items, {})
        if not waiting:
            return rows, None
        return rows, Deferred(trajectory, waiting, requests)

    def finish(
        self,
        deferred: Deferred,
        answer: Callable[[dict[str, JudgeRequest]], Mapping[str, JudgeAnswer]],
    ) -> list[ScoreRow]:
        """Score deferred assertions with the judge's answers, asking again while they have
        new questions (at most MAX_JUDGE_ROUNDS times)."""
        answers: dict[str, JudgeAnswer] = {}
        rows: list[ScoreRow] = []
        while deferred.items:
            answers.update(answer(deferred.requests))
            more, deferred = self.resume(deferred, answers)
            rows += more
        return rows

    def resume(
        self, deferred: Deferred, answers: Mapping[str, JudgeAnswer]
    ) -> tuple[list[ScoreRow], Deferred]:
        """One more round: the rows now complete, and what still waits (empty items: done)."""
        rows, waiting, requests = self.evaluate_items(deferred.trajectory, deferred.items, answers)
        rounds = deferred.rounds + 1
        if waiting and rounds >= MAX_JUDGE_ROUNDS:
            message = f"the judge was asked {rounds} rounds of questions; giving up"
            rows += [
                ScoreRow(sid, self.assertions[i].metric_name, Score.failed_with(message))
                for sid, i in waiting
            ]
            waiting, requests = [], {}
        return rows, Deferred(deferred.trajectory, waiting, requests, rounds)

    def evaluate_items(
        self,
        trajectory: Trajectory,
        items: Sequence[tuple[str | None, int]],
        answers: Mapping[str, JudgeAnswer],
    ) -> tuple[list[ScoreRow], list[tuple[str | None, int]], dict[str, JudgeRequest]]:
        """Score `items` (scenario id, assertion position) with the answers known so far:
        (rows, items still waiting, their questions)."""
        rows: list[ScoreRow] = []
        waiting: list[tuple[str | None, int]] = []
        requests: dict[str, JudgeRequest] = {}
        judged = self._judged
        for scenario_id, position in items:
            assertion = self.assertions[position]
            if position not in judged:
                rows.append(
                    ScoreRow(scenario_id, assertion.metric_name, self._one(assertion, trajectory))
                )
                continue
            session = JudgeSession(
                answers, scenario=self._scenarios.get(scenario_id), memo=trajectory.memo
            )
            with judging(session):
                score = self._one(assertion, trajectory)
            if session.pending:
                waiting.append((scenario_id, position))
                requests.update(session.pending)
                continue
            usage = session.usage_details()
            if usage is not None:
                score = replace(score, details={**(score.details or {}), "judge": usage})
            rows.append(ScoreRow(scenario_id, assertion.metric_name, score))
        return rows, waiting, requests

    def _one(self, assertion: AssertionBase, trajectory: Trajectory) -> Score:
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.begin()
        try:
            return assertion.evaluate(trajectory, self.context)
        except TimeLimitExceeded as exc:
            return Score.failed_with(str(exc), time_limit_s=self.suite.time_limit_s)
        except JudgePending:
            return Score.failed_with("waiting for the judge")  # the session holds the question
        except JudgeFailed as exc:
            return judge_failed(exc.answer)
        except Exception as exc:  # one bad assertion, not the run
            return Score.failed_with(f"{type(exc).__name__}: {exc}")
        finally:
            if watchdog is not None:
                watchdog.end()

    def start_watchdog(self) -> Watchdog | None:
        """Time-limit each assertion from now on, in this thread (the main thread of its
        process; elsewhere, assertions run without a limit)."""
        if self.suite.time_limit_s > 0 and self.watchdog is None:
            self.watchdog = Watchdog(self.suite.time_limit_s).start()
        return self.watchdog

    def stop_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None


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
    allow_outside_metrics: bool = False,
) -> LoadedSuite:
    """Read, validate and prepare a suite (a file path, or an already parsed document whose
    custom metric files are relative to `base_dir`, default the working directory).

    Another tool's native test file (ArkSim scenarios, watsonx datasets or a directory of them,
    tool-selection datasets, ADK eval sets, agentevals trajectories) is accepted too: it is
    recognised by its shape, or named by `format`, and converted by its importer first
    (`spanscore.evaluation.importers`).

    A custom metric file is Python that the run imports and executes: one outside the suite's
    folder (an absolute path, `..`, a symbolic link leading out) is a suite problem unless
    `allow_outside_metrics` says the caller trusts it, so that a suite handed over does not
    run code from anywhere on the machine.

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
    data, root, label, dropped = _import_native(data, root, label, path, format)
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
        outside = _outside(base, metric_file)
        if outside and not allow_outside_metrics:
            problems.append(_at(label, root, data, where, outside))
            continue
        try:
            registry.load_file(base / metric_file)
        except Exception as exc:  # a broken metric file is a suite problem
            problems.append(_at(label, root, data, where, f"{type(exc).__name__}: {exc}"))
    for where, assertion in _assertions(suite):
        for message in assertion.check(registry):
            problems.append(_at(label, root, data, where, message))
    for i, gate in enumerate(suite.gates):
        unknown = suite.gate_problem(gate)
        if unknown is not None:
            problems.append(_at(label, root, data, ("gates", i, unknown[0]), unknown[1]))
    for group, seen in _duplicate_metric_names(suite):
        problems.append(
            _at(label, root, data, group, f"two assertions are both named {seen!r}: name one")
        )
    if problems:
        raise SuiteError(problems)
    # The version a score belongs to: what decides scores. What only decides whether the run
    # passes (gates and run rules) is left out, so changing it re-scores nothing.
    versioned = suite.model_dump(mode="json", exclude={"min_conversations", "strict"})
    for gate in versioned["gates"]:
        gate.pop("allow_empty", None)
    content_hash = hashlib.sha256(
        json.dumps(versioned, sort_keys=True).encode()
        + b"".join(_file_digest(base / f) for f in suite.custom_metrics)
    ).hexdigest()[:16]
    return LoadedSuite(
        suite=suite,
        path=path,
        content_hash=content_hash,
        registry=registry,
        base_dir=base,
        dropped=dropped,
        allow_outside_metrics=allow_outside_metrics,
    )


def _outside(base: Path, metric_file: str) -> str | None:
    """Why a custom metric file is outside the suite's folder, or None when it is inside."""
    resolved = (base / metric_file).resolve()
    if resolved.is_relative_to(base.resolve()):
        return None
    return (
        f"{metric_file!r} is outside the suite's folder {base} (it resolves to {resolved}): "
        "move it next to the suite, or pass --allow-outside-metrics (load_suite("
        "allow_outside_metrics=True)) if you trust it to run"
    )


def _import_native(
    data: Any, root: yaml.Node | None, label: str, path: Path | None, fmt: str | None
) -> tuple[Any, yaml.Node | None, str, list[str]]:
    """A native file of another tool, converted by its importer (lines then refer to nothing:
    the suite is generated), and what the conversion could not carry over."""
    from . import importers

    if fmt in ("spanscore", "suite"):
        return data, root, label, []
    if fmt is None or fmt == "auto":
        fmt = importers.detect(data) if data is not None else None
        if fmt is None and path is not None and path.is_dir():
            fmt = importers.detect_path(path)
        if fmt is None:
            if data is None:
                raise SuiteError([Problem(label, None, "", "a directory, not a suite file")])
            return data, root, label, []
    try:
        if path is not None and path.is_dir():
            result = importers.import_file(fmt, path)
        else:
            result = importers.convert(fmt, data, path or Path(label))
    except importers.ImporterError as exc:
        raise SuiteError([Problem(label, None, "", str(exc))]) from None
    return result.suite, None, f"{label} (imported as {fmt})", list(result.dropped)


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


# A suite is a few hundred lines; these bounds stop a hostile file (a YAML "billion laughs"
# alias bomb grows a 1 KiB file into gigabytes) before it costs memory.
MAX_SUITE_BYTES = 8 * 1024 * 1024
MAX_EXPANDED_NODES = 1_000_000


def _expanded_nodes(root: yaml.Node) -> int:
    """The number of nodes the document has once every alias is expanded (shared nodes
    counted once per use), computed without expanding it."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int = 0) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if depth > 1_000:
            raise ValueError("nested more than 1000 levels deep")
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = total = min(total, MAX_EXPANDED_NODES + 1)
        return total

    return size(root)


def _bounded_yaml(text: str, label: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            expanded = _expanded_nodes(node)
        except ValueError as exc:
            raise SuiteError([Problem(label, None, "", f"invalid YAML: {exc}")]) from None
        if expanded > MAX_EXPANDED_NODES:
            raise SuiteError(
                [
                    Problem(
                        label,
                        None,
                        "",
                        f"the YAML expands to more than {MAX_EXPANDED_NODES:,} values through "
                        "its aliases (&anchor / *alias): not a suite",
                    )
                ]
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _parse(text: str, label: str, suffix: str) -> tuple[Any, yaml.Node | None]:
    if len(text) > MAX_SUITE_BYTES:
        raise SuiteError(
            [Problem(label, None, "", f"larger than {MAX_SUITE_BYTES // 2**20} MiB: not a suite")]
        )
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(
                [Problem(label, exc.lineno, "", f"invalid JSON: {exc.msg} (column {exc.colno})")]
            ) from None
    else:
        try:
            data = _bounded_yaml(text, label)
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
    """The JSON Schema of suite files: exactly the shapes the loader accepts.

    pydantic's schema shows only each model's canonical shape; the loader also takes a
    model's `string_shorthand` (a bare tool name for a call, a strategy name for a rule) and
    every spelling of a key that has several (`name` or `tool`). Both are added here, read
    from the models themselves so the schema cannot drift from the loader."""
    schema = Suite.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    for model in _models(Suite):
        if model is Suite:
            _accept_spellings(schema, model)
            continue
        entry = defs.get(model.__name__)
        if entry is None:
            continue
        _accept_spellings(entry, model)
        shorthand = getattr(model, "string_shorthand", None)
        if shorthand is not None:
            defs[model.__name__] = {"anyOf": [shorthand, entry]}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("description", METRIC_ASSERTIONS_DOC)
    return schema


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model its fields can hold, at any depth."""
    found: dict[type[BaseModel], None] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found[annotation] = None
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for arg in get_args(annotation):
            visit(arg)

    visit(root)
    return list(found)


def _accept_spellings(entry: dict[str, Any], model: type[BaseModel]) -> None:
    """Let `entry` (the model's object schema) take every spelling of a key, one at a time."""
    properties: dict[str, Any] = entry.get("properties", {})
    required: list[str] = entry.get("required", [])
    exclusive: list[dict[str, Any]] = []
    for info in model.model_fields.values():
        alias = info.validation_alias
        if not isinstance(alias, AliasChoices):
            continue
        names = [c for c in alias.choices if isinstance(c, str)]
        shown = next((n for n in names if n in properties), None)
        if shown is None:
            continue
        for name in names:
            properties.setdefault(name, properties[shown])
        exclusive += [{"required": [a, b]} for i, a in enumerate(names) for b in names[i + 1 :]]
        if shown in required:
            required.remove(shown)
            entry.setdefault("allOf", []).append(
                {"anyOf": [{"required": [name]} for name in names]}
            )
    if exclusive:
        entry["not"] = {"anyOf": exclusive}
    if "required" in entry and not required:
        del entry["required"]
