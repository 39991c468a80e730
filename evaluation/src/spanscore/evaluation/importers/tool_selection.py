"""Tool-selection tester datasets (`datasets/test_*.json`) and result files.

Each test case becomes a scenario with the case's id. The category comes from the dataset
file name (`test_tool_selection.json` is "tool selection", `test_no_tool.json` "direct
response", ...) and is kept in the description.

- `ground_truth.function_call` → `tool_calls` strict with that one call: the tester compares
  the model's (single) function call with it. Names compare case-insensitively; arguments need
  the same keys and, per key, the same value as lower-cased text (`str(v).lower()`), which is
  spanscore's `exact` rule with `case_insensitive` and `cast` on each argument.
- `ground_truth.no_function_call: true` → `tool_calls` strict with no expected call (any call
  fails) plus a `response` similarity to `ground_truth.text`.
- The tester's LLM semantic judge (a fallback that can turn a mismatch into a pass) is not
  imported: that needs the LLM judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import ImportResult
from ._common import fail, listing, mapping, scenario, text

FORMAT = "tool_selection"

CATEGORIES = {
    "test_tool_selection": "tool selection",
    "test_clarifying": "clarification",
    "test_error": "error handling",
    "test_no_tool": "direct response",
    "test_not_supported": "not supported",
}
SIMILARITY = 0.8


def _is_case(item: Any) -> bool:
    return isinstance(item, dict) and "id" in item and isinstance(item.get("ground_truth"), dict)


def detect(data: Any) -> bool:
    if isinstance(data, list):
        return bool(data) and all(_is_case(item) for item in data)
    if isinstance(data, dict) and data:
        return all(
            isinstance(run, dict) and isinstance(run.get("test_results"), list)
            for run in data.values()
        )
    return False


def category(path: Path) -> str:
    return CATEGORIES.get(path.stem, path.stem.removeprefix("test_").replace("_", " "))


def convert(data: Any, path: Path) -> ImportResult:
    if isinstance(data, dict):  # a result file: {"with_tools": {"test_results": [...]}, ...}
        cases: list[Any] = []
        for run, body in data.items():
            cases.extend(listing(mapping(body, path, run).get("test_results"), path, run))
    else:
        cases = listing(data, path, "")
    result = ImportResult(suite={})
    kind = category(path)
    scenarios: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw in enumerate(cases):
        where = f"[{i}]"
        case = mapping(raw, path, where)
        sid = str(case.get("id") or "")
        if not sid:
            raise fail(path, f"{where}.id", "expected a test case id")
        if sid in seen:
            continue  # a result file lists a case once per mode
        seen.add(sid)
        truth = mapping(case.get("ground_truth"), path, f"{where}.ground_truth")
        query = case.get("user_query")
        description = f"[{kind}] {query}" if isinstance(query, str) else f"[{kind}]"
        scenarios.append(scenario(sid, description, _assertions(truth, sid, path, where, result)))
    result.suite = {
        "name": f"tool-selection-{path.stem}",
        "description": f"tool-selection tester cases ({kind}) imported from {path.name}",
        "scenarios": scenarios,
    }
    result.notes.append(
        "The tester falls back to an LLM semantic judge when a call or a text differs; that "
        "fallback is not imported, so only exact (case-insensitive) calls and similar texts "
        "pass."
    )
    return result


def _assertions(
    truth: dict[str, Any], sid: str, path: Path, where: str, result: ImportResult
) -> list[dict[str, Any]]:
    call = truth.get("function_call")
    if call is not None:
        call = mapping(call, path, f"{where}.ground_truth.function_call")
        name = text(call.get("name"), path, f"{where}.ground_truth.function_call.name")
        arguments = mapping(
            call.get("arguments") or {}, path, f"{where}.ground_truth.function_call.arguments"
        )
        rules = {
            key: {"strategy": "exact", "case_insensitive": True, "cast": True} for key in arguments
        }
        expected: dict[str, Any] = {"name": name, "arguments": arguments, "match": "exact"}
        if rules:
            expected["rules"] = rules
        result.note(
            sid,
            "the tester reads only the model's function call: any other call fails here. "
            "Numbers compare by value (100 == 100.0), where the tester compares their text.",
        )
        return [
            {
                "type": "tool_calls",
                "mode": "strict",
                "normalize_names": True,
                "expected": [expected],
            }
        ]
    if truth.get("no_function_call"):
        assertions: list[dict[str, Any]] = [
            {"type": "tool_calls", "name": "no_tool_call", "mode": "strict", "expected": []}
        ]
        reply = truth.get("text")
        if isinstance(reply, str) and reply:
            assertions.append(
                {"type": "response", "expected": reply, "similarity_threshold": SIMILARITY}
            )
            result.note(
                sid,
                "the tester accepts the text when it equals the expected one (trimmed, any case) "
                f"or an LLM judges it equivalent; spanscore needs similarity >= {SIMILARITY}.",
            )
        return assertions
    result.note(sid, "ground truth has neither function_call nor no_function_call: no assertion")
    return []
