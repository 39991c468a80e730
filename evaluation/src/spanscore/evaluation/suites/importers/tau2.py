"""tau2-bench tasks (`tasks.json`): a list of tasks, each `id`, `user_scenario`, `description`
and `evaluation_criteria` (`actions`, `env_assertions`, `communicate_info`, `nl_assertions`,
`reward_basis`).

A task becomes a scenario with the task's id. tau2's reward is the product of the components in
`reward_basis` (default `[DB, COMMUNICATE]`), each 1 or 0; here each component is one or more
rows, and the task's reward is 1 when every row of its scenario passes:
- `DB` -> `db_writes` (`tool_calls`, see `_tau`): the successful write calls are the gold write
  actions; read-only tools (tau2's READ and GENERIC tools) are free;
- `COMMUNICATE` -> `communicate_info` (`response`, `in_any_message`): each string in some agent
  message with text (any turn, intermediate messages too), `info.lower() in
  content.lower().replace(",", "")`;
- `NL_ASSERTION` -> one `judged` rubric per assertion, `nl_assertion_<n>` (labels `met` /
  `not met`);
- `ACTION` -> one `tool_calls` row per gold action, `action_<action_id>`, mode `contains`:
  tau2's `compare_with_tool_call` (names equal; with `compare_args` null the call's own
  arguments must equal the action's, so the call may leave arguments out; with a list, only
  those arguments are compared; with `[]`, the name alone). Each action is found on its own,
  so one call can satisfy two actions, as in tau2; failed calls count, as in tau2.
- `ENV_ASSERTION` needs the environment's state after the run: not scored (a run warns).
The simulated user (`user_scenario`) is read by `user_definition`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
from spanscore.evaluation.suites.importers._tau import (
    DB_NOTE,
    ToolKinds,
    communicated,
    db_writes,
    simulated_user,
    with_user,
)

FORMAT = "tau2"
REWARD_TYPES = ("DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE")
DEFAULT_BASIS = ["DB", "COMMUNICATE"]
NL_LABELS = {
    "met": "the agent satisfies the expected outcome",
    "not met": "the agent does not satisfy the expected outcome",
}


def _is_task(item: Any) -> bool:
    return isinstance(item, dict) and "id" in item and "user_scenario" in item


def detect(data: Any) -> bool:
    if isinstance(data, list):
        return bool(data) and all(_is_task(item) for item in data)
    return _is_task(data)


def user_definition(task: Mapping[str, Any], path: Path, where: str = "") -> dict[str, Any]:
    """The simulated user of a task, for the simulation's user definitions: tau2's
    `user_scenario`, its `persona` (or None) and its `instructions` (a text, or tau2's structured
    instructions: `domain`, `reason_for_call`, `known_info`, `unknown_info`,
    `task_instructions`), plus `text`, the instructions as tau2 renders them for its user
    simulator."""
    raw = mapping(task.get("user_scenario"), path, f"{where}.user_scenario")
    persona = raw.get("persona")
    if persona is not None and not isinstance(persona, str):
        raise fail(path, f"{where}.user_scenario.persona", "expected a string or null")
    instructions = raw.get("instructions")
    if isinstance(instructions, str):
        rendered = instructions
    else:
        fields = mapping(instructions, path, f"{where}.user_scenario.instructions")
        for key in ("domain", "reason_for_call", "task_instructions"):
            text(fields.get(key), path, f"{where}.user_scenario.instructions.{key}")
        parts = [f"Domain: {fields['domain']}", f"Reason for call:\n\t{fields['reason_for_call']}"]
        for key, title in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
            if fields.get(key) is not None:
                parts.append(f"{title}:\n\t{fields[key]}")
        parts.append(f"Task instructions:\n\t{fields['task_instructions']}")
        rendered = "\n".join(parts)
        instructions = dict(fields)
    return {"persona": persona, "instructions": instructions, "text": rendered}


def convert(data: Any, path: Path, options: Mapping[str, Any] | None = None) -> ImportResult:
    tasks = data if isinstance(data, list) else [data]
    kinds = ToolKinds("tau2", options, path)
    kinds.use_domains_of(_gold_names(tasks), _domains(tasks))
    result = ImportResult(suite={})
    scenarios = []
    seen: set[str] = set()
    for index, raw in enumerate(tasks):
        where = f"[{index}]" if isinstance(data, list) else ""
        task = mapping(raw, path, where)
        sid = str(task.get("id"))
        if sid in seen:
            raise fail(path, f"{where}.id", f"task id {sid!r} appears twice")
        seen.add(sid)
        result.users[sid] = user_definition(task, path, where)
        built = _scenario(task, sid, where, path, kinds, result)
        scenarios.append(with_user(built, simulated_user(result.users[sid])))
    if any(a.get("name") == "db_writes" for s in scenarios for a in s["assertions"]):
        result.notes.append(DB_NOTE)
    result.notes.append(
        "A task's reward is 1 when every row of its scenario passes (tau2 multiplies the "
        "components of reward_basis); components outside reward_basis are not imported (tau2 "
        "computes them for information only)."
    )
    result.suite = {
        "name": f"tau2-{path.parent.name if path.stem == 'tasks' else path.stem}",
        "description": f"tau2-bench tasks imported from {path.name}",
        "scenarios": scenarios,
    }
    return result


def _scenario(
    task: dict[str, Any],
    sid: str,
    where: str,
    path: Path,
    kinds: ToolKinds,
    result: ImportResult,
) -> dict[str, Any]:
    description = _description(task, path, where)
    raw_criteria = task.get("evaluation_criteria")
    if raw_criteria is None:
        result.note(sid, "no evaluation_criteria: tau2 gives reward 1.")
        return scenario(sid, description, [])
    where = f"{where}.evaluation_criteria"
    criteria = mapping(raw_criteria, path, where)
    basis = criteria.get("reward_basis", DEFAULT_BASIS)
    basis = listing(basis if basis is not None else DEFAULT_BASIS, path, f"{where}.reward_basis")
    unknown = [b for b in basis if b not in REWARD_TYPES]
    if unknown:
        raise fail(
            path,
            f"{where}.reward_basis",
            f"unknown reward types {unknown}; expected {', '.join(REWARD_TYPES)}",
        )
    actions = [
        _action(raw, path, f"{where}.actions[{i}]")
        for i, raw in enumerate(listing(criteria.get("actions") or [], path, f"{where}.actions"))
    ]
    assertions: list[dict[str, Any]] = []
    if "DB" in basis:
        agents = [a for a in actions if a["requestor"] == "assistant"]
        assertions.append(db_writes([(a["name"], a["arguments"]) for a in agents], kinds, path))
        users = sorted({a["name"] for a in actions if a["requestor"] == "user"})
        if users:
            result.drop(
                sid,
                f"DB: the user's own actions ({', '.join(users)}) change the user's device, "
                "which spanscore does not see; only the agent's writes are compared.",
            )
    if "ENV_ASSERTION" in basis and criteria.get("env_assertions"):
        result.drop(
            sid,
            "ENV_ASSERTION: env_assertions check the environment's state after the run, which "
            "a trajectory does not hold; not scored.",
        )
    if "COMMUNICATE" in basis and criteria.get("communicate_info"):
        infos = listing(criteria["communicate_info"], path, f"{where}.communicate_info")
        if not all(isinstance(i, str) for i in infos):
            raise fail(path, f"{where}.communicate_info", "expected a list of strings")
        assertions.append(communicated("communicate_info", infos, intermediate=True))
        if any("," in i for i in infos):
            result.note(sid, "communicate_info with a comma is never found (tau2 removes the "
                             "commas of the messages, not of the info).")  # fmt: skip
    if "NL_ASSERTION" in basis and criteria.get("nl_assertions"):
        nl = listing(criteria["nl_assertions"], path, f"{where}.nl_assertions")
        for n, assertion in enumerate(nl, 1):
            outcome = text(assertion, path, f"{where}.nl_assertions[{n - 1}]")
            assertions.append(_nl_assertion(n, outcome))
        result.note(
            sid,
            "nl_assertion_<n>: tau2 grades all expected outcomes in one judge call over the "
            "messages; spanscore judges each outcome on its own, over the whole conversation.",
        )
    if "ACTION" in basis:
        named: set[str] = set()
        for action in actions:
            if action["requestor"] == "user":
                result.drop(
                    sid,
                    f"action {action['action_id']}: a call the user makes, which spanscore "
                    "does not see; not scored.",
                )
                continue
            check = _action_check(action)
            while check["name"] in named:  # action ids repeated in a task: rows stay apart
                check["name"] += "_again"
            named.add(check["name"])
            assertions.append(check)
        if any(isinstance(a["compare_args"], list) and set(a["compare_args"]) - set(a["arguments"])
               for a in actions):  # fmt: skip
            result.note(
                sid,
                "compare_args names an argument the action lacks: the call must not pass it "
                "(or pass it as null, which tau2 would refuse).",
            )
    return scenario(sid, description, assertions)


def _gold_names(tasks: list[Any]) -> set[str]:
    names = set()
    for task in tasks:
        criteria = task.get("evaluation_criteria") if isinstance(task, dict) else None
        actions = criteria.get("actions") if isinstance(criteria, dict) else None
        for action in actions if isinstance(actions, list) else []:
            if isinstance(action, dict) and isinstance(action.get("name"), str):
                names.add(action["name"])
    return names


def _domains(tasks: list[Any]) -> set[str]:
    domains = set()
    for task in tasks:
        scenario = task.get("user_scenario") if isinstance(task, dict) else None
        instructions = scenario.get("instructions") if isinstance(scenario, dict) else None
        if isinstance(instructions, dict) and isinstance(instructions.get("domain"), str):
            domains.add(instructions["domain"])
    return domains


def _description(task: dict[str, Any], path: Path, where: str) -> str | None:
    raw = task.get("description")
    if raw is None:
        return None
    described = mapping(raw, path, f"{where}.description")
    parts = [described.get(k) for k in ("purpose", "notes")]
    return " ".join(p for p in parts if isinstance(p, str) and p) or None


def _action(raw: Any, path: Path, where: str) -> dict[str, Any]:
    action = mapping(raw, path, where)
    name = text(action.get("name"), path, f"{where}.name")
    arguments = mapping(action.get("arguments", {}), path, f"{where}.arguments")
    requestor = action.get("requestor", "assistant")
    if requestor not in ("assistant", "user"):
        raise fail(path, f"{where}.requestor", f"expected assistant or user, got {requestor!r}")
    compare = action.get("compare_args")
    if compare is not None and (
        not isinstance(compare, list) or not all(isinstance(c, str) for c in compare)
    ):
        raise fail(path, f"{where}.compare_args", "expected a list of argument names or null")
    return {
        "action_id": str(action.get("action_id", name)),
        "name": name,
        "arguments": arguments,
        "requestor": requestor,
        "compare_args": compare,
    }


def _action_check(action: dict[str, Any]) -> dict[str, Any]:
    """tau2's `Action.compare_with_tool_call` as one expected call."""
    name, arguments, compare = action["name"], action["arguments"], action["compare_args"]
    expected: Any
    if compare == []:
        expected = name  # no argument compared
    elif compare is None:
        # the call's own keys are compared: each must be the action's with the same value,
        # compared with == (nested objects exactly); the call may leave arguments out
        expected = {
            "name": name,
            "arguments": arguments,
            "match": "superset",
            "rules": dict.fromkeys(arguments, "optional"),
        }
    else:
        rules: dict[str, Any] = {k: "exact" for k in compare if k in arguments}
        # an argument compare_args names but the action lacks must be absent from the call
        rules.update({k: {"strategy": "optional", "value": None}
                      for k in compare if k not in arguments})  # fmt: skip
        expected = {
            "name": name,
            "arguments": {k: arguments[k] for k in compare if k in arguments},
            "match": "partial",
            "rules": rules,
        }
    return {
        "type": "tool_calls",
        "name": f"action_{_slug(action['action_id'])}",
        "mode": "contains",
        "expected": [expected],
    }


def _nl_assertion(n: int, outcome: str) -> dict[str, Any]:
    return {
        "type": "judged",
        "name": f"nl_assertion_{n}",
        "criteria": "The conversation is between an agent and a customer. Decide whether the "
        f"agent satisfies this expected outcome: {outcome}",
        "labels": dict(NL_LABELS),
        "pass_labels": ["met"],
    }


def _slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", value).strip("_") or "action"
