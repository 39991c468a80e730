"""Metrics by name, and what a metric may use besides the trajectory.

`@metric` registers a plain function in `REGISTRY` (while a suite's metric file loads, in that
suite's registry; while a plugin loads, under its namespace: `package/name`). A suite may also
name any importable function, `module:function`. `EvalContext` carries the suite's tools
catalog, its registry and the judge (`judge()`). Assertion types and plugins: `plugins`."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.util
import inspect
import math
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, overload

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from spanscore.evaluation.llm.types import JudgeRequest
from spanscore.evaluation.scoring.deferral import JudgeFailed, JudgePending, current_session
from spanscore.evaluation.scoring.score import Score, ScoreKind, judge_failed
from spanscore.evaluation.trajectory.model import Trajectory


@dataclass(frozen=True)
class MetricSpec:
    """A registered metric: a function of a trajectory (plus keyword parameters)."""

    name: str
    fn: Callable[..., Any]
    kind: ScoreKind = "numeric"
    threshold: float | None = None
    labels: tuple[str, ...] | None = None  # allowed labels, for label metrics
    pass_labels: tuple[str, ...] | None = None  # labels that count as passed
    description: str = ""
    source: str = ""  # where it was defined (file or module)
    parameters: frozenset[str] = field(default_factory=frozenset)
    accepts_any_parameter: bool = False
    wants_context: bool = False  # takes `context` (an `EvalContext`: the judge, the tools)

    def __call__(
        self, trajectory: Trajectory, context: EvalContext | None = None, **params: Any
    ) -> Score:
        """Run the metric; whatever it raises becomes an `error` score (but a question for
        the judge, which defers it until the answer is known)."""
        try:
            if self.wants_context:
                returned = self.fn(trajectory, context=context or EvalContext(), **params)
            else:
                returned = self.fn(trajectory, **params)
        except JudgePending:
            raise
        except JudgeFailed as exc:
            return judge_failed(exc.answer)
        except Exception as exc:  # a metric's bug must not stop the run
            return Score.failed_with(f"{type(exc).__name__}: {exc}")
        try:
            return as_score(returned, self)
        except (TypeError, ValueError) as exc:
            return Score.failed_with(f"metric {self.name} returned {exc}")


def as_score(returned: Any, spec: MetricSpec) -> Score:
    """What a metric returned, as a `Score` with its threshold applied."""
    if isinstance(returned, Score):
        score = returned
        if score.threshold is None and spec.threshold is not None:
            score = replace(score, threshold=spec.threshold)
    elif isinstance(returned, bool):
        score = Score(value=1.0 if returned else 0.0, passed=returned)
    elif isinstance(returned, int | float):
        score = Score(value=float(returned), threshold=spec.threshold)
    elif isinstance(returned, str):
        score = Score(label=returned)
    else:
        raise TypeError(f"{type(returned).__name__}; expected Score, bool, float or str")
    if score.value is not None and not math.isfinite(score.value):
        raise ValueError(f"a non-finite value ({score.value})")
    if score.label is not None and spec.labels and score.label not in spec.labels:
        raise ValueError(f"label {score.label!r}; expected one of {', '.join(spec.labels)}")
    if score.passed is None and score.error is None:
        if score.label is not None and spec.pass_labels:
            score = replace(score, passed=score.label in spec.pass_labels)
        elif score.value is not None and score.threshold is not None:
            score = replace(score, passed=score.value >= score.threshold)
    return score


class MetricRegistry:
    """Metrics by name. `@metric` functions of installed plugins register in `REGISTRY`, as
    `package/name`; a suite's custom metric files are loaded into a child registry, so two
    suites never collide. (Built-in scoring is made of assertion types: `plugins`.)"""

    def __init__(self, parent: MetricRegistry | None = None) -> None:
        self._metrics: dict[str, MetricSpec] = {}
        self._parent = parent

    def add(self, spec: MetricSpec) -> MetricSpec:
        existing = self._metrics.get(spec.name)
        if existing is not None and existing.source != spec.source:
            raise ValueError(
                f"metric {spec.name!r} is defined twice: in {existing.source} and {spec.source}"
            )
        self._metrics[spec.name] = spec
        return spec

    def get(self, name: str) -> MetricSpec | None:
        try:
            return self.find(name)
        except PluginError:
            return None

    def find(self, name: str) -> MetricSpec | None:
        """The metric named `name`, `package/name` or `module:function` (None: not
        registered); PluginError when a `module:function` cannot be imported."""
        found = self._metrics.get(name)
        if found is None and self._parent is not None:
            return self._parent.find(name)
        if found is None and ":" in name:
            found = _FUNCTIONS.get(name)
            if found is None:
                found = _FUNCTIONS[name] = function_metric(name)
        return found

    def names(self) -> list[str]:
        inherited = self._parent.names() if self._parent is not None else []
        return sorted(set(inherited) | set(self._metrics))

    def load_file(self, path: str | Path) -> list[MetricSpec]:
        """Import a Python file and register the functions it decorates with `@metric`."""
        path = Path(path).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"custom metric file {path} does not exist")
        # A stable module name per file: reloading the same file replaces it.
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
        module_name = f"spanscore_custom_metrics_{path.stem}_{digest}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        token = _LOADING_FILE.set(True)
        try:
            spec.loader.exec_module(module)
        finally:
            _LOADING_FILE.reset(token)
        found = [
            obj.spanscore_metric
            for obj in vars(module).values()
            if isinstance(getattr(obj, "spanscore_metric", None), MetricSpec)
        ]
        for metric_spec in found:
            self.add(replace(metric_spec, source=str(path)))
        return found


REGISTRY = MetricRegistry()
_FUNCTIONS: dict[str, MetricSpec] = {}  # `module:function` metrics, by that reference


class PluginError(Exception):
    """A plugin, or a `module:function` metric, that cannot be used: the message says why."""


# The namespace of the plugin being loaded: the metrics it registers are named `namespace/name`.
_NAMESPACE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "spanscore_plugin_namespace", default=None
)


def loading_namespace() -> str | None:
    """The namespace of the plugin whose module is being imported, if any."""
    return _NAMESPACE.get()


@contextlib.contextmanager
def registering_as(namespace: str) -> Iterator[None]:
    """Within the block, what registers belongs to the plugin `namespace`."""
    token = _NAMESPACE.set(namespace)
    try:
        yield
    finally:
        _NAMESPACE.reset(token)


def function_metric(reference: str) -> MetricSpec:
    """The metric `module:function` (decorated with `@metric` or not, registered nowhere);
    PluginError when it cannot be imported or is no metric."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise PluginError(f"{reference!r}: expected 'module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(
            f"cannot import {module_name!r} for {reference!r}: {brief(exc)}"
        ) from None
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise PluginError(f"module {module_name!r} has no {attribute!r}")
    spec = getattr(target, "spanscore_metric", None)
    if isinstance(spec, MetricSpec):
        return replace(spec, name=reference)
    if not callable(target):
        raise PluginError(f"{reference!r} is not a function")
    token = _LOADING_FILE.set(True)  # a reference names it: it needs no registration
    try:
        metric(reference)(target)
    except TypeError as exc:
        raise PluginError(f"{reference!r}: {exc}") from None
    finally:
        _LOADING_FILE.reset(token)
    built: MetricSpec = target.spanscore_metric
    return built


