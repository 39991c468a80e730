"""LangChain agentevals reference trajectories (OpenAI chat message lists).

A file holds one reference trajectory or several examples:
- a list of OpenAI messages (`role`, `content`, `tool_calls`);
- an object with `reference_outputs` (or `messages`: a list, or `{"messages": [...]}`) and the
  evaluator's options `trajectory_match_mode` (default `strict`), `tool_args_match_mode`
  (default `exact`) and `tool_args_match_overrides`; optional `id`;
- an object with `examples` (each with `id` and `reference_outputs`) and those options.

Modes: `strict` → `strict` (calls one assistant message asks for form one parallel step),
`unordered` → `unordered`, `superset` (the agent's calls include the reference's) →
`contains`, `subset` (the agent's calls are among the reference's) → `subset`.
Argument modes: `exact` → `exact`, `ignore` → names only, `superset` (the agent's arguments
include the reference's) → `partial`, `subset` (the agent's arguments are among the
reference's) → `superset`. Overrides per tool: a mode name → `tools: {name: {match: ...}}`;
a list of keys → only those arguments of that tool's reference calls, compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanscore.evaluation.suites.importers._common import (
    ImportResult,
    fail,
    has_nested_object,
    listing,
    mapping,
    repeated_names,
    scenario,
)

FORMAT = "agentevals"
MODES = {"strict": "strict", "unordered": "unordered", "superset": "contains", "subset": "subset"}
ARG_MODES = {"exact": "exact", "ignore": "ignore", "superset": "partial", "subset": "superset"}
OPTIONS = ("trajectory_match_mode", "tool_args_match_mode", "tool_args_match_overrides")


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and "role" in m for m in value)
    )


def _reference(obj: dict[str, Any]) -> Any:
    ref = obj.get("reference_outputs", obj.get("reference_trajectory", obj.get("messages")))
    if isinstance(ref, dict) and "messages" in ref:
        ref = ref["messages"]
    return ref


def detect(data: Any) -> bool:
    if _is_messages(data):
        return True
    if isinstance(data, dict):
        if isinstance(data.get("examples"), list):
            return all(
                isinstance(e, dict) and _is_messages(_reference(e)) for e in data["examples"]
            )
        return _is_messages(_reference(data))
    return False


def convert(data: Any, path: Path) -> ImportResult:
    result = ImportResult(suite={})
    if _is_messages(data):
        examples: list[dict[str, Any]] = [{"id": path.stem, "reference_outputs": data}]
        options: dict[str, Any] = {}
    else:
        document = mapping(data, path, "")
        options = {k: document[k] for k in OPTIONS if k in document}
        if "examples" in document:
            examples = [
                mapping(e, path, f"examples[{i}]")
                for i, e in enumerate(listing(document["examples"], path, "examples"))
            ]
        else:
            examples = [{"id": document.get("id", path.stem), **document}]
    scenarios = []
    for i, example in enumerate(examples):
        where = f"examples[{i}]" if len(examples) > 1 else ""
        sid = str(example.get("id") or example.get("example_id") or f"{path.stem}-{i + 1}")
        settings = {**options, **{k: example[k] for k in OPTIONS if k in example}}
        messages = listing(_reference(example), path, f"{where}.reference_outputs".lstrip("."))
        assertion = _assertion(sid, messages, settings, path, where, result)
        description = next(
            (
                m["content"]
                for m in messages
                if isinstance(m, dict)
                and m.get("role") in ("user", "human")
                and isinstance(m.get("content"), str)
            ),
            None,
        )
        scenarios.append(scenario(sid, description, [assertion]))
    result.suite = {
        "name": f"agentevals-{path.stem}",
        "description": f"agentevals reference trajectories imported from {path.name}",
        "scenarios": scenarios,
    }
    return result


def _steps(messages: list[Any], path: Path, where: str) -> list[list[tuple[str, Any]]]:
    steps: list[list[tuple[str, Any]]] = []
    for i, message in enumerate(messages):
        at = f"{where}[{i}]".lstrip(".")
        message = mapping(message, path, at)
        if message.get("role") not in ("assistant", "ai") or not message.get("tool_calls"):
            continue
        step = []
        for j, call in enumerate(listing(message["tool_calls"], path, f"{at}.tool_calls")):
            call = mapping(call, path, f"{at}.tool_calls[{j}]")
            function = call.get("function")
            if isinstance(function, dict):
                name, args = function.get("name"), function.get("arguments", "{}")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        raise fail(
                            path, f"{at}.tool_calls[{j}]", "arguments are not JSON"
                        ) from None
            else:
                name, args = call.get("name"), call.get("args", call.get("arguments", {}))
            if not isinstance(name, str) or not name:
                raise fail(path, f"{at}.tool_calls[{j}]", "a tool call needs a name")
            step.append((name, args))
        steps.append(step)
    return steps


def _assertion(
    sid: str,
    messages: list[Any],
    settings: dict[str, Any],
    path: Path,
    where: str,
    result: ImportResult,
) -> dict[str, Any]:
    mode_name = settings.get("trajectory_match_mode", "strict")
    args_name = settings.get("tool_args_match_mode", "exact")
    if mode_name not in MODES:
        raise fail(
            path, f"{where}.trajectory_match_mode".lstrip("."), f"unknown mode {mode_name!r}"
        )
    if args_name not in ARG_MODES:
        raise fail(path, f"{where}.tool_args_match_mode".lstrip("."), f"unknown mode {args_name!r}")
    overrides = mapping(settings.get("tool_args_match_overrides") or {}, path, "overrides")
    mode, arg_mode = MODES[mode_name], ARG_MODES[args_name]
    steps = _steps(messages, path, f"{where}.reference_outputs")
    tools: dict[str, Any] = {}
    key_overrides: dict[str, list[str]] = {}
    for tool, override in overrides.items():
        if isinstance(override, str) and override in ARG_MODES:
            tools[tool] = {"match": ARG_MODES[override]}
        elif isinstance(override, list) and all(isinstance(k, str) for k in override):
            key_overrides[tool] = override
            result.note(
                sid,
                f"{tool}: compared on {', '.join(override)} only; agentevals treats a key "
                "missing from both calls as equal, spanscore needs it present.",
            )
        else:
            raise fail(
                path, f"tool_args_match_overrides.{tool}", f"unsupported override {override!r}"
            )

    def call(name: str, args: Any) -> Any:
        if name in key_overrides:
            kept = {k: _lookup(args, k) for k in key_overrides[name]}
            return {"name": name, "arguments": _nest(kept), "match": "partial"}
        if arg_mode == "ignore" and name not in tools:
            return name
        return {"name": name, "arguments": args if isinstance(args, dict) else {}}

    expected: list[Any] = []
    for step in steps:
        for name, args in step:
            key_mode = tools.get(name, {}).get("match", arg_mode)
            if key_mode in ("partial", "superset") and has_nested_object(args):
                result.note(
                    sid,
                    f"{name}: agentevals' {_source_mode(key_mode)} compares top-level keys only "
                    f"and needs nested objects to be equal; spanscore's `{key_mode}` applies "
                    "to nested objects too.",
                )
        calls = [call(name, args) for name, args in step]
        if mode == "strict" and len(calls) > 1:
            expected.append(calls)
        else:
            expected.extend(calls)
    assertion: dict[str, Any] = {"type": "tool_calls", "mode": mode, "expected": expected}
    if arg_mode != "ignore":
        assertion["arguments"] = arg_mode
    if tools:
        assertion["tools"] = tools
    if mode == "strict":
        result.note(
            sid,
            "agentevals strict also compares the message list (same number of messages, same "
            "roles); spanscore compares the tool calls and their grouping into model responses.",
        )
    if mode_name in ("subset", "unordered") and args_name in ("subset", "superset"):
        result.note(
            sid,
            f"agentevals swaps the sides of argument mode {args_name} when it checks the "
            "reference against the output; spanscore applies the documented direction.",
        )
    names = [name for step in steps for name, _ in step]
    if repeated_names(names) and arg_mode in ("partial", "superset"):
        result.note(
            sid,
            "agentevals pairs repeated calls first-fit; spanscore pairs them optimally.",
        )
    return assertion


def _source_mode(ours: str) -> str:
    return next(theirs for theirs, mode in ARG_MODES.items() if mode == ours)


def _lookup(value: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out
