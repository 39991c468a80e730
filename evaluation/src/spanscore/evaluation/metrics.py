"""Deterministic metrics: scores computed from the trajectory alone, no LLM.

Each is an assertion type a suite can list (`type: tool_call_validity`, ...), or a registered
custom metric (`type: metric`, `metric: NAME`). `docs/assertions.md` gives every metric's rule
and formula; in short:

- `tool_call_validity`: fraction of calls valid against their tool's JSON Schema (Dokimos
  ToolCallValidityEvaluator); `tool_errors`: fraction of calls that succeeded (Dokimos
  ToolErrorEvaluator); `efficiency`: distinct calls / calls, loops reported (Dokimos
  ToolEfficiencyEvaluator); `correctness`: names F1, names-and-order LCS, or calls-with-
  arguments F1 (Dokimos ToolCorrectnessEvaluator);
- `tool_name_reliability`, `tool_description_reliability`: Dokimos' rule-based checks of the
  tools offered;
- `turn_count`, `latency`, `token_usage`: raw counts with limits;
- `tool_call_rubric`: Arcade's weighted critics and rubric (`EvalCase.evaluate`).

A graded metric's value is in [0, 1] and passes at `threshold` (each has the default of the
system it comes from); the counting metrics store the raw count and pass within their limits.
"""

from __future__ import annotations

import importlib
import json
import re
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from .arguments import ArgMode, match_arguments, values_equal
from .assertions import ExpectedCall, normalize_name
from .critics import Critic, argument, critic_weights
from .limits import check_pattern
from .pairing import fits_exactly, max_weight_matching
from .schema_check import check_arguments
from .scoring import AssertionBase, EvalContext, MetricRegistry, Score, ToolSpec
from .trajectory import ToolCall, Trajectory

METRIC_ASSERTIONS_DOC = "A spanscore evaluation suite (scenarios, policies, metrics, gates)."


class MetricAssertion(AssertionBase):
    """A registered metric by name: a custom `@metric` function, with parameters."""

    type: Literal["metric"]
    metric: str = Field(description="registered metric name (custom metrics by function name)")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")

    @property
    def metric_name(self) -> str:
        return self.name or self.metric

    def check(self, registry: MetricRegistry) -> list[str]:
        spec = registry.get(self.metric)
        if spec is None:
            known = ", ".join(registry.names()) or "none registered"
            return [f"unknown metric {self.metric!r} (known: {known})"]
        unknown = set(self.params) - spec.parameters
        if unknown and not spec.accepts_any_parameter:
            return [f"metric {self.metric!r} takes no parameter {', '.join(sorted(unknown))}"]
        return []

    def may_judge(self, registry: MetricRegistry) -> bool:
        spec = registry.get(self.metric)
        return spec is not None and spec.wants_context

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        spec = context.registry.get(self.metric)
        if spec is None:
            return Score.failed_with(f"unknown metric {self.metric!r}")
        score = spec(trajectory, context, **self.params)
        if self.threshold is not None and score.value is not None and score.error is None:
            return Score(
                value=score.value,
                label=score.label,
                passed=score.value >= self.threshold,
                threshold=self.threshold,
                explanation=score.explanation,
                details=score.details,
            )
        return score


# --- shared ------------------------------------------------------------------------------------


class _Graded(AssertionBase):
    """A metric with a value in [0, 1] that passes at `threshold` (default: its system's)."""

    default_threshold: ClassVar[float] = 1.0
    threshold: float | None = Field(
        1.0, ge=0, le=1, description="pass when the value is at least this (Dokimos: 1.0)"
    )

    def effective_threshold(self) -> float:
        return self.threshold if self.threshold is not None else self.default_threshold

    def scored(self, value: float, explanation: str, details: Mapping[str, Any]) -> Score:
        value = min(1.0, max(0.0, value))
        threshold = self.effective_threshold()
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=explanation,
            details=dict(details),
        )


class _Counted(AssertionBase):
    """A metric whose value is a raw count or duration, checked against limits."""

    @model_validator(mode="after")
    def _no_threshold(self) -> _Counted:
        if self.threshold is not None:
            raise ValueError(
                f"{self.type} stores a raw value, not a score in [0, 1]: give its limits "
                "(min_*/max_*) instead of threshold"
            )
        return self


def _arguments(call: ToolCall) -> Any:
    return {} if call.arguments is None else call.arguments


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _no_tools_offered(trajectory: Trajectory, context: EvalContext) -> bool:
    """Neither the suite's catalog nor the recorded definitions say which tools exist."""
    return not context.tools and "gen_ai.tool.definitions" not in trajectory.attributes


_NO_TOOLS = (
    "no tool definitions: give the suite a `tools` catalog, or record gen_ai.tool.definitions"
)


# --- tool-call validity ------------------------------------------------------------------------