def brief(exc: BaseException) -> str:
    """The exception and the line of the plugin's code that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


# True while `MetricRegistry.load_file` imports a file: its metrics go to that registry only.
_LOADING_FILE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "spanscore_loading_metric_file", default=False
)


F = TypeVar("F", bound=Callable[..., Any])


@overload
def metric(name: F) -> F: ...


@overload
def metric(
    name: str | None = None,
    *,
    kind: ScoreKind | None = None,
    threshold: float | None = None,
    labels: tuple[str, ...] | list[str] | None = None,
    pass_labels: tuple[str, ...] | list[str] | None = None,
    description: str | None = None,
) -> Callable[[F], F]: ...


def metric(
    name: str | Callable[..., Any] | None = None,
    *,
    kind: ScoreKind | None = None,
    threshold: float | None = None,
    labels: tuple[str, ...] | list[str] | None = None,
    pass_labels: tuple[str, ...] | list[str] | None = None,
    description: str | None = None,
) -> Any:
    """Register a function `(trajectory, **params) -> Score | bool | float | str` as a metric.

    Usable bare (`@metric`) or with options (`@metric("name", threshold=0.8)`). The function
    stays callable as before; its `MetricSpec` is `fn.spanscore_metric`.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise TypeError(f"metric {fn.__name__} must take the trajectory as first argument")
        resolved_kind: ScoreKind = kind or (
            "label" if labels else "pass_fail" if threshold is None else "numeric"
        )
        metric_name = name if isinstance(name, str) else fn.__name__
        namespace = _NAMESPACE.get()
        if namespace is not None and "/" not in metric_name and ":" not in metric_name:
            metric_name = f"{namespace}/{metric_name}"
        spec = MetricSpec(
            name=metric_name,
            fn=fn,
            kind=resolved_kind,
            threshold=threshold,
            labels=tuple(labels) if labels else None,
            pass_labels=tuple(pass_labels) if pass_labels else None,
            description=description or inspect.getdoc(fn) or "",
            source=getattr(fn, "__module__", ""),
            parameters=frozenset(
                p.name
                for p in params[1:]
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "context"
            ),
            accepts_any_parameter=any(p.kind is p.VAR_KEYWORD for p in params),
            wants_context=any(p.name == "context" for p in params[1:]),
        )
        fn.spanscore_metric = spec  # type: ignore[attr-defined]
        if not _LOADING_FILE.get():  # a suite's file registers into the suite's registry
            REGISTRY.add(spec)
        return fn

    if callable(name):
        return register(name)
    return register


