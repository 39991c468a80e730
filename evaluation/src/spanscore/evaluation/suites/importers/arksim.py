"""ArkSim `scenarios.json`: each scenario's `tool_calls` assertion as a spanscore `tool_calls`
and its `agent_response` constraints as judged rubrics.

ArkSim's rules (arksim/evaluator/trajectory_matching.py), and how they are kept:
- match modes `strict` (same calls, same order, same count), `unordered` (the same calls as a
  multiset, whatever the docs' "same set" says), `contains` (every expected call made, extras
  allowed), `within` (every actual call allowed by some expected call; repeats allowed; no
  calls at all passes) map onto the spanscore modes of the same names; the default is
  `unordered`.
- argument modes `ignore` (default: names only), `exact` (Python `==` on the argument objects)
  and `partial` (every expected key present with an equal value) map onto a bare name, `match:
  exact` and `match: partial`.
- an empty `expected` list passes whatever the agent did: no assertion is imported for it.
- only the first `tool_calls` assertion of a scenario is used by ArkSim; so here too.
- all the conversation's tool calls, over every turn, are matched at once; so in spanscore.
- `agent_response` assertions (`{"type": "agent_response", "expected": "..."}`: a constraint
  the agent must respect; only on ArkSim's unreleased branch `feat/agent-constraints`) become
  qualitative judged rubrics (`type: judged`) named `agent_response` (`agent_response_<n>`
  when a scenario has several): labels `no failure` (passes) and `constraint_violation`.
  ArkSim applies them to every turn: at each turn its judge checks every constraint against
  that turn's last assistant message (violated: the message directly contradicts or fails to
  enforce it) and labels the turn `constraint_violation` if any is violated. spanscore's judge
  reads the whole conversation once and gives one label per constraint (noted).
- ArkSim's custom metrics are Python files, not part of scenarios.json: nothing to import.
- the older shape (`expected_tool_calls`, `match_mode` strict/unordered/subset/superset,
  `arg_match_mode` exact/ignore/subset) is read too: `subset` is `within`, `superset` is
  `contains`, argument `subset` is `partial`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import (
    ImportResult,
    expected_call,
    fail,
    has_bool_or_float,
    has_nested_object,
    listing,
    mapping,
    repeated_names,
    scenario,
    text,
    user_block,
)

FORMAT = "arksim"

MODES = {"strict": "strict", "unordered": "unordered", "contains": "contains", "within": "within"}
LEGACY_MODES = {
    "strict": "strict",
    "unordered": "unordered",
    "subset": "within",
    "superset": "contains",
}
ARG_MODES = {"ignore": "ignore", "exact": "exact", "partial": "partial"}
LEGACY_ARG_MODES = {"ignore": "ignore", "exact": "exact", "subset": "partial"}


def detect(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    scenarios = data.get("scenarios")
    return (
        isinstance(scenarios, list)
        and bool(scenarios)
        and all(isinstance(s, dict) and "scenario_id" in s for s in scenarios)
    )


def convert(data: Any, path: Path) -> ImportResult:
    document = mapping(data, path, "")
    items = listing(document.get("scenarios"), path, "scenarios")
    result = ImportResult(suite={})
    scenarios: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"scenarios[{i}]"
        item = mapping(item, path, where)
        sid = text(item.get("scenario_id"), path, f"{where}.scenario_id")
        if sid in seen:
            raise fail(path, f"{where}.scenario_id", f"{sid!r} is used twice")
        seen.add(sid)
        assertions = _assertions(item, sid, path, where, result)
        description = item.get("goal") if isinstance(item.get("goal"), str) else None
        scenarios.append(scenario(sid, description, assertions, _user(item, path, where)))
    result.suite = {
        "name": f"arksim-{path.stem}",
        "description": f"ArkSim scenarios imported from {path.name}",
        "scenarios": scenarios,
    }
    result.notes.append(
        "ArkSim reports a trajectory mismatch as a failure label on the conversation's last "
        "turn with tool calls (counted in the Turn Success Ratio); spanscore scores it as its "
        "own `tool_calls` row with a graded value."
    )
    return result


def _user(item: dict[str, Any], path: Path, where: str) -> dict[str, Any] | None:
    """The simulated user ArkSim plays for the scenario (`spanscore simulate`): its goal,
    profile, knowledge (ArkSim gives the user each item's `content`) and agent context."""
    knowledge = []
    for j, entry in enumerate(listing(item.get("knowledge") or [], path, f"{where}.knowledge")):
        content = entry.get("content") if isinstance(entry, dict) else entry
        if not isinstance(content, str):
            raise fail(path, f"{where}.knowledge[{j}]", "expected {content: text} or text")
        if content:
            knowledge.append(content)
    fields = {k: item.get(k) for k in ("goal", "user_profile", "agent_context")}
    for key, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise fail(path, f"{where}.{key}", "expected text")
    return user_block(
        goal=fields["goal"],
        profile=fields["user_profile"],
        knowledge=knowledge,
        agent_context=fields["agent_context"],
    )


def _assertions(
    item: dict[str, Any], sid: str, path: Path, where: str, result: ImportResult
) -> list[dict[str, Any]]:
    raw = item.get("assertions")
    if raw is None and "expected_tool_calls" in item:  # the older shape
        if item["expected_tool_calls"] is None:
            return []
        mode = item.get("match_mode", "unordered")
        if mode not in LEGACY_MODES:
            raise fail(path, f"{where}.match_mode", f"unknown match mode {mode!r}")
        calls = listing(item["expected_tool_calls"], path, f"{where}.expected_tool_calls")
        result.note(
            sid,
            f"older ArkSim shape: match_mode {mode} is spanscore `{LEGACY_MODES[mode]}`.",
        )
        return _tool_calls(
            calls,
            LEGACY_MODES[mode],
            LEGACY_ARG_MODES,
            sid,
            path,
            f"{where}.expected_tool_calls",
            result,
        )
    assertions = listing(raw or [], path, f"{where}.assertions")
    out: list[dict[str, Any]] = []
    constraints: list[str] = []
    for j, assertion in enumerate(assertions):
        at = f"{where}.assertions[{j}]"
        assertion = mapping(assertion, path, at)
        kind = assertion.get("type")
        if kind == "agent_response":
            constraints.append(text(assertion.get("expected"), path, f"{at}.expected"))
            continue
        if kind != "tool_calls":
            raise fail(path, f"{at}.type", f"unknown assertion type {kind!r}")
        if out:
            result.drop(
                sid,
                f"ArkSim uses only a scenario's first tool_calls assertion; the one at {at} "
                "is ignored there and not imported.",
            )
            continue
        mode = assertion.get("match_mode", "unordered")
        if mode not in MODES:
            raise fail(path, f"{at}.match_mode", f"unknown match mode {mode!r}")
        calls = listing(assertion.get("expected"), path, f"{at}.expected")
        out.extend(_tool_calls(calls, MODES[mode], ARG_MODES, sid, path, f"{at}.expected", result))
    if constraints:
        out.extend(_agent_responses(constraints, sid, result))
    return out


CONSTRAINT_LABELS = {
    "no failure": "every assistant turn is consistent with the constraint",
    "constraint_violation": "an assistant turn directly contradicts the constraint or fails to "
    "enforce it",
}


def _agent_responses(
    constraints: list[str], sid: str, result: ImportResult
) -> list[dict[str, Any]]:
    """ArkSim's agent constraints, one qualitative judged rubric each."""
    out: list[dict[str, Any]] = []
    names = (
        ["agent_response"]
        if len(constraints) == 1
        else [f"agent_response_{n}" for n in range(1, len(constraints) + 1)]
    )
    for name, constraint in zip(names, constraints, strict=True):
        out.append(
            {
                "type": "judged",
                "name": name,
                "criteria": f"The agent must respect this constraint: {constraint.strip()} "
                "It must hold in every assistant turn of the conversation. A turn fulfils it "
                "when the assistant's message is consistent with it; a turn violates it when "
                "the message directly contradicts the constraint or fails to enforce it.",
                "labels": dict(CONSTRAINT_LABELS),
                "pass_labels": ["no failure"],
            }
        )
    result.note(
        sid,
        f"{', '.join(names)}: ArkSim's agent_response constraints (unreleased upstream, branch "
        "feat/agent-constraints) as judged rubrics. ArkSim judges every turn, checking all the "
        "constraints against that turn's last assistant message, and labels each turn "
        "(constraint_violation if any constraint is violated, otherwise no failure); here the "
        "judge reads the whole conversation once and gives one label per constraint "
        "(constraint_violation when any assistant turn violates it).",
    )
    return out


def _tool_calls(
    calls: list[Any],
    mode: str,
    arg_modes: dict[str, str],
    sid: str,
    path: Path,
    where: str,
    result: ImportResult,
) -> list[dict[str, Any]]:
    if not calls:
        result.note(
            sid,
            "ArkSim passes an empty expected list whatever the agent calls, so no tool_calls "
            "assertion is imported (spanscore's strict/unordered with an empty list would "
            "forbid every call).",
        )
        return []
    expected: list[Any] = []
    names: list[str] = []
    modes: set[str] = set()
    for k, call in enumerate(calls):
        at = f"{where}[{k}]"
        call = mapping(call, path, at)
        name = text(call.get("name"), path, f"{at}.name")
        raw_mode = call.get("arg_match_mode", "ignore")
        if raw_mode not in arg_modes:
            raise fail(path, f"{at}.arg_match_mode", f"unknown argument mode {raw_mode!r}")
        arg_mode = arg_modes[raw_mode]
        arguments = call.get("arguments") or {}
        mapping(arguments, path, f"{at}.arguments")
        expected.append(expected_call(name, arguments, arg_mode))
        names.append(name)
        modes.add(arg_mode)
        if arg_mode == "partial" and has_nested_object(arguments):
            result.note(
                sid,
                f"{name}: ArkSim's partial mode compares top-level keys only and needs nested "
                "objects to be equal; spanscore's `partial` applies to nested objects too "
                "(extra nested keys are allowed).",
            )
        if arg_mode == "exact" and has_bool_or_float(arguments):
            result.note(
                sid,
                f"{name}: ArkSim compares arguments with Python `==` (True == 1, 1 == 1.0); "
                "spanscore keeps 1 == 1.0 but never equates a bool with a number.",
            )
    repeated = repeated_names(names)
    if repeated and mode in ("unordered", "contains") and ("partial" in modes or len(modes) > 1):
        result.note(
            sid,
            f"ArkSim pairs repeated calls ({', '.join(repeated)}) first-fit; spanscore pairs them "
            "optimally, so a trajectory ArkSim fails only because of that order passes here.",
        )
    assertion: dict[str, Any] = {"type": "tool_calls", "mode": mode, "expected": expected}
    return [assertion]