class ToolCallValidity(_Graded):
    """Each tool call checked against its tool's JSON Schema (Dokimos ToolCallValidity).

    A call is invalid when its tool is unknown, or its arguments miss a required one, have the
    wrong JSON type, leave an enum or const, break a bound, or carry an argument the schema
    forbids (`additionalProperties: false`, or any undeclared one with `strict`). Nested
    objects and arrays are checked too. Value: valid calls / calls (1.0 without calls)."""

    type: Literal["tool_call_validity"]
    strict: bool = Field(
        False,
        description="an argument the schema does not declare is a problem even when "
        "additionalProperties is not false (Dokimos strictMode)",
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        calls = trajectory.tool_calls
        specs = context.tool_specs(trajectory)
        if calls and _no_tools_offered(trajectory, context):
            return Score.failed_with(_NO_TOOLS)
        results: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            problems = self.problems(call, specs.get(call.name))
            results.append(
                {"index": index, "name": call.name, "call_id": call.call_id, "problems": problems}
            )
        valid = sum(1 for r in results if not r["problems"])
        invalid = [r for r in results if r["problems"]]
        if not calls:
            explanation = "No tool calls to validate."
        elif not invalid:
            explanation = f"All {_plural(len(calls), 'tool call')} are valid."
        else:
            first = invalid[0]
            explanation = (
                f"{valid}/{len(calls)} tool calls are valid; e.g. {first['name']}: "
                f"{first['problems'][0]}."
            )
        return self.scored(
            _ratio(valid, len(calls)),
            explanation,
            {"valid": valid, "total": len(calls), "calls": results},
        )

    def problems(self, call: ToolCall, spec: ToolSpec | None) -> list[str]:
        if spec is None:
            return [f"unknown tool '{call.name}'"]
        arguments = _arguments(call)
        if not isinstance(arguments, Mapping):
            return [f"the arguments are not a JSON object: {str(arguments)[:60]!r}"]
        if not spec.parameters:
            return []  # a tool without a schema accepts any arguments
        return check_arguments(arguments, spec.parameters, strict=self.strict)


# --- tool errors -------------------------------------------------------------------------------


def _load_predicate(spec: str) -> Callable[[str], Any]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"predicate {spec!r} should be written module:function")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"predicate {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def _result_text(result: Any) -> str | None:
    if result is None or isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


