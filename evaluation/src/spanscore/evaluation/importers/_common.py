"""Small helpers the importers share."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from . import ImporterError


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


def scenario(sid: str, description: str | None, assertions: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid}
    if description:
        out["description"] = description
    out["assertions"] = assertions
    return out


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
