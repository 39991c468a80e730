"""`tool_errors`: the fraction of calls that succeeded (Dokimos ToolErrorEvaluator), with an
optional predicate that reads an error out of a result."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from spanscore.evaluation.matching.patterns import check_pattern
from spanscore.evaluation.metrics.common import Graded, plural, ratio
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

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


@assertion
class ToolErrors(Graded):
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
            explanation = f"All {plural(len(calls), 'tool call')} succeeded."
        else:
            first = failed[0]
            explanation = (
                f"{succeeded}/{len(calls)} tool calls succeeded; e.g. {first['name']}: "
                f"{first['error']}."
            )
        return self.scored(
            ratio(succeeded, len(calls)),
            explanation,
            {"succeeded": succeeded, "total": len(calls), "calls": results},
        )
