"""Reading the judge's answers: the schema asked for (strict structured output where the
endpoint has it, else in the prompt) and tolerant parsing of what comes back (code fences,
text around the object)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import orjson

from spanscore.evaluation.matching.schema_check import quick_check

# --- parsing -------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json_answer(text: str) -> Any:
    """The JSON object in an answer: the whole text, else a fenced block, else the span from
    the first `{` to the last `}`. Raises ValueError when there is none."""
    try:  # nearly every answer: the whole text
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        if isinstance(value, dict):
            return value
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            value = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    shown = text.strip().replace("\n", " ")
    raise ValueError(f"no JSON object in the answer: {shown[:120]!r}")


def schema_instruction(name: str, schema: Mapping[str, Any]) -> str:
    """What the prompt says when the endpoint cannot enforce the schema itself."""
    return (
        f"Answer with one JSON object only (no prose, no code fence), named {name}, valid "
        f"against this JSON Schema:\n{orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()}"
    )


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema made acceptable to strict structured output: every object closed and
    every property required (pydantic's schemas leave both open). Read-only result: the same
    few schemas are converted once."""
    return strict_and_check(schema)[0]


# The schema objects of a run's requests are few and long-lived, and each request's answer is
# checked against its schema: by identity first (the entry keeps the schema alive, so its id
# is not reused), so that a call costs neither encoding it nor a full check of the answer.
_BY_IDENTITY: dict[int, tuple[Mapping[str, Any], dict[str, Any], Any]] = {}


def strict_and_check(
    schema: Mapping[str, Any],
) -> tuple[dict[str, Any], Callable[[Any], bool] | None]:
    entry = _BY_IDENTITY.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_BY_IDENTITY) >= 1024:
            _BY_IDENTITY.clear()
        strict = _strict(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
        entry = _BY_IDENTITY[id(schema)] = (schema, strict, quick_check(strict))
    return entry[1], entry[2]


@lru_cache(maxsize=256)
def _strict(encoded: bytes) -> dict[str, Any]:
    schema = orjson.loads(encoded)

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: fix(v) for k, v in node.items() if k not in ("title", "default")}
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            return node
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    fixed: dict[str, Any] = fix(dict(schema))
    return fixed