# --- assertions: what a suite lists ------------------------------------------------------------


class ToolSpec(BaseModel):
    """A tool as the model was offered it: name, description, JSON Schema of its arguments."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None,
        description="JSON Schema of the arguments",
        validation_alias=AliasChoices("parameters", "input_schema"),
    )


@dataclass
class EvalContext:
    """What an assertion may use besides the trajectory: the suite's tools catalog, its
    metric registry (custom metrics) and the judge (`judge()`)."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)
    registry: MetricRegistry = field(default_factory=lambda: REGISTRY)
    # Scenario id -> its `user:` block (as written), for metrics about the simulated user.
    users: dict[str, dict[str, Any]] = field(default_factory=dict)

    # The last trajectory itself, not its id(): an id is reused once its object is freed, and
    # scoring one trajectory at a time frees each before the next is made.
    _last: tuple[Trajectory, dict[str, ToolSpec]] | None = field(default=None, repr=False)
    _by_definitions: dict[bytes, dict[str, ToolSpec]] = field(default_factory=dict, repr=False)

    def judge(
        self,
        instructions: str,
        content: str,
        *,
        schema: type[BaseModel] | Mapping[str, Any] | None = None,
        name: str = "verdict",
        version: str = "1",
    ) -> Any:
        """Ask the run's LLM judge: `instructions` (the same for every conversation: put the
        rubric there) and `content` (this conversation). Returns the answer as an instance of
        `schema` (a pydantic model), a dict (a JSON Schema) or `{"text": ...}` (no schema).

        A metric calling this is scored again once the answer is known, so it must be a pure
        function of the trajectory and the answers; a judge that failed raises `JudgeFailed`
        (uncaught, the score records the judge's error)."""
        session = current_session()
        if session is None:
            raise RuntimeError("context.judge() is only available while a suite scores")
        json_schema: Mapping[str, Any] | None
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            json_schema = schema.model_json_schema()
        else:
            json_schema = schema
        request = JudgeRequest(
            kind="chat",
            purpose=name,
            messages=(("system", instructions), ("user", content)),
            schema_name=name,
            schema=json_schema,
            prompt_version=version,
        )
        value = session.require(request).value
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return schema.model_validate(value)
        return value

    def tool_specs(self, trajectory: Trajectory) -> dict[str, ToolSpec]:
        """The suite's catalog, completed by the definitions the agent recorded. Read once per
        trajectory however many assertions ask, and the same dict (read-only, please) for
        conversations that recorded the same definitions, so that results can be reused."""
        if self._last is not None and self._last[0] is trajectory:
            return self._last[1]
        raw = trajectory.attributes.get("gen_ai.tool.definitions")
        key = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS, default=str) if raw else b""
        specs = self._by_definitions.get(key)
        if specs is None:
            if len(self._by_definitions) >= 256:  # agents rarely have more tool sets than this
                self._by_definitions.clear()
            specs = self._by_definitions[key] = {**recorded_tool_specs(trajectory), **self.tools}
        self._last = (trajectory, specs)
        return specs


def recorded_tool_specs(trajectory: Trajectory) -> dict[str, ToolSpec]:
    """`gen_ai.tool.definitions` as recorded (OpenAI chat `{type, function: {...}}`, Responses
    `{type, name, parameters}` and MCP `{name, inputSchema}` shapes)."""
    raw = trajectory.attributes.get("gen_ai.tool.definitions")
    specs: dict[str, ToolSpec] = {}
    if not isinstance(raw, list):
        return specs
    for item in raw:
        if not isinstance(item, dict):
            continue
        function = item.get("function")
        body: dict[str, Any] = function if isinstance(function, dict) else item
        name = body.get("name")
        if not isinstance(name, str):
            continue
        parameters = body.get("parameters", body.get("inputSchema", body.get("input_schema")))
        description = body.get("description")
        specs[name] = ToolSpec(
            name=name,
            description=description if isinstance(description, str) else None,
            parameters=parameters if isinstance(parameters, dict) else None,
        )
    return specs
