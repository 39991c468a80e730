"""tau-bench tasks: a JSON list of tasks (or one task), each `user_id`, `instruction`,
`actions` (`name`, `kwargs`) and `outputs`.

A task becomes a scenario whose id is the task's index in the file (tau-bench's task id), or its
`task_id`/`id` when it has one. tau-bench's reward is 1 only if the database after the agent's
actions equals the database after replaying the gold actions, and every output appears in some
message the agent sent the user (`output.lower() in content.lower().replace(",", "")`):
- `db_writes` (`tool_calls`, see `_tau`): the agent's successful calls to the tools that change
  state are the gold write actions; read-only tools are free;
- `outputs` (`response`, `in_any_message`, answers only, case ignored, commas removed from the
  messages): tau-bench reads the `respond` actions, the texts sent to the user; a message that
  carries a tool call is not one of them there (its tool-calling agent keeps only the call).
The task's reward is 1 when both rows pass. `instruction` is the simulated user's
(`user_definition`).
"""

from __future__ import annotations

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

FORMAT = "tau_bench"
RESPOND = "respond"  # tau-bench's action for a message to the user, not a tool


def _is_task(item: Any) -> bool:
    return isinstance(item, dict) and {"actions", "outputs", "instruction"} <= set(item)


def detect(data: Any) -> bool:
    if isinstance(data, list):
        return bool(data) and all(_is_task(item) for item in data)
    return _is_task(data)


def user_definition(task: Mapping[str, Any]) -> dict[str, Any]:
    """The simulated user of a task, for the simulation's user definitions: tau-bench gives
    one instruction (who the user is and what they want) and the user's id in its database."""
    return {
        "persona": None,
        "instructions": task.get("instruction"),
        "user_id": task.get("user_id"),
    }


def convert(data: Any, path: Path, options: Mapping[str, Any] | None = None) -> ImportResult:
    tasks = data if isinstance(data, list) else [data]
    kinds = ToolKinds("tau_bench", options, path)
    kinds.use_domains_of(
        action["name"]
        for task in tasks
        if isinstance(task, dict) and isinstance(task.get("actions"), list)
        for action in task["actions"]
        if isinstance(action, dict) and isinstance(action.get("name"), str)
    )
    result = ImportResult(suite={})
    scenarios = []
    seen: set[str] = set()
    for index, raw in enumerate(tasks):
        where = f"[{index}]" if isinstance(data, list) else ""
        task = mapping(raw, path, where)
        sid = str(task.get("task_id", task.get("id", index)))
        if sid in seen:
            raise fail(path, where, f"task id {sid!r} appears twice")
        seen.add(sid)
        scenarios.append(_scenario(task, sid, where, path, kinds, result))
    result.notes.append(DB_NOTE)
    result.notes.append(
        "outputs: every output must appear in some answer the agent gave the user, lower-cased "
        "(spanscore case-folds: the same for everything but a few letters such as ß), with the "
        "answers' commas removed (an output that has a comma is never found, as in tau-bench)."
    )
    result.suite = {
        "name": f"tau-bench-{path.stem}",
        "description": f"tau-bench tasks imported from {path.name}",
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
    instruction = text(task.get("instruction"), path, f"{where}.instruction")
    gold: list[tuple[str, dict[str, Any]]] = []
    for i, raw in enumerate(listing(task.get("actions"), path, f"{where}.actions")):
        action = mapping(raw, path, f"{where}.actions[{i}]")
        name = text(action.get("name"), path, f"{where}.actions[{i}].name")
        kwargs = mapping(action.get("kwargs", {}), path, f"{where}.actions[{i}].kwargs")
        if name != RESPOND:
            gold.append((name, kwargs))
    outputs = listing(task.get("outputs"), path, f"{where}.outputs")
    if not all(isinstance(o, str) for o in outputs):
        raise fail(path, f"{where}.outputs", "expected a list of strings")
    db = db_writes(gold, kinds, path)
    assertions = [db]
    if outputs:
        assertions.append(communicated("outputs", outputs, intermediate=False))
    reads = sorted({name for name, _ in gold if name in db["ignore_tools"]})
    if reads:
        result.note(sid, f"gold read-only actions ({', '.join(reads)}) are free, as in tau-bench.")
    if any("," in o for o in outputs):
        result.note(sid, "an output with a comma is never found (tau-bench removes the commas "
                         "of the messages, not of the output).")  # fmt: skip
    result.users[sid] = user_definition(task)
    return with_user(scenario(sid, instruction, assertions), simulated_user(result.users[sid]))
