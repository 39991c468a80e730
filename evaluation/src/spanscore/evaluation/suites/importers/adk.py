"""Google ADK eval sets (`*.evalset.json`, eval-set shaped `*.test.json`) and the older
`.test.json` lists (`query`, `expected_tool_use`, `reference`).

Each eval case becomes a scenario with its `eval_id`; the tool uses of all its invocations are
its expected calls. The criteria come from a `test_config.json` next to the file when there is
one, else ADK's defaults (`tool_trajectory_avg_score` 1.0 with EXACT, `response_match_score`
0.8):
- EXACT → `strict`, IN_ORDER → `in_order`, ANY_ORDER → `contains` (ADK's ANY_ORDER allows
  extra calls: every expected call present, in any order). Arguments compare with `==`
  (`match: exact`), or not at all with `ignore_args`.
- ADK scores each invocation (user turn) 0 or 1 and passes when the mean reaches the
  threshold; spanscore matches the whole conversation's calls at once (see the notes).
- `response_match_score` (ROUGE-1 against the last invocation's final response) → a `response`
  similarity with the same threshold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import (
    ImportResult,
    expected_call,
    fail,
    listing,
    mapping,
    scenario,
    text,
    user_block,
)

FORMAT = "adk"
MODES = {"EXACT": "strict", "IN_ORDER": "in_order", "ANY_ORDER": "contains"}
DEFAULT_CRITERIA: dict[str, Any] = {"tool_trajectory_avg_score": 1.0, "response_match_score": 0.8}


def _is_old_entry(item: Any) -> bool:
    return isinstance(item, dict) and "query" in item and "expected_tool_use" in item


def detect(data: Any) -> bool:
    if isinstance(data, dict):
        return isinstance(data.get("eval_cases", data.get("evalCases")), list)
    return isinstance(data, list) and bool(data) and all(_is_old_entry(i) for i in data)


def _get(obj: dict[str, Any], snake: str) -> Any:
    """ADK writes snake_case; its models also accept camelCase."""
    if snake in obj:
        return obj[snake]
    head, *rest = snake.split("_")
    return obj.get(head + "".join(p.title() for p in rest))


def _criteria(path: Path) -> tuple[dict[str, Any], str]:
    config = path.parent / "test_config.json"
    if not config.is_file():
        return dict(DEFAULT_CRITERIA), "ADK's default criteria"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise fail(config, "", f"cannot read the ADK test config: {exc}") from None
    return dict(mapping(mapping(data, config, "").get("criteria", {}), config, "criteria")), (
        f"the criteria of {config.name}"
    )


def _content_text(content: Any) -> str | None:
    if not isinstance(content, dict):
        return None
    parts = [p.get("text") for p in content.get("parts") or [] if isinstance(p, dict)]
    joined = "".join(p for p in parts if isinstance(p, str))
    return joined or None


def convert(data: Any, path: Path) -> ImportResult:
    criteria, origin = _criteria(path)
    if isinstance(data, list):
        stem = path.name.removesuffix(".json").removesuffix(".test")
        cases = [_old_case(stem, data, path)]
        users = {}
        name = stem
    else:
        document = mapping(data, path, "")
        raw_cases = listing(_get(document, "eval_cases"), path, "eval_cases")
        cases = [
            _case(mapping(c, path, f"eval_cases[{i}]"), path, i) for i, c in enumerate(raw_cases)
        ]
        users = {
            sid: _user(raw, path, f"eval_cases[{i}]")
            for i, ((sid, _, _), raw) in enumerate(zip(cases, raw_cases, strict=True))
        }
        name = str(_get(document, "eval_set_id") or document.get("name") or path.stem)
    result = ImportResult(suite={})
    trajectory = criteria.get("tool_trajectory_avg_score")
    response = criteria.get("response_match_score")
    match_type, threshold, ignore_args = "EXACT", None, False
    if isinstance(trajectory, dict):
        match_type = str(trajectory.get("match_type", trajectory.get("matchType", "EXACT")))
        threshold = trajectory.get("threshold")
        ignore_args = bool(trajectory.get("ignore_args", trajectory.get("ignoreArgs", False)))
    elif isinstance(trajectory, int | float):
        threshold = float(trajectory)
    if match_type not in MODES:
        raise fail(path, "criteria", f"unknown match_type {match_type!r}")
    response_threshold = response.get("threshold") if isinstance(response, dict) else response
    result.notes.append(f"Criteria: {origin}.")
    scenarios = []
    for sid, description, invocations in cases:
        assertions: list[dict[str, Any]] = []
        if trajectory is not None:
            assertions.extend(
                _trajectory(sid, invocations, match_type, threshold, ignore_args, result)
            )
        if isinstance(response_threshold, int | float):
            reply = invocations[-1][1] if invocations else None
            if reply:
                assertions.append(
                    {
                        "type": "response",
                        "expected": reply,
                        "similarity_threshold": float(response_threshold),
                    }
                )
                result.note(
                    sid,
                    "response_match_score is ROUGE-1 per invocation in ADK; here the final "
                    "response's text similarity to the last invocation's reference.",
                )
        scenarios.append(scenario(sid, description, assertions, users.get(sid)))
    result.suite = {
        "name": f"adk-{name}",
        "description": f"Google ADK eval set imported from {path.name}",
        "scenarios": scenarios,
    }
    return result


Invocation = tuple[list[tuple[str, Any]], str | None]  # (tool uses, final response)


def _user(case: dict[str, Any], path: Path, where: str) -> dict[str, Any] | None:
    """ADK's user simulator for a case: its `conversation_scenario`, a starting prompt sent as
    it is and a conversation plan the simulated user follows."""
    raw = _get(case, "conversation_scenario")
    if raw is None:
        return None
    found = mapping(raw, path, f"{where}.conversation_scenario")
    plan = _get(found, "conversation_plan")
    opening = _get(found, "starting_prompt")
    for key, value in (("conversation_plan", plan), ("starting_prompt", opening)):
        if value is not None and not isinstance(value, str):
            raise fail(path, f"{where}.conversation_scenario.{key}", "expected text")
    return user_block(goal=plan, opening=opening)


def _case(case: dict[str, Any], path: Path, i: int) -> tuple[str, str | None, list[Invocation]]:
    where = f"eval_cases[{i}]"
    sid = text(_get(case, "eval_id"), path, f"{where}.eval_id")
    invocations: list[Invocation] = []
    first: str | None = None
    for j, raw in enumerate(listing(case.get("conversation") or [], path, f"{where}.conversation")):
        at = f"{where}.conversation[{j}]"
        invocation = mapping(raw, path, at)
        first = first or _content_text(_get(invocation, "user_content"))
        data = _get(invocation, "intermediate_data") or {}
        uses = []
        for k, use in enumerate(listing(_get(data, "tool_uses") or [], path, f"{at}.tool_uses")):
            use = mapping(use, path, f"{at}.tool_uses[{k}]")
            uses.append(
                (text(use.get("name"), path, f"{at}.tool_uses[{k}].name"), use.get("args") or {})
            )
        invocations.append((uses, _content_text(_get(invocation, "final_response"))))
    return sid, first, invocations


def _old_case(
    stem: str, entries: list[Any], path: Path
) -> tuple[str, str | None, list[Invocation]]:
    invocations: list[Invocation] = []
    for j, raw in enumerate(entries):
        entry = mapping(raw, path, f"[{j}]")
        uses = []
        for k, use in enumerate(listing(entry.get("expected_tool_use") or [], path, f"[{j}]")):
            use = mapping(use, path, f"[{j}].expected_tool_use[{k}]")
            name = text(use.get("tool_name"), path, f"[{j}].expected_tool_use[{k}].tool_name")
            uses.append((name, use.get("tool_input") or {}))
        reference = entry.get("reference")
        invocations.append((uses, reference if isinstance(reference, str) else None))
    first = entries[0].get("query") if entries and isinstance(entries[0], dict) else None
    return stem, first if isinstance(first, str) else None, invocations


def _trajectory(
    sid: str,
    invocations: list[Invocation],
    match_type: str,
    threshold: Any,
    ignore_args: bool,
    result: ImportResult,
) -> list[dict[str, Any]]:
    mode = MODES[match_type]
    expected = [
        expected_call(name, args, None if ignore_args else "exact")
        for uses, _ in invocations
        for name, args in uses
    ]
    if not expected and mode != "strict":
        result.note(
            sid,
            f"ADK's {match_type} passes an empty expected list whatever the agent calls: no "
            "tool_calls assertion imported.",
        )
        return []
    if len(invocations) > 1:
        result.note(
            sid,
            f"ADK matches each of the {len(invocations)} invocations on its own and averages "
            "the 0/1 scores; spanscore matches the whole conversation's calls at once, so a "
            "call made in another turn than expected still counts.",
        )
        if isinstance(threshold, int | float) and threshold < 1:
            result.note(
                sid,
                f"threshold {threshold}: ADK passes when that share of invocations match; "
                "spanscore's pass uses the mode's rule on the whole conversation.",
            )
    return [{"type": "tool_calls", "mode": mode, "expected": expected}]
