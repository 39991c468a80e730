"""Tool-selection tester datasets (`datasets/test_*.json`) and result files.

Each test case becomes a scenario with the case's id. The category comes from the dataset
file name (`test_tool_selection.json` is "tool selection", `test_no_tool.json` "direct
response", ...) and is kept in the description.

The tester checks exactly first; when a call's argument values or a text differ, an LLM
semantic judge (one prompt file per category: tool_selection, clarifying, error, no_tool,
not_supported) can still turn the mismatch into a pass. Here:

- `ground_truth.function_call` → `tool_calls` strict with that one call: the tester compares
  the model's (single) function call with it. Names compare case-insensitively; arguments need
  the same keys. A string argument gets a `judged` rule (the judge's semantic match, with a
  rubric paraphrasing the tester's tool_selection prompt and the user's query); any other
  value must be equal as lower-cased text (`str(v).lower()`), spanscore's `exact` rule with
  `case_insensitive` and `cast`.
- `ground_truth.no_function_call: true` → `tool_calls` strict with no expected call (any call
  fails) plus a qualitative judged rubric `semantic_equivalence` (labels `equivalent` /
  `different`) comparing the final answer with `ground_truth.text`, its criteria paraphrasing
  the case's category prompt.
- The category comes from the dataset file name (else the case's `type`, else tool_selection
  for calls and no_tool for texts); the tester uses the one prompt file a run is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import (
    ImportResult,
    fail,
    listing,
    mapping,
    scenario,
    text,
)

FORMAT = "tool_selection"

CATEGORIES = {
    "test_tool_selection": "tool selection",
    "test_clarifying": "clarification",
    "test_error": "error handling",
    "test_no_tool": "direct response",
    "test_not_supported": "not supported",
}
# The tester's semantic judge prompt per category (prompts/semantic_judge_<category>.txt).
JUDGE_CATEGORIES = ("tool_selection", "clarifying", "error", "no_tool", "not_supported")

# What each category's prompt asks the judge, paraphrased for a text answer.
TEXT_CRITERIA = {
    "clarifying": "Both should ask the user for the same core information needed to fulfil "
    "the request. They are still equivalent when one adds a format requirement (such as "
    "YYYY-MM-DD), asks for optional extra details, gives examples, or offers more or fewer "
    "options.",
    "error": "Both should tell the user that the request cannot be done as asked because of "
    "the same problem with its input (an invalid date, an unknown place, an impossible "
    "conversion, ...) and ask for a valid value. Wording, apologies and extra explanation do "
    "not matter.",
    "no_tool": "Compare the core meaning and intent; both should answer the question "
    "correctly. Ignore formatting, punctuation and extra context; an answer more specific than "
    'the other that conveys the same core information is equivalent ("The weather in New York '
    'is sunny" and "It\'s sunny in New York, USA"; "20°C" and "20.0 degrees Celsius").',
    "not_supported": "What matters is whether both convey that the agent cannot directly "
    "fulfil the request. Differences in explanation, suggested alternatives or workarounds, "
    "level of detail and phrasing do not matter.",
}
TEXT_CRITERIA["tool_selection"] = TEXT_CRITERIA["no_tool"]
TEXT_LABELS = {
    "equivalent": "the final answer is semantically equivalent to the expected response",
    "different": "it is not, or the agent gave no final answer",
}
ARGUMENT_RUBRIC = (
    "Same core meaning and intent, as the tester's tool_selection prompt asks: ignore "
    "formatting, punctuation and case; a value more specific or detailed than the other that "
    'conveys the same core information is equivalent (a location "New York" and "New York, '
    'USA", "Louvre" and "Louvre, Paris").'
)


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


def judge_category(path: Path, case: dict[str, Any], call: bool) -> str:
    """The tester's semantic judge prompt that fits this case."""
    stem = path.stem.removeprefix("test_")
    if stem in JUDGE_CATEGORIES:
        return stem
    kind = case.get("type")
    if isinstance(kind, str) and kind in JUDGE_CATEGORIES:
        return kind
    return "tool_selection" if call else "no_tool"


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
        scenarios.append(scenario(sid, description, _assertions(case, truth, path, where, result)))
    result.suite = {
        "name": f"tool-selection-{path.stem}",
        "description": f"tool-selection tester cases ({kind}) imported from {path.name}",
        "scenarios": scenarios,
    }
    result.notes.append(
        "The tester's LLM semantic judge (asked when a call's argument values or a text differ "
        "from the ground truth) is the spanscore judge here: string arguments are `judged` "
        "rules and text answers `semantic_equivalence` rubrics whose criteria paraphrase the "
        "tester's prompt for the case's category. The tester skips its judge when the values "
        "are equal (any case); spanscore asks it for every judged value, equal or not. When the "
        "judge fails, a judged argument falls back to embeddings, then token similarity (0.8), "
        "where the tester counts the comparison as different. The judge's endpoint is the "
        "suite's `judge:` block ($OPENAI_BASE_URL by default)."
    )
    return result


def _assertions(
    case: dict[str, Any], truth: dict[str, Any], path: Path, where: str, result: ImportResult
) -> list[dict[str, Any]]:
    sid = str(case["id"])
    query = case.get("user_query") if isinstance(case.get("user_query"), str) else None
    call = truth.get("function_call")
    if call is not None:
        call = mapping(call, path, f"{where}.ground_truth.function_call")
        name = text(call.get("name"), path, f"{where}.ground_truth.function_call.name")
        arguments = mapping(
            call.get("arguments") or {}, path, f"{where}.ground_truth.function_call.arguments"
        )
        rubric = f'The user asked: "{query}". {ARGUMENT_RUBRIC}' if query else ARGUMENT_RUBRIC
        rules = {
            key: (
                {"strategy": "judged", "rubric": rubric}
                if isinstance(value, str)
                else {"strategy": "exact", "case_insensitive": True, "cast": True}
            )
            for key, value in arguments.items()
        }
        expected: dict[str, Any] = {"name": name, "arguments": arguments, "match": "exact"}
        if rules:
            expected["rules"] = rules
        result.note(
            sid,
            "the tester reads only the model's function call: any other call fails here. "
            "Numbers compare by value (100 == 100.0), where the tester compares their text.",
        )
        judged = [key for key, value in arguments.items() if isinstance(value, str)]
        if judged:
            result.note(
                sid,
                f"{', '.join(judged)}: judged (the tester's semantic judge). A missing or "
                "unexpected argument fails here; the tester's code passes a call whose only "
                "differences are missing or unexpected keys when its judge is on (it then has "
                "no value to ask about).",
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
            judge = judge_category(path, case, call=False)
            asked = f'The user asked: "{query}". ' if query else ""
            assertions.append(
                {
                    "type": "judged",
                    "name": "semantic_equivalence",
                    "criteria": f"{asked}Compare the agent's final answer (its last ASSISTANT "
                    f'message) with this expected response: "{reply}" {TEXT_CRITERIA[judge]}',
                    "labels": dict(TEXT_LABELS),
                    "pass_labels": ["equivalent"],
                }
            )
            result.note(
                sid,
                "the tester accepts the text when it equals the expected one (trimmed, any case) "
                f"or its {judge} semantic judge finds it equivalent; here the judge decides "
                "(`semantic_equivalence`), reading the whole conversation.",
            )
        return assertions
    result.note(sid, "ground truth has neither function_call nor no_function_call: no assertion")
    return []
