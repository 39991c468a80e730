"""Small helpers the importers share."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ImporterError(ValueError):
    """The file is not a valid file of the format (the message says where and why)."""


@dataclass
class ImportResult:
    """An imported suite (a mapping `load_suite` validates) and what differs from the source."""

    suite: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    scenario_notes: dict[str, list[str]] = field(default_factory=dict)
    format: str = ""
    source: str = ""
    dropped: list[str] = field(default_factory=list)  # what the suite does not score
    # The simulated user of each scenario, as the source defines it (tau-bench's instruction,
    # tau2-bench's user_scenario): scenario id -> persona and instructions. Not scored.
    users: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, scenario_id: str, text: str) -> None:
        notes = self.scenario_notes.setdefault(scenario_id, [])
        if text not in notes:
            notes.append(text)

    def drop(self, scenario_id: str, text: str) -> None:
        """Note something of the source the suite does not score: a run with the native file
        as its suite warns about it (and fails in strict mode)."""
        self.note(scenario_id, text)
        self.dropped.append(f"{scenario_id}: {text}")


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImporterError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as json_error:
        if path.suffix.lower() == ".json":
            raise ImporterError(
                f"{path}:{json_error.lineno}: invalid JSON: {json_error.msg}"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ImporterError(f"{path}: invalid YAML: {exc}") from None


def fail(path: Path, where: str, message: str) -> ImporterError:
    return ImporterError(f"{path}: {where}: {message}" if where else f"{path}: {message}")


def mapping(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(path, where, f"expected an object, got {type(value).__name__}")
    return value


def listing(value: Any, path: Path, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise fail(path, where, f"expected a list, got {type(value).__name__}")
    return value


def text(value: Any, path: Path, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise fail(path, where, "expected a non-empty string")
    return value


def scenario(
    sid: str,
    description: str | None,
    assertions: list[dict[str, Any]],
    user: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid}
    if description:
        out["description"] = description
    if user:
        out["user"] = user
    out["assertions"] = assertions
    return out


def user_block(**fields: Any) -> dict[str, Any] | None:
    """A scenario's `user:` block from a native file's user fields: the non-empty ones; None
    without a goal (a user with no goal cannot be simulated)."""
    kept = {k: v for k, v in fields.items() if v not in (None, "", [])}
    return kept if kept.get("goal") else None


def expected_call(name: str, arguments: Any, match: str | None) -> Any:
    """An expected call: the bare name when arguments are not compared."""
    if match is None or match == "ignore":
        return name
    return {"name": name, "arguments": arguments if arguments is not None else {}, "match": match}


def repeated_names(names: list[str]) -> list[str]:
    return sorted(name for name, count in Counter(names).items() if count > 1)


def has_nested_object(arguments: Any) -> bool:
    return isinstance(arguments, dict) and any(isinstance(v, dict) for v in arguments.values())


def has_bool_or_float(arguments: Any) -> bool:
    if isinstance(arguments, dict):
        return any(has_bool_or_float(v) for v in arguments.values())
    if isinstance(arguments, list):
        return any(has_bool_or_float(v) for v in arguments)
    return isinstance(arguments, bool | float)
