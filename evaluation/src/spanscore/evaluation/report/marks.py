"""Which tool calls each score is about: assertion details read back onto the trajectory.

The assertions record their verdicts by position (`details` of the `scores` rows):
`tool_calls` the pairs of expected item and actual call, the calls found extra and the expected
calls missing, by position in `actual` (the calls in the order its mode saw them: an ordered
mode sorts each parallel block), with `actual_index`, the trajectory's index of each;
`forbidden` and `order` the calls that broke the rule; `within` the calls not allowed
(`not_allowed_index`). The report only reads them: it knows nothing of any mode's rule.
Details stored before `actual_index` was recorded are mapped back through the names they
recorded (`positions`). A score whose details no longer fit the trajectory (it changed after
scoring) gets no marks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from spanscore.evaluation.assertions.modes import MODES
from spanscore.evaluation.report.schema import MarkDoc, MissingDoc
from spanscore.evaluation.trajectory.model import ToolCall


def _argument_key(call: ToolCall) -> bytes:
    options = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    return orjson.dumps(call.arguments, option=options, default=str)


def _blocks(calls: Sequence[ToolCall]) -> list[range]:
    """Runs of consecutive calls requested by one model response (single calls alone)."""
    out: list[range] = []
    i = 0
    while i < len(calls):
        group = calls[i].parallel_group
        j = i + 1
        while group is not None and j < len(calls) and calls[j].parallel_group == group:
            j += 1
        out.append(range(i, j))
        i = j
    return out


def positions(calls: Sequence[ToolCall], recorded: Sequence[Any], mode: str) -> list[int] | None:
    """For each position an assertion recorded (`recorded`: the call names in its order), the
    index of that call in `calls`; None when the names do not fit the trajectory. For details
    stored without `actual_index`: ordered modes sorted each parallel block by (name,
    arguments), and the block is mapped back through the names."""
    if len(recorded) != len(calls):
        return None
    known = MODES.get(mode)
    if known is None or not known.ordered:
        if any(str(r) != c.name for r, c in zip(recorded, calls, strict=True)):
            return None
        return list(range(len(calls)))
    out: list[int] = []
    for block in _blocks(calls):
        names = [str(n) for n in recorded[block.start : block.stop]]
        by_name: dict[str, list[int]] = {}
        for index in sorted(block, key=lambda k: _argument_key(calls[k])):
            by_name.setdefault(calls[index].name, []).append(index)
        for name in names:
            free = by_name.get(name)
            if not free:
                return None
            out.append(free.pop(0))
    return out


def recorded_positions(calls: Sequence[ToolCall], details: dict[str, Any]) -> list[int] | None:
    """The trajectory's index of each position of `details["actual"]`: as the assertion
    recorded it (`actual_index`), or, for details stored before it did, from the names.
    None when the details do not fit the trajectory."""
    recorded = details["actual"]
    where = details.get("actual_index")
    if not isinstance(where, list):
        return positions(calls, recorded, str(details.get("mode", "")))
    fits = (
        len(where) == len(recorded) == len(calls)
        and all(_position(at, len(calls)) for at in where)
        and len(set(where)) == len(where)
        and all(str(name) == calls[at].name for name, at in zip(recorded, where, strict=True))
    )
    return list(where) if fits else None


def _position(value: Any, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def _index(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and isinstance(value.get("index"), int):
        return int(value["index"])
    return None


def _out_of_order(details: dict[str, Any], expected: list[Any]) -> dict[int, str]:
    """The note of each call made out of order (by its position among the scored calls)."""
    notes: dict[int, str] = {}
    for item in details.get("missing") or []:
        if not isinstance(item, dict) or not isinstance(item.get("out_of_order"), list):
            continue
        e = item.get("position")
        where = (
            f", expected as #{e + 1} ({expected[e]})"
            if isinstance(e, int) and 0 <= e < len(expected)
            else ""
        )
        for at in item["out_of_order"]:
            if isinstance(at, int):
                notes[at] = f"out of order: made as call {at + 1}{where}"
    return notes


def score_marks(
    calls: Sequence[ToolCall], score_index: int, details: Any
) -> tuple[list[MarkDoc], list[MissingDoc]]:
    """The marks one score puts on the calls, and the expected calls it found missing."""
    marks: list[MarkDoc] = []
    missing: list[MissingDoc] = []
    if not isinstance(details, dict):
        return marks, missing
    if isinstance(details.get("pairs"), list) and isinstance(details.get("actual"), list):
        where = recorded_positions(calls, details)
        listed = details.get("expected")
        expected: list[Any] = listed if isinstance(listed, list) else []
        if where is not None:
            for pair in details["pairs"]:
                if not isinstance(pair, dict) or not isinstance(pair.get("actual"), int):
                    continue
                if not 0 <= pair["actual"] < len(where):
                    continue
                e = pair.get("expected")
                what = (
                    f"expected #{e + 1} ({expected[e]})"
                    if isinstance(e, int) and 0 <= e < len(expected)
                    else "an expected call"
                )
                weight = pair.get("score")
                partly = (
                    f", arguments match {weight:.2f}"
                    if isinstance(weight, int | float) and weight < 1
                    else ""
                )
                marks.append(
                    {
                        "call": where[pair["actual"]],
                        "score": score_index,
                        "kind": "matched",
                        "note": f"matches {what}{partly}",
                    }
                )
            misplaced = _out_of_order(details, expected)
            for extra in details.get("extra") or []:
                at = _index(extra)
                if at is not None and 0 <= at < len(where):
                    marks.append(
                        {
                            "call": where[at],
                            "score": score_index,
                            "kind": "extra",
                            "note": misplaced.get(at, "not expected here"),
                        }
                    )
        for item in details.get("missing") or []:
            if not isinstance(item, dict) or item.get("out_of_order"):
                continue  # made, out of order: its call says so
            note = f"expected {item.get('expected', 1)}, made {item.get('made', 0)}"
            problems = item.get("argument_problems")
            if isinstance(problems, list) and problems:
                note += "; closest calls: " + "; ".join(str(p) for p in problems[:3])
            missing.append({"score": score_index, "name": str(item.get("name")), "note": note})
    elif isinstance(details.get("violations"), list):
        for violation in details["violations"]:
            at = _index(violation)
            if at is not None and 0 <= at < len(calls):
                marks.append(
                    {
                        "call": at,
                        "score": score_index,
                        "kind": "violation",
                        "note": "breaks this rule",
                    }
                )
    elif isinstance(details.get("not_allowed_index"), list):
        fits = details.get("calls") == len(calls)  # else the trajectory changed after scoring
        for at in details["not_allowed_index"] if fits else []:
            if _position(at, len(calls)):
                marks.append(
                    {
                        "call": at,
                        "score": score_index,
                        "kind": "extra",
                        "note": "not allowed in this scenario",
                    }
                )
    elif isinstance(details.get("not_allowed"), list):  # stored before `not_allowed_index`
        names = {str(n) for n in details["not_allowed"]}
        for at, call in enumerate(calls):
            if call.name in names:
                marks.append(
                    {
                        "call": at,
                        "score": score_index,
                        "kind": "extra",
                        "note": "not allowed in this scenario",
                    }
                )
    return marks, missing