class ToolErrors(_Graded):
    """Fraction of tool calls that succeeded (Dokimos ToolErrorEvaluator).

    A call failed when, in this order: its span recorded an error (status ERROR or
    error.type); its result is missing or blank (`missing_result_is_error`, default true as in
    Dokimos: set it false when tool results are not captured); the `predicate` returns true
    or `error_pattern` is found in the result text; the result is a JSON object with a
    non-null top-level `error` field (`json_error_field`). Value: successful / calls (1.0
    without calls)."""

    type: Literal["tool_errors"]
    missing_result_is_error: bool = Field(
        True,
        description="a call with no result, or a blank one, failed (Dokimos treatBlankAsError); "
        "set false when tool results are not captured",
    )
    json_error_field: bool = Field(
        True,
        description="a result that is a JSON object with a non-null top-level `error` failed "
        "(Dokimos detectJsonErrorField)",
    )
    error_pattern: str | None = Field(
        None,
        description="regular expression searched in the result text (a structured result as "
        "compact JSON); a match means the call failed",
    )
    predicate: str | None = Field(
        None,
        description="`module:function` called with the result text; a true return means the "
        "call failed (Dokimos errorDetector)",
    )

    @field_validator("error_pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            check_pattern(pattern)
        return pattern

    def check(self, registry: MetricRegistry) -> list[str]:
        if self.predicate is None:
            return []
        try:
            _load_predicate(self.predicate)
        except Exception as exc:  # any import failure is a problem of the suite
            return [f"cannot load predicate {self.predicate!r}: {type(exc).__name__}: {exc}"]
        return []

    def failure(self, call: ToolCall, predicate: Callable[[str], Any] | None) -> str | None:
        """Why the call failed, or None when it succeeded."""
        if call.error:
            return f"error recorded: {call.error}"
        result = call.result
        if result is None or (isinstance(result, str) and not result.strip()):
            return "no result" if self.missing_result_is_error else None
        if predicate is not None or self.error_pattern is not None:
            text = _result_text(result) or ""  # the text form only when something reads it
            if predicate is not None and predicate(text):
                return f"the predicate {self.predicate} flagged the result"
            if self.error_pattern is not None and re.search(self.error_pattern, text):
                return f"the result matches {self.error_pattern!r}"
        if self.json_error_field:
            value = call.result
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    value = None
            if isinstance(value, Mapping) and value.get("error") is not None:
                shown = json.dumps(value["error"], default=str)[:80]
                return f"the result has a top-level error field: {shown}"
        return None

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        predicate = _load_predicate(self.predicate) if self.predicate else None
        calls = trajectory.tool_calls
        results: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            reason = self.failure(call, predicate)
            results.append(
                {"index": index, "name": call.name, "call_id": call.call_id, "error": reason}
            )
        failed = [r for r in results if r["error"]]
        succeeded = len(calls) - len(failed)
        if not calls:
            explanation = "No tool calls to inspect."
        elif not failed:
            explanation = f"All {_plural(len(calls), 'tool call')} succeeded."
        else:
            first = failed[0]
            explanation = (
                f"{succeeded}/{len(calls)} tool calls succeeded; e.g. {first['name']}: "
                f"{first['error']}."
            )
        return self.scored(
            _ratio(succeeded, len(calls)),
            explanation,
            {"succeeded": succeeded, "total": len(calls), "calls": results},
        )


# --- efficiency --------------------------------------------------------------------------------


class Efficiency(_Graded):
    """Distinct calls / calls (Dokimos ToolEfficiencyEvaluator): a call is redundant when an
    earlier call has the same name and equal arguments (tolerant equality: 1 == 1.0, any key
    order). Runs of consecutive duplicates are reported as loops. 1.0 without calls.

    A signal more than a gate: a legitimate retry lowers the score. The threshold defaults to
    1.0 as in Dokimos; tune it (or list volatile arguments in `ignore_arguments`)."""

    type: Literal["efficiency"]
    ignore_arguments: list[str] = Field(
        default_factory=list,
        description="top-level arguments left out of the comparison (request ids, timestamps)",
    )
    names_only: bool = Field(
        False, description="two calls of the same tool are duplicates whatever their arguments"
    )

    def same(self, a: ToolCall, b: ToolCall) -> bool:
        if a.name != b.name:
            return False
        if self.names_only:
            return True
        return values_equal(self._comparable(a), self._comparable(b))

    def _comparable(self, call: ToolCall) -> Any:
        arguments = _arguments(call)
        if isinstance(arguments, Mapping) and self.ignore_arguments:
            return {k: v for k, v in arguments.items() if k not in self.ignore_arguments}
        return arguments

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        calls = trajectory.tool_calls
        distinct: list[ToolCall] = []
        # Calls bucketed by a key that equal calls always share (numbers as floats: 1 == 1.0),
        # so each call is compared only with its few look-alikes: linear in the calls.
        buckets: dict[tuple[str, Any], list[ToolCall]] = {}
        redundant: list[dict[str, Any]] = []
        loops: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            key = (call.name, None if self.names_only else _bucket(self._comparable(call)))
            bucket = buckets.setdefault(key, [])
            if any(self.same(seen, call) for seen in bucket):
                redundant.append({"index": index, "name": call.name})
            else:
                distinct.append(call)
                bucket.append(call)
            if index and self.same(calls[index - 1], call):
                if loops and loops[-1]["last_index"] == index - 1:
                    loops[-1]["calls"] += 1
                    loops[-1]["last_index"] = index
                else:
                    loops.append(
                        {
                            "name": call.name,
                            "first_index": index - 1,
                            "last_index": index,
                            "calls": 2,
                        }
                    )
        if not calls:
            explanation = "No tool calls to inspect."
        else:
            explanation = (
                f"{len(distinct)}/{len(calls)} calls were distinct "
                f"({len(redundant)} redundant, {_plural(len(loops), 'loop')})."
            )
        return self.scored(
            _ratio(len(distinct), len(calls)),
            explanation,
            {
                "total": len(calls),
                "distinct": len(distinct),
                "redundant": redundant,
                "loops": loops,
            },
        )


def _bucket(value: Any) -> Any:
    """A hashable key that `values_equal` values share (it may also join unequal ones: the
    bucket is checked with `values_equal`)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, bool) else ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, Mapping):
        return ("object", frozenset((str(k), _bucket(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_bucket(v) for v in value))
    return ("other", repr(value))


# --- correctness -------------------------------------------------------------------------------


def f1(true_positives: int, actual: int, expected: int) -> float:
    """Dokimos' F1: 1 when both sides are empty, 0 when one is."""
    if actual == 0 and expected == 0:
        return 1.0
    if actual == 0 or expected == 0:
        return 0.0
    precision, recall = true_positives / actual, true_positives / expected
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two name lists."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


class Correctness(_Graded):
    """Did the agent use the expected tools? (Dokimos ToolCorrectnessEvaluator.)

    - `names_only` (default): F1 of the set of tool names used against the set expected.
    - `names_and_order`: LCS(actual names, expected names) / max(len(actual), len(expected)),
      1.0 when both are empty.
    - `names_and_args`: F1 of matched calls, a call matching when its name is the expected one
      and its arguments match (tolerant: 1 == 1.0, any key order; `arguments` mode, per-call
      `match` and `rules`). Calls are paired by maximum matching, where Dokimos pairs first-fit.

    F1 is 1.0 when nothing was expected and nothing called, 0.0 when only one side is empty."""

    type: Literal["correctness"]
    expected: list[ExpectedCall] = Field(
        description="expected calls (a bare tool name is enough for the name modes)"
    )
    mode: Literal["names_only", "names_and_order", "names_and_args"] = Field(
        "names_only", description="what is compared: name sets, name order, or whole calls"
    )
    arguments: ArgMode = Field(
        "exact",
        description="names_and_args: how argument key sets compare when a call gives no `match`",
    )
    normalize_names: bool = Field(
        False, description="ignore case and the separators - _ . in tool names"
    )

    @model_validator(mode="after")
    def _one_each(self) -> Correctness:
        for call in self.expected:
            repeated = {"optional", "min", "max"} & call.model_fields_set
            if repeated:
                raise ValueError(
                    f"correctness counts each expected call once: {', '.join(sorted(repeated))} "
                    f"(on {call.name}) belong to the tool_calls assertion"
                )
        return self

    def _key(self, name: str) -> str:
        return normalize_name(name) if self.normalize_names else name

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        actual = trajectory.tool_calls
        if self.mode == "names_only":
            return self._names_only(actual)
        if self.mode == "names_and_order":
            return self._names_and_order(actual)
        return self._names_and_args(actual)

    def _names_only(self, actual: list[ToolCall]) -> Score:
        used = list(dict.fromkeys(self._key(c.name) for c in actual))
        wanted = list(dict.fromkeys(self._key(e.name) for e in self.expected))
        correct = [n for n in used if n in wanted]
        redundant = [n for n in used if n not in wanted]
        missing = [n for n in wanted if n not in used]
        explanation = (
            f"Correct: {correct or 'none'}, redundant: {redundant or 'none'}, "
            f"missing: {missing or 'none'}."
        )
        return self.scored(
            f1(len(correct), len(used), len(wanted)),
            explanation,
            {"correct": correct, "redundant": redundant, "missing": missing},
        )

    def _names_and_order(self, actual: list[ToolCall]) -> Score:
        used = [self._key(c.name) for c in actual]
        wanted = [self._key(e.name) for e in self.expected]
        lcs = lcs_length(used, wanted)
        longest = max(len(used), len(wanted))
        value = lcs / longest if longest else 1.0
        return self.scored(
            value,
            f"Order similarity {value:.2f} (LCS {lcs}/{longest}).",
            {
                "lcs": lcs,
                "actual": used,
                "expected": wanted,
                "redundant": [n for n in dict.fromkeys(used) if n not in wanted],
                "missing": [n for n in dict.fromkeys(wanted) if n not in used],
            },
        )

    def _names_and_args(self, actual: list[ToolCall]) -> Score:
        keys = [self._key(c.name) for c in actual]
        weights: list[list[float | None]] = []
        for e in self.expected:
            wanted = self._key(e.name)
            weights.append(
                [
                    1.0 if k == wanted and self._matches(e, c) else None
                    for k, c in zip(keys, actual, strict=True)
                ]
            )
        pairs = max_weight_matching(weights) if actual and self.expected else []
        matched = len(pairs)
        paired_actual = {j for _, j in pairs}
        paired_expected = {i for i, _ in pairs}
        value = f1(matched, len(actual), len(self.expected))
        if not actual and not self.expected:
            explanation = "No tool call expected and none made."
        else:
            explanation = (
                f"{matched} of {len(actual)} actual and {matched} of {len(self.expected)} "
                "expected tool calls matched (with arguments)."
            )
        return self.scored(
            value,
            explanation,
            {
                "matched": [{"expected_index": i, "actual_index": j} for i, j in pairs],
                "unmatched_expected": [
                    e.name for i, e in enumerate(self.expected) if i not in paired_expected
                ],
                "unmatched_actual": [
                    c.name for j, c in enumerate(actual) if j not in paired_actual
                ],
                **(
                    {"notes": ["paired greedily, not optimally (too large to pair exactly)"]}
                    if not fits_exactly(len(self.expected), len(actual))
                    else {}
                ),
            },
        )

    def _matches(self, expected: ExpectedCall, call: ToolCall) -> bool:
        if self._key(expected.name) != self._key(call.name):
            return False
        result = match_arguments(
            expected.arguments,
            call.arguments,
            mode=expected.match or self.arguments,
            rules=expected.rules,
        )
        return result.passed


# --- tool name and description reliability -----------------------------------------------------

_SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
IMPLEMENTATION_WORDS = (
    "_with_llm",
    "_via_api",
    "_from_s3",
    "_using_bq",
    "_using_sdk",
    "_with_gpt4",
)


class _ToolsReliability(_Graded):
    default_threshold: ClassVar[float] = 0.8
    threshold: float | None = Field(
        0.8, ge=0, le=1, description="pass when the value is at least this (Dokimos: 0.8)"
    )
    tools: list[str] | None = Field(
        None, description="only these tools (default: every tool offered: catalog + recorded)"
    )

    def offered(self, trajectory: Trajectory, context: EvalContext) -> list[ToolSpec]:
        specs = context.tool_specs(trajectory)
        names = sorted(specs) if self.tools is None else [n for n in self.tools if n in specs]
        return [specs[n] for n in names]

    @abstractmethod
    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        """The rule-based checks of one tool: name -> passed."""

    _memo: dict[int, tuple[dict[str, ToolSpec], Score]] = PrivateAttr(default_factory=dict)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if _no_tools_offered(trajectory, context):
            return Score.failed_with(_NO_TOOLS)
        # The score depends on the tools offered only: the same tool set, the same score.
        specs = context.tool_specs(trajectory)
        memo = self._memo.get(id(specs))
        if memo is not None and memo[0] is specs:
            return memo[1]
        score = self._evaluate(trajectory, context)
        if len(self._memo) >= 256:
            self._memo.clear()
        self._memo[id(specs)] = (specs, score)
        return score

    def _evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        tools = self.offered(trajectory, context)
        per_tool: list[dict[str, Any]] = []
        for tool in tools:
            checks = self.checks(tool)
            score = _ratio(sum(checks.values()), len(checks))
            per_tool.append({"tool": tool.name, "score": score, "checks": checks})
        value = sum(t["score"] for t in per_tool) / len(per_tool) if per_tool else 1.0
        failing = [
            f"{t['tool']} ({', '.join(k for k, ok in t['checks'].items() if not ok)})"
            for t in per_tool
            if t["score"] < 1
        ]
        what = self.type.removeprefix("tool_").removesuffix("_reliability")
        if not tools:
            explanation = "No tools to evaluate."
        elif not failing:
            explanation = f"Every {what} check passed for {_plural(len(tools), 'tool')}."
        else:
            explanation = (
                f"Average {what} quality {value:.0%} across {_plural(len(tools), 'tool')}; "
                f"failing: {'; '.join(failing[:3])}{' ...' if len(failing) > 3 else ''}."
            )
        return self.scored(value, explanation, {"tools": per_tool})


class ToolNameReliability(_ToolsReliability):
    """Dokimos ToolNameReliability's rule-based checks of each offered tool's name:
    `snakecase_format` (`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`), `conciseness` (at most
    `max_segments` underscore-separated segments) and `intent_over_implementation` (none of
    the implementation words, e.g. `_via_api`, in the lower-cased name). A tool scores the
    fraction of its checks passed; the value is the mean over tools (1.0 without tools).
    The LLM checks (clarity, name_order) are not run here."""

    type: Literal["tool_name_reliability"]
    max_segments: int = Field(7, ge=1, description="most underscore-separated segments")
    implementation_words: list[str] = Field(
        default_factory=lambda: list(IMPLEMENTATION_WORDS),
        description="substrings that reveal how instead of what (Dokimos' blocklist)",
    )

    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        name = tool.name
        segments = name.split("_")
        while len(segments) > 1 and not segments[-1]:  # as Java's split drops trailing ""
            segments.pop()
        return {
            "snakecase_format": _SNAKE_CASE.match(name) is not None,
            "conciseness": len(segments) <= self.max_segments,
            "intent_over_implementation": not any(
                word.lower() in name.lower() for word in self.implementation_words
            ),
        }


def _typed(schema: Any) -> bool:
    """A parameter schema says its type: `type`, or a `$ref`, `enum` or `const`, or
    `anyOf`/`oneOf`/`allOf` whose every branch is typed (Optional[...] from pydantic)."""
    if not isinstance(schema, Mapping):
        return False
    if "type" in schema or "$ref" in schema or "enum" in schema or "const" in schema:
        return True
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches and all(_typed(b) for b in branches):
            return True
    return False


class ToolDescriptionReliability(_ToolsReliability):
    """Dokimos ToolDescriptionReliability's rule-based checks of each offered tool's
    parameters: `input_arguments_clarity` (every parameter has a description),
    `input_arguments_types` (every parameter has a type), `max_num_input_arguments` (at most
    `max_input_arguments`), `max_optional_input_arguments` (at most `max_optional_arguments`
    not required). A tool scores the fraction of its checks passed; the value is the mean over
    tools (1.0 without tools). The nine LLM checks are not run here."""

    type: Literal["tool_description_reliability"]
    max_input_arguments: int = Field(5, ge=0, description="most parameters (Dokimos maxInputArgs)")
    max_optional_arguments: int = Field(
        3, ge=0, description="most optional parameters (Dokimos maxOptionalArgs)"
    )

    def checks(self, tool: ToolSpec) -> dict[str, bool]:
        schema = tool.parameters or {}
        properties = schema.get("properties")
        params: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        required_names = (
            {r for r in required if r in params} if isinstance(required, list) else set()
        )
        return {
            "input_arguments_clarity": all(
                isinstance(p, Mapping) and "description" in p for p in params.values()
            ),
            "input_arguments_types": all(_typed(p) for p in params.values()),
            "max_num_input_arguments": len(params) <= self.max_input_arguments,
            "max_optional_input_arguments": len(params) - len(required_names)
            <= self.max_optional_arguments,
        }


# --- counts: turns, latency, tokens ------------------------------------------------------------


def _limits(value: float, low: float | None, high: float | None) -> bool | None:
    if low is None and high is None:
        return None  # no limit: the value is informational
    return (low is None or value >= low) and (high is None or value <= high)


class TurnCount(_Counted):
    """The number of turns (user message -> steps -> answer, as the trajectory was rebuilt).
    Value: the count. Passes when within `min_turns`..`max_turns`; without limits it only
    records the count (passed is empty)."""

    type: Literal["turn_count"]
    min_turns: int | None = Field(None, ge=0, description="fewest turns allowed")
    max_turns: int | None = Field(None, ge=0, description="most turns allowed")

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        count = len(trajectory.turns)
        passed = _limits(count, self.min_turns, self.max_turns)
        bounds = _bounds_text(self.min_turns, self.max_turns, "")
        explanation = f"{_plural(count, 'turn')}{bounds}."
        return Score(
            value=float(count),
            passed=passed,
            explanation=explanation,
            details={"turns": count, "min_turns": self.min_turns, "max_turns": self.max_turns},
        )


def _bounds_text(low: float | None, high: float | None, unit: str) -> str:
    if low is not None and high is not None:
        return f" (allowed {low:g}{unit} to {high:g}{unit})"
    if low is not None:
        return f" (at least {low:g}{unit})"
    if high is not None:
        return f" (at most {high:g}{unit})"
    return ""


class Latency(_Counted):
    """Time taken, in milliseconds. Value: the total, either `wall` (the conversation's first
    span start to last span end) or `steps` (the sum of model and tool call latencies, which
    counts parallel calls twice). Passes when the total is at most `max_total_ms`, every tool
    call at most `max_tool_ms`, and each named tool's calls at most their `per_tool_max_ms`;
    without limits it only records the value. Calls without a recorded latency are skipped."""

    type: Literal["latency"]
    measure: Literal["wall", "steps"] = Field(
        "wall", description="wall: conversation start to end; steps: sum of call latencies"
    )
    max_total_ms: float | None = Field(None, ge=0, description="limit on the total")
    max_tool_ms: float | None = Field(None, ge=0, description="limit on every tool call")
    per_tool_max_ms: dict[str, float] = Field(
        default_factory=dict, description="tool name -> limit on each call of that tool"
    )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        tools = [c for c in trajectory.tool_calls if c.latency_ms is not None]
        models = [m for m in trajectory.model_calls if m.latency_ms is not None]
        steps_ms = sum(c.latency_ms or 0.0 for c in tools) + sum(
            m.latency_ms or 0.0 for m in models
        )
        wall_ms = None
        if trajectory.start_time is not None and trajectory.end_time is not None:
            wall_ms = (trajectory.end_time - trajectory.start_time).total_seconds() * 1000
        total = wall_ms if self.measure == "wall" else (steps_ms if tools or models else None)
        if total is None:
            return Score.failed_with(f"no timings recorded to measure {self.measure} latency")
        slowest: dict[str, float] = {}
        for call in tools:
            slowest[call.name] = max(slowest.get(call.name, 0.0), call.latency_ms or 0.0)
        over: list[str] = []
        if self.max_total_ms is not None and total > self.max_total_ms:
            over.append(f"total {total:.0f} ms > {self.max_total_ms:g} ms")
        for name, ms in slowest.items():
            limit = self.per_tool_max_ms.get(name, self.max_tool_ms)
            if limit is not None and ms > limit:
                over.append(f"{name} {ms:.0f} ms > {limit:g} ms")
        limited = self.max_total_ms is not None or self.max_tool_ms is not None
        passed = (not over) if limited or self.per_tool_max_ms else None
        explanation = f"{self.measure.capitalize()} latency {total:.0f} ms"
        explanation += f"; over the limit: {', '.join(over)}." if over else "."
        return Score(
            value=total,
            passed=passed,
            explanation=explanation,
            details={
                "measure": self.measure,
                "wall_ms": wall_ms,
                "steps_ms": steps_ms,
                "tool_ms": sum(c.latency_ms or 0.0 for c in tools),
                "model_ms": sum(m.latency_ms or 0.0 for m in models),
                "max_tool_ms_by_name": slowest,
                "over_limit": over,
            },
        )


class TokenUsage(_Counted):
    """Tokens used by the conversation's model calls (gen_ai.usage.* or OpenInference counts).
    Value: the `value` total (default `total` = input + output). Passes when the input, output
    and total sums are within their limits; without limits it only records the value. Model
    calls without counts are skipped and counted in the details."""

    type: Literal["token_usage"]
    value: Literal["total", "input", "output"] = Field(
        "total", description="which sum is stored as the value"
    )
    max_input_tokens: int | None = Field(None, ge=0, description="limit on input tokens")
    max_output_tokens: int | None = Field(None, ge=0, description="limit on output tokens")
    max_total_tokens: int | None = Field(None, ge=0, description="limit on input + output")

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        models = trajectory.model_calls
        counted = [m for m in models if m.input_tokens is not None or m.output_tokens is not None]
        if not counted:
            return Score.failed_with("no token counts recorded")
        sums = {
            "input": sum(m.input_tokens or 0 for m in counted),
            "output": sum(m.output_tokens or 0 for m in counted),
        }
        sums["total"] = sums["input"] + sums["output"]
        limits = {
            "input": self.max_input_tokens,
            "output": self.max_output_tokens,
            "total": self.max_total_tokens,
        }
        over = [
            f"{k} {sums[k]} > {lim}"
            for k, lim in limits.items()
            if lim is not None and sums[k] > lim
        ]
        passed = None if all(v is None for v in limits.values()) else not over
        explanation = (
            f"{sums['total']} tokens ({sums['input']} in, {sums['output']} out) over "
            f"{_plural(len(counted), 'model call')}"
        )
        explanation += f"; over the limit: {', '.join(over)}." if over else "."
        return Score(
            value=float(sums[self.value]),
            passed=passed,
            explanation=explanation,
            details={
                **{f"{k}_tokens": v for k, v in sums.items()},
                "model_calls": len(models),
                "model_calls_without_counts": len(models) - len(counted),
                "over_limit": over,
            },
        )


# --- Arcade's rubric ---------------------------------------------------------------------------


def same_tool_name(expected: str, actual: str) -> bool:
    """Arcade's `compare_tool_name`: case and the separators `-`, `_`, `.` do not matter
    (nor spaces: the project's one name normalisation)."""
    return normalize_name(expected) == normalize_name(actual)


class RubricCall(BaseModel):
    """An expected call of a rubric (Arcade's ExpectedToolCall / ExpectedMCPToolCall; its
    `tool_name` and `args` spellings are accepted). A bare tool name is enough."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    string_shorthand: ClassVar[dict[str, Any]] = {"type": "string", "description": "tool name"}

    name: str = Field(
        validation_alias=AliasChoices("name", "tool_name"),
        description="tool name (compared ignoring case and - _ .)",
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("arguments", "args"),
        description="expected arguments, read by the critics by field",
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data  # no arguments expected


CriticEntry = Annotated[Critic, Field(discriminator="type")]


class ToolCallRubric(AssertionBase):
    """Arcade's EvalCase scoring: the calls against the expected ones, judged by weighted
    critics, graded by a rubric.

    In order: with `fail_on_tool_call_quantity`, a different number of calls scores 0; no
    expected and no actual call scores 1; with `fail_on_tool_selection`, a different multiset
    of tool names scores 0; without critics, 1. Otherwise expected and actual calls are paired
    to maximise the summed pair score (tool-selection weight when the names match, plus each
    critic's score where both values are present), then every pair adds the tool-selection
    score and every critic's score (a critic that cannot judge, e.g. a missing number, scores
    0 with its weight counted). Value: total score / total weight. Label: `passed` at
    `fail_threshold` or more, `warned` when passed but below `warn_threshold`, else `failed`.
    """

    type: Literal["tool_call_rubric"]
    _prepared: tuple[list[float], list[list[Any]]] | None = PrivateAttr(None)
    expected: list[RubricCall] = Field(description="the expected tool calls")
    critics: list[CriticEntry] = Field(
        default_factory=list,
        description="per-argument critics: binary, numeric, similarity, datetime",
    )
    fail_threshold: float = Field(0.8, ge=0, le=1, description="lowest passing score")
    warn_threshold: float = Field(
        0.9, ge=0, le=1, description="a passing score below this is labelled warned"
    )
    fail_on_tool_selection: bool = Field(
        True, description="score 0 when the tool names differ (as multisets)"
    )
    fail_on_tool_call_quantity: bool = Field(
        True, description="score 0 when the number of calls differs from the expected"
    )
    tool_selection_weight: float = Field(
        1.0, ge=0, description="weight of a paired call's tool-name match"
    )

    @model_validator(mode="after")
    def _no_threshold(self) -> ToolCallRubric:
        if self.threshold is not None:
            raise ValueError("a rubric passes at fail_threshold: set that instead of threshold")
        return self

    def _score(
        self, value: float, explanation: str, details: dict[str, Any], reason: str | None = None
    ) -> Score:
        passed = value >= self.fail_threshold
        label = "failed" if not passed else "warned" if value < self.warn_threshold else "passed"
        if reason is not None:
            details = {"failure_reason": reason, **details}
        return Score(
            value=min(1.0, max(0.0, value)),
            label=label,
            passed=passed,
            threshold=self.fail_threshold,
            explanation=explanation,
            details=details,
        )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        actual = [
            (c.name, c.arguments if isinstance(c.arguments, Mapping) else {})
            for c in trajectory.tool_calls
        ]
        expected_names = [e.name for e in self.expected]
        actual_names = [name for name, _ in actual]
        names = {"expected_tools": expected_names, "actual_tools": actual_names}
        if self.fail_on_tool_call_quantity and len(actual) != len(self.expected):
            reason = f"expected {len(self.expected)} tool call(s), got {len(actual)}"
            return self._score(0.0, f"Failed: {reason}.", names, reason)
        if not self.expected and not actual:
            return self._score(1.0, "No tool call expected and none made.", names)
        if self.fail_on_tool_selection and not self._same_selection(expected_names, actual_names):
            reason = f"tool selection mismatch: expected {expected_names}, got {actual_names}"
            return self._score(0.0, f"Failed: {reason}.", names, reason)
        if not self.critics:
            return self._score(1.0, "The expected tools were selected (no critics).", names)
        if self._prepared is None:  # the expectation does not change: read it once
            self._prepared = (
                critic_weights(self.critics),
                [[argument(e.arguments, c.field) for c in self.critics] for e in self.expected],
            )
        weights, wanted = self._prepared
        got = [[argument(args, c.field) for c in self.critics] for _, args in actual]
        judged: dict[tuple[int, int, int], Any] = {}  # each judgement made once, reused below
        pair_weights: list[list[float | None]] = [
            [
                self._pair_score(e, name, wanted[i], got[j], weights, judged, i, j)
                for j, (name, _) in enumerate(actual)
            ]
            for i, e in enumerate(self.expected)
        ]
        pairs = self._pairs(pair_weights)
        total = weight_sum = 0.0
        results: list[dict[str, Any]] = []
        for i, j in pairs:
            expected = self.expected[i]
            name = actual[j][0]
            selected = same_tool_name(expected.name, name)
            selection = self.tool_selection_weight if selected else 0.0
            total += selection
            weight_sum += self.tool_selection_weight
            critiques = []
            for k, (critic, weight) in enumerate(zip(self.critics, weights, strict=True)):
                want, value = wanted[i][k], got[j][k]
                try:
                    judgement = judged.get((i, j, k)) or critic.judge(want, value, weight)
                    match, score, error = judgement.match, judgement.score, None
                except Exception as exc:  # as Arcade: a critic that cannot judge scores 0
                    match, score, error = False, 0.0, f"{type(exc).__name__}: {exc}"
                total += score
                weight_sum += weight
                critiques.append(
                    {
                        "field": critic.field,
                        "critic": critic.type,
                        "match": match,
                        "score": score,
                        "weight": weight,
                        "expected": want,
                        "actual": value,
                        **({"error": error} if error else {}),
                    }
                )
            results.append(
                {
                    "expected_index": i,
                    "actual_index": j,
                    "expected": expected.name,
                    "actual": name,
                    "tool_selection": {"match": selected, "score": selection},
                    "critics": critiques,
                }
            )
        value = total / weight_sum if weight_sum > 0 else 0.0
        misses = [
            f"{c['field']} of {r['expected']}"
            for r in results
            for c in r["critics"]
            if not c["match"]
        ]
        explanation = f"Rubric score {value:.2f} over {_plural(len(pairs), 'paired call')}"
        explanation += f"; no match for {', '.join(misses[:4])}." if misses else "."
        return self._score(value, explanation, {**names, "pairs": results})

    def _same_selection(self, expected: list[str], actual: list[str]) -> bool:
        # Arcade zips the two sorted lists (so with unequal counts only the shorter length is
        # compared); sorting normalised names makes the order agree with the comparison.
        return all(
            same_tool_name(e, a)
            for e, a in zip(
                sorted(expected, key=normalize_name),
                sorted(actual, key=normalize_name),
                strict=False,
            )
        )

    def _pair_score(
        self,
        expected: RubricCall,
        name: str,
        wanted: list[Any],
        got: list[Any],
        weights: list[float],
        judged: dict[tuple[int, int, int], Any],
        i: int,
        j: int,
    ) -> float:
        score = self.tool_selection_weight if same_tool_name(expected.name, name) else 0.0
        for k, (critic, weight) in enumerate(zip(self.critics, weights, strict=True)):
            want, value = wanted[k], got[k]
            if want is None or value is None:
                continue  # as Arcade's cost matrix
            try:
                judgement = judged[(i, j, k)] = critic.judge(want, value, weight)
            except Exception:  # a critic that cannot judge adds nothing
                continue
            score += judgement.score
        return score

    @staticmethod
    def _pairs(weights: list[list[float | None]]) -> list[tuple[int, int]]:
        """The optimal assignment, completed (as Arcade's square cost matrix is) so that
        min(expected, actual) pairs are always scored."""
        pairs = list(max_weight_matching(weights))
        used_rows = {i for i, _ in pairs}
        used_cols = {j for _, j in pairs}
        free_cols = [j for j in range(len(weights[0]) if weights else 0) if j not in used_cols]
        for i in range(len(weights)):
            if i not in used_rows and free_cols:
                pairs.append((i, free_cols.pop(0)))
        return sorted(pairs)
