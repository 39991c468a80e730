"""The match modes of `tool_calls`, as data: one `MatchMode` row per mode in `MODES`.

A row says everything the rest of the product needs about a mode: whether the calls are paired
in order, what it lets pass (extra calls, left-out expected calls), its value and pass rule as
functions of the pairing's `Counts`, and the words the docs use for them. The assertion's
`mode` field, the published suite JSON Schema, the scorer, the `ToolCallsAssertion` docstring,
the report's marks and (checked by the tests) the docs' mode table all read this table, so a
new mode is one new row; the tests then say which docs lines to add.

The trap this avoids: mode names spelled out as string literals wherever a decision depends on
the mode (ordered or not, which formula, which rule, which calls the report marks), where
adding a mode meant finding every one of them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema


@dataclass(frozen=True)
class Counts:
    """What a mode's value and rule are computed from. With slots (every mode but an allow
    list): R required slots, A calls made, `matched` pairs, `matched_required` of them with a
    required slot. An allow list (`within`) counts the allowed calls as `matched`, R = 0."""

    required: int
    made: int
    matched: int
    matched_required: int

    @property
    def missing(self) -> int:
        """Required slots left empty."""
        return self.required - self.matched_required

    @property
    def extra(self) -> int:
        """Calls made left unpaired (not allowed, for an allow list)."""
        return self.made - self.matched

    @property
    def precision(self) -> float:
        return self.matched / self.made if self.made else 1.0

    @property
    def recall(self) -> float:
        return self.matched_required / self.required if self.required else 1.0


@dataclass(frozen=True)
class MatchMode:
    """One mode of `tool_calls`.

    `ordered`: calls pair in order (the best in-order alignment), and the calls of one model
    response are taken sorted by (name, arguments); else an optimal unordered matching.
    `allow_list`: no pairing at all: each call made is checked against every expected call
    (repeats allowed); `matched` counts the calls some expected call allows.
    `extras_allowed` / `omissions_allowed`: whether calls made beyond the expected ones, or
    expected calls left out, may still pass (and, for graded modes, still score 1); the tests
    check `passes` and `value` against them. `graded`: the pass rule is the value reaching the
    threshold (default 1). `rule` and `formula` are the docs' table cells; `summary` and
    `brief_formula` the docstring's (the suite schema's description of `tool_calls`)."""

    name: str
    ordered: bool
    extras_allowed: bool
    omissions_allowed: bool
    graded: bool
    value: Callable[[Counts], float]
    passes: Callable[[Counts], bool]
    rule: str
    formula: str
    summary: str
    brief_formula: str
    allow_list: bool = False


def _overlap(c: Counts) -> float:
    total = c.matched + c.extra + c.missing
    return c.matched / total if total else 1.0


def _f1(c: Counts) -> float:
    p, r = c.precision, c.recall
    return 2 * p * r / (p + r) if p + r else 0.0


def _exact(c: Counts) -> bool:
    return c.missing == 0 and c.extra == 0


def _graded(value: Callable[[Counts], float]) -> Callable[[Counts], bool]:
    # `threshold` (applied by `graded`) usually lowers this
    return lambda c: value(c) >= 1.0


def _precision(c: Counts) -> float:
    return c.precision


def _recall(c: Counts) -> float:
    return c.recall


_MODES = (
    MatchMode(
        "strict",
        ordered=True,
        extras_allowed=False,
        omissions_allowed=False,
        graded=False,
        value=_overlap,
        passes=_exact,
        rule="every call made is paired in order and no required slot is empty: same calls, "
        "same order, same count",
        formula="matched / (matched + extra + missing)",
        summary="same calls, same order, same count",
        brief_formula="matched / (matched+extra+missing)",
    ),
    MatchMode(
        "unordered",
        ordered=False,
        extras_allowed=False,
        omissions_allowed=False,
        graded=False,
        value=_overlap,
        passes=_exact,
        rule="every call made is paired and no required slot is empty (the same multiset)",
        formula="matched / (matched + extra + missing)",
        summary="same calls in any order (a multiset)",
        brief_formula="matched / (matched+extra+missing)",
    ),
    MatchMode(
        "contains",
        ordered=False,
        extras_allowed=True,
        omissions_allowed=False,
        graded=False,
        value=_recall,
        passes=lambda c: c.missing == 0,
        rule="no required slot is empty (every expected call made; extras allowed)",
        formula="matched required / R",
        summary="every expected call made; extras allowed",
        brief_formula="matched expected / expected",
    ),
    MatchMode(
        "subset",
        ordered=False,
        extras_allowed=False,
        omissions_allowed=True,
        graded=False,
        value=_precision,
        passes=lambda c: c.extra == 0,
        rule="every call made is paired with a distinct slot (omissions allowed, no repeats "
        "beyond `max`)",
        formula="matched / A",
        summary="every call made is a distinct expected one; omissions allowed",
        brief_formula="matched / made",
    ),
    MatchMode(
        "within",
        ordered=False,
        allow_list=True,
        extras_allowed=False,
        omissions_allowed=True,
        graded=False,
        value=_precision,
        passes=lambda c: c.extra == 0,
        rule="every call made satisfies some expected call (an allow-list; repeats allowed)",
        formula="allowed calls / A",
        summary="every call made is allowed by some expected call; repeats allowed",
        brief_formula="allowed / made",
    ),
    MatchMode(
        "in_order",
        ordered=True,
        extras_allowed=True,
        omissions_allowed=False,
        graded=False,
        value=_recall,
        passes=lambda c: c.missing == 0,
        rule="the required slots are filled in order; other calls may come between",
        formula="matched required (in order) / R",
        summary="expected calls made in order, gaps ok",
        brief_formula="matched in order / expected",
    ),
    MatchMode(
        "precision",
        ordered=False,
        extras_allowed=False,
        omissions_allowed=True,
        graded=True,
        value=_precision,
        passes=_graded(_precision),
        rule="value >= threshold (default 1)",
        formula="matched / A",
        summary="graded: score >= threshold (default 1)",
        brief_formula="matched / made",
    ),
    MatchMode(
        "recall",
        ordered=False,
        extras_allowed=True,
        omissions_allowed=False,
        graded=True,
        value=_recall,
        passes=_graded(_recall),
        rule="value >= threshold (default 1)",
        formula="matched required / R",
        summary="graded: score >= threshold (default 1)",
        brief_formula="matched expected / expected",
    ),
    MatchMode(
        "f1",
        ordered=False,
        extras_allowed=False,
        omissions_allowed=False,
        graded=True,
        value=_f1,
        passes=_graded(_f1),
        rule="value >= threshold (default 1)",
        formula="2·P·R / (P + R) of the two above",
        summary="graded: score >= threshold (default 1)",
        brief_formula="harmonic mean of the two above",
    ),
)

MODES: dict[str, MatchMode] = {m.name: m for m in _MODES}
"""Every mode by name, in the order the docs and the schema list them."""


def _mode_name(value: Any) -> str:
    if isinstance(value, str) and value in MODES:
        return value
    names = [repr(name) for name in MODES]
    expected = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
    # the wording pydantic gives a Literal, so a typo reads the same as any other choice
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


class _TableModeName:
    """A mode name, validated against `MODES` when the suite is loaded and listed from it in
    the JSON Schema (`enum`), so both follow the table as it is."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(_mode_name)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return {"enum": list(MODES), "type": "string"}


if TYPE_CHECKING:
    Mode = str
else:
    Mode = Annotated[str, _TableModeName]


def docstring_table() -> str:
    """The modes as `ToolCallsAssertion`'s docstring lists them (pass rule; score)."""
    lines = []
    for mode in MODES.values():
        summary = textwrap.wrap(mode.summary, 40) or [""]
        lines.append(f"    {mode.name:<12}{summary[0]:<42}{mode.brief_formula}".rstrip())
        lines += [f"    {'':<12}{more}" for more in summary[1:]]
    return "\n".join(lines)


def markdown_table() -> str:
    """The modes as docs/assertions.md tabulates them (passes when; value)."""
    rows = ["| mode | passes when | value |", "|---|---|---|"]
    rows += [f"| `{m.name}` | {m.rule} | {m.formula} |" for m in MODES.values()]
    return "\n".join(rows)
