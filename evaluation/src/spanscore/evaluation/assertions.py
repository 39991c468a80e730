"""Scenario assertions over a trajectory's tool calls and answers.

- `tool_calls`: the calls made against the calls expected, in one of nine modes, with
  optional calls, repetitions, parallel steps, per-tool argument rules and name normalisation.
- `forbidden`: calls that must never be made.
- `order`: "every call to B comes after a call to A" (verify before cancel).
- `goals`: a goal dependency graph of required calls and text goals (watsonx Orchestrate's
  ground truth shape), passing when every goal is met in an order its dependencies allow.
- `response`: checks of the final answer (keywords, pattern, similarity to an expected text).

Each gives one graded `Score` (value in [0, 1]) and a pass/fail by the rule documented on the
mode; docs/assertions.md has every rule and formula. Pairing of repeated calls is optimal.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, ClassVar, Literal

import orjson
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from .arguments import (
    ArgMode,
    ArgumentResult,
    ArgumentRule,
    match_arguments,
    text_similarity,
)
from .limits import check_pattern
from .pairing import EXACT_WORK_LIMIT, fits_exactly, max_weight_matching
from .scoring import AssertionBase, EvalContext, MetricRegistry, Score
from .trajectory import ToolCall, Trajectory

Mode = Literal[
    "strict", "unordered", "contains", "subset", "within", "in_order", "precision", "recall", "f1"
]
GRADED_MODES = ("precision", "recall", "f1")


@lru_cache(maxsize=4096)
def normalize_name(name: str) -> str:
    """Tool-name normalisation: case and the separators - _ . and spaces do not count."""
    return re.sub(r"[-_.\s]", "", name).casefold()


class ArgumentOverride(BaseModel):
    """Per-tool argument settings of an assertion (`tools: {get_order: {match: partial}}`)."""

    model_config = ConfigDict(extra="forbid")

    match: ArgMode | None = None
    rules: dict[str, ArgumentRule] = Field(default_factory=dict)


class ExpectedCall(BaseModel):
    """One expected tool call. In a suite, a bare tool name is enough (`- get_order`: the name
    only, arguments not compared)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    string_shorthand: ClassVar[dict[str, Any]] = {
        "type": "string",
        "description": "a tool name: the call, arguments not compared",
    }

    name: str = Field(validation_alias=AliasChoices("name", "tool"), description="tool name")
    arguments: dict[str, Any] | None = Field(
        None, description="expected arguments; absent: arguments are not compared"
    )
    match: ArgMode | None = Field(
        None,
        description="argument key sets: exact (default when arguments are given), partial "
        "(expected keys present, extras allowed), superset (no unexpected keys), ignore",
    )
    rules: dict[str, ArgumentRule] = Field(
        default_factory=dict, description="per-argument rules, by dot path"
    )
    optional: bool = Field(False, description="the call may be left out")
    min: int | None = Field(None, ge=0, description="fewest repetitions (default 1; optional: 0)")
    max: int | None = Field(
        None, ge=1, description="most repetitions (default: max(min, 1)); null: unbounded"
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _bounds(self) -> ExpectedCall:
        low, high = self.bounds
        if high is not None and low > high:
            raise ValueError(f"min ({low}) is more than max ({high})")
        if self.optional and self.min:
            raise ValueError("an optional call cannot have min >= 1")
        return self

    @property
    def bounds(self) -> tuple[int, int | None]:
        low = self.min if self.min is not None else (0 if self.optional else 1)
        if "max" in self.model_fields_set:
            return low, self.max
        return low, max(low, 1)


ExpectedStep = ExpectedCall | list[ExpectedCall]


@dataclass
class _Item:
    """An expected call as the matcher uses it: bounds resolved, group known."""

    call: ExpectedCall
    index: int
    group: int | None  # expected parallel step it belongs to
    low: int
    high: int | None


_NAMES_ONLY = ArgumentResult()  # no checks: passed, score 1


class _CallMatcher:
    """Whether an actual call satisfies an expected one, with the assertion's settings."""

    def __init__(
        self,
        default_mode: ArgMode,
        overrides: Mapping[str, ArgumentOverride],
        normalize: bool,
    ) -> None:
        self.default_mode = default_mode
        self.normalize = normalize
        self.overrides = {self.key(k): v for k, v in overrides.items()}
        self._cache: dict[tuple[int, int], ArgumentResult | None] = {}
        self._keys: dict[str, str] = {}
        self._settings: dict[int, tuple[ArgMode, dict[str, ArgumentRule]] | None] = {}

    def key(self, name: str) -> str:
        if not self.normalize:
            return name
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = normalize_name(name)
        return key

    def settings(self, expected: ExpectedCall) -> tuple[ArgMode, dict[str, ArgumentRule]] | None:
        """The key-set mode and rules that apply to an expected call; None: names only."""
        if id(expected) in self._settings:
            return self._settings[id(expected)]
        override = self.overrides.get(self.key(expected.name))
        rules = {**(override.rules if override else {}), **expected.rules}
        mode = expected.match or (override.match if override else None) or self.default_mode
        names_only = expected.arguments is None and not rules
        found = self._settings[id(expected)] = None if names_only else (mode, rules)
        return found

    def compare(self, expected: ExpectedCall, actual: ToolCall) -> ArgumentResult | None:
        """None when the names differ; else the argument comparison."""
        if self.key(expected.name) != self.key(actual.name):
            return None
        settings = self.settings(expected)
        if settings is None:
            return _NAMES_ONLY
        mode, rules = settings
        return match_arguments(expected.arguments, actual.arguments, mode=mode, rules=rules)

    def weight(self, expected: ExpectedCall, actual: ToolCall) -> float | None:
        """A pair's weight in [0, 1] when the actual call satisfies the expected one."""
        if self.key(expected.name) != self.key(actual.name):
            return None
        if self.settings(expected) is None:
            return 1.0
        key = (id(expected), id(actual))
        if key in self._cache:
            result = self._cache[key]
        else:
            result = self._cache[key] = self.compare(expected, actual)
        if result is None or not result.passed:
            return None
        return result.score


class ToolCallsAssertion(AssertionBase):
    """The calls made against the calls expected. Modes (pass rule; score):

    strict      same calls, same order, same count        matched / (matched+extra+missing)
    unordered   same calls in any order (a multiset)      matched / (matched+extra+missing)
    contains    every expected call made; extras allowed  matched expected / expected
    subset      every call made is a distinct expected    matched / made
                one; omissions allowed
    within      every call made is allowed by some        allowed / made
                expected call; repeats allowed
    in_order    expected calls made in order, gaps ok     matched in order / expected
    precision   graded: score >= threshold (default 1)    matched / made
    recall      graded: score >= threshold (default 1)    matched expected / expected
    f1          graded: score >= threshold (default 1)    harmonic mean of the two above
    """

    type: Literal["tool_calls"]
    mode: Mode = Field("strict", description="how the calls made are compared")
    expected: list[ExpectedStep] = Field(
        default_factory=list,
        description="expected calls, in order; a list inside the list is a parallel step "
        "(calls requested by the same model response, in any order)",
    )
    arguments: ArgMode = Field(
        "exact", description="argument key-set mode for expected calls that give arguments"
    )
    tools: dict[str, ArgumentOverride] = Field(
        default_factory=dict, description="per-tool argument settings (match, rules)"
    )
    normalize_names: bool = Field(
        False, description="compare tool names ignoring case and the separators - _ . space"
    )
    check_parallel: bool = Field(
        True, description="parallel steps must have been requested by one model response"
    )

    _prepared: list[_Item] | None = PrivateAttr(None)

    @field_validator("expected", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def may_judge(self, registry: MetricRegistry) -> bool:
        return _has_judged_rules(self._items(), self.tools)

    def _items(self) -> list[_Item]:
        items: list[_Item] = []
        for group, step in enumerate(self.expected):
            calls = step if isinstance(step, list) else [step]
            for call in calls:
                low, high = call.bounds
                items.append(
                    _Item(call, len(items), group if isinstance(step, list) else None, low, high)
                )
        return items

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        matcher = _CallMatcher(self.arguments, self.tools, self.normalize_names)
        actual = trajectory.tool_calls
        if self._prepared is None:  # the expectation does not change: prepare it once
            self._prepared = self._items()
        if self.mode in ("strict", "in_order"):
            actual = _canonical_parallel_blocks(actual, matcher)
        return _score_calls(self, self._prepared, actual, matcher)


def _has_judged_rules(items: Sequence[_Item], overrides: Mapping[str, ArgumentOverride]) -> bool:
    rules = [r for item in items for r in item.call.rules.values()]
    rules += [r for o in overrides.values() for r in o.rules.values()]
    return any(r.strategy == "judged" for r in rules)


# --- pairing expected with actual --------------------------------------------------------------

_REQUIRED = 1_000_000.0  # matching a required slot beats any number of optional ones
_PAIR = 1_000.0  # one more pair beats better argument scores


@dataclass
class _Slot:
    item: _Item
    required: bool
    repeats: bool = False  # stands for all of an unbounded item's optional slots (in order)


def _slots(items: Sequence[_Item], table: WeightTable, *, ordered: bool) -> list[_Slot]:
    slots = []
    for item in items:
        if item.high is None and ordered and item.group is None:
            # In order, an unbounded item's optional slots are one layer that pairs again and
            # again: linear in the calls, where one layer per possible call was quadratic.
            slots += [_Slot(item, True) for _ in range(item.low)]
            slots.append(_Slot(item, False, repeats=True))
            continue
        # Unbounded: as many slots as calls it could pair with (no more can pair).
        could = sum(1 for w in table[item.index] if w is not None)
        high = item.high if item.high is not None else max(item.low, could)
        slots += [_Slot(item, i < item.low) for i in range(max(high, item.low))]
    return slots


@dataclass
class _Pairing:
    pairs: list[tuple[_Slot, int, float]]  # (slot, actual index, argument score)
    required: int
    actual: int
    notes: list[str] = field(default_factory=list)  # where the pairing is not exact, and why

    @property
    def matched(self) -> int:
        return len(self.pairs)

    @cached_property
    def matched_required(self) -> int:
        return sum(1 for s, _, _ in self.pairs if s.required)

    @property
    def missing(self) -> int:
        return self.required - self.matched_required

    @property
    def extra(self) -> int:
        return self.actual - self.matched


WeightTable = dict[int, list[float | None]]  # expected item index -> weight per actual call


def _weight_table(
    items: Sequence[_Item], actual: Sequence[ToolCall], matcher: _CallMatcher
) -> WeightTable:
    """Every (expected item, actual call) weight, computed once: only same-name pairs are
    compared at all."""
    by_name: dict[str, list[int]] = {}
    for j, call in enumerate(actual):
        by_name.setdefault(matcher.key(call.name), []).append(j)
    table: WeightTable = {}
    for item in items:
        row: list[float | None] = [None] * len(actual)
        for j in by_name.get(matcher.key(item.call.name), ()):
            row[j] = matcher.weight(item.call, actual[j])
        table[item.index] = row
    return table


def _unordered_pairing(
    slots: Sequence[_Slot], actual: Sequence[ToolCall], matcher: _CallMatcher, table: WeightTable
) -> _Pairing:
    # Only calls of the same tool can pair: the matching splits into one small problem per
    # tool name, solved exactly each.
    groups: dict[str, tuple[list[int], list[int]]] = {}
    for r, slot in enumerate(slots):
        groups.setdefault(matcher.key(slot.item.call.name), ([], []))[0].append(r)
    for c, call in enumerate(actual):
        group = groups.get(matcher.key(call.name))
        if group is not None:
            group[1].append(c)
    pairs: list[tuple[_Slot, int, float]] = []
    notes: list[str] = []
    for name, (rows, cols) in groups.items():
        if not cols:
            continue
        if not fits_exactly(len(rows), len(cols)):
            notes.append(
                f"{len(rows)} expected against {len(cols)} {name} calls: paired greedily, "
                f"not optimally (over {EXACT_WORK_LIMIT:,} steps)"
            )
            pairs += _greedy_pairs([slots[r] for r in rows], cols, table)
            continue
        weights: list[list[float | None]] = []
        for r in rows:
            slot = slots[r]
            bonus = _PAIR + (_REQUIRED if slot.required else 0)
            row = table[slot.item.index]
            weights.append([None if (w := row[c]) is None else bonus + w for c in cols])
        for i, j in max_weight_matching(weights):
            pairs.append((slots[rows[i]], cols[j], (weights[i][j] or 0.0) % _PAIR))
    pairs.sort(key=lambda p: p[1])
    return _Pairing(pairs, sum(1 for s in slots if s.required), len(actual), notes)


def _greedy_pairs(
    slots: Sequence[_Slot], cols: Sequence[int], table: WeightTable
) -> list[tuple[_Slot, int, float]]:
    """Required slots first, then the optional ones; each takes the free call of highest
    weight its item can pair with. The slots of one item share its calls ranked once:
    O(c log c) per expected item, however many slots an unbounded item has."""
    ranked: dict[int, list[int]] = {}
    position: dict[int, int] = {}
    taken: set[int] = set()
    pairs = []
    for slot in sorted(slots, key=lambda s: not s.required):
        index = slot.item.index
        row = table[index]
        if index not in ranked:
            ranked[index] = sorted(
                (c for c in cols if row[c] is not None), key=lambda c: -(row[c] or 0.0)
            )
            position[index] = 0
        calls, k = ranked[index], position[index]
        while k < len(calls) and calls[k] in taken:
            k += 1
        position[index] = k
        if k < len(calls):
            taken.add(calls[k])
            pairs.append((slot, calls[k], row[calls[k]] or 0.0))
    return pairs


def _ordered_pairing(
    slots: Sequence[_Slot], actual: Sequence[ToolCall], matcher: _CallMatcher, table: WeightTable
) -> _Pairing:
    """The best in-order alignment (a weighted longest common subsequence): slots and actual
    calls may be skipped, pairs keep both orders, except that the slots of one expected
    parallel step pair with their calls in any order among themselves (however the calls
    were made: `check_parallel` judges that separately)."""
    m = len(actual)
    previous = [0.0] * (m + 1)
    layers: list[tuple[list[Any], list[_Slot]]] = []  # per layer: decisions, its slots
    notes: list[str] = []
    for group in _step_units(slots):
        if len(group) > 1:
            candidates = _step_candidates(group, m, table)
            if len(candidates) <= _STEP_CANDIDATE_LIMIT:
                row, decisions = _step_layer(group, previous, table, candidates)
                layers.append((decisions, group))
                previous = row
                continue
            names = ", ".join(s.item.call.name for s in group)
            notes.append(
                f"the parallel step {names} could pair with {len(candidates)} calls (over "
                f"{_STEP_CANDIDATE_LIMIT}): aligned in the order listed, not in any order"
            )
        for slot in group:
            row, decisions = _slot_layer(slot, previous, table)
            layers.append((decisions, [slot]))
            previous = row
    pairs: list[tuple[_Slot, int, float]] = []
    k = m
    for decisions, group in reversed(layers):
        while True:
            decision = decisions[k]
            if decision == "left":
                k -= 1
                continue
            if decision == "again":  # a repeating slot pairs once more, and stays
                slot = group[0]
                pairs.append((_Slot(slot.item, False), k - 1, table[slot.item.index][k - 1] or 0.0))
                k -= 1
                continue
            if decision == "pair":
                slot = group[0]
                pairs.append((slot, k - 1, table[slot.item.index][k - 1] or 0.0))
                k -= 1
            elif decision != "up":  # a window: (start, pairs)
                start, window_pairs = decision
                pairs += window_pairs
                k = start
            break
    pairs.sort(key=lambda p: p[1])
    return _Pairing(pairs, sum(1 for s in slots if s.required), m, notes)


def _step_units(slots: Sequence[_Slot]) -> list[list[_Slot]]:
    """Slots in expected order, one unit per slot, except one unit per parallel step."""
    units: list[list[_Slot]] = []
    for slot in slots:
        group = slot.item.group
        if group is not None and units and units[-1][0].item.group == group:
            units[-1].append(slot)
        else:
            units.append([slot])
    return units


def _bonus(slot: _Slot) -> float:
    return _PAIR + (_REQUIRED if slot.required else 0)


def _slot_layer(
    slot: _Slot, previous: list[float], table: WeightTable
) -> tuple[list[float], list[Any]]:
    """One sequential slot: the classic LCS row over the calls."""
    m = len(previous) - 1
    row = [0.0] * (m + 1)
    decisions: list[Any] = ["up"] * (m + 1)
    bonus, weights = _bonus(slot), table[slot.item.index]
    row[0] = previous[0]
    for j in range(1, m + 1):
        value, decision = previous[j], "up"
        if row[j - 1] > value:
            value, decision = row[j - 1], "left"
        w = weights[j - 1]
        if w is not None and previous[j - 1] + bonus + w > value:
            value, decision = previous[j - 1] + bonus + w, "pair"
        if slot.repeats and w is not None and row[j - 1] + bonus + w > value:
            value, decision = row[j - 1] + bonus + w, "again"
        row[j], decisions[j] = value, decision
    return row, decisions


# Calls a parallel step may pair with, above which its windows (quadratic in this number, each
# an optimal matching) are not searched: the step's calls are aligned in the order listed.
_STEP_CANDIDATE_LIMIT = 64


def _step_candidates(group: list[_Slot], m: int, table: WeightTable) -> list[int]:
    return [j for j in range(m) if any(table[s.item.index][j] is not None for s in group)]


def _step_layer(
    group: list[_Slot], previous: list[float], table: WeightTable, candidates: list[int]
) -> tuple[list[float], list[Any]]:
    """One parallel step: its slots take calls from one window of the timeline, in any
    order (an optimal matching inside the window). Only windows that start at a call some
    slot can take need trying: a later start gives the previous layers more room."""
    m = len(previous) - 1
    ending: dict[int, tuple[float, Any]] = {}  # window end (exclusive) -> best (value, choice)
    for t, first in enumerate(candidates):
        for last in candidates[t:]:
            cols = [c for c in candidates if first <= c <= last]
            weights = [
                [None if (w := table[s.item.index][c]) is None else _bonus(s) + w for c in cols]
                for s in group
            ]
            matching = max_weight_matching(weights)
            value = previous[first] + sum(weights[r][c] or 0.0 for r, c in matching)
            end = last + 1
            if end not in ending or value > ending[end][0]:
                window = [
                    (group[r], cols[c], table[group[r].item.index][cols[c]] or 0.0)
                    for r, c in matching
                ]
                ending[end] = (value, (first, window))
    row = [0.0] * (m + 1)
    decisions: list[Any] = ["up"] * (m + 1)
    row[0] = previous[0]
    for k in range(1, m + 1):
        value, decision = previous[k], "up"
        if row[k - 1] > value:
            value, decision = row[k - 1], "left"
        if k in ending and ending[k][0] > value:
            value, decision = ending[k]
        row[k], decisions[k] = value, decision
    return row, decisions


def _canonical_key(name: str, arguments: Any, matcher: _CallMatcher) -> tuple[str, bytes]:
    options = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    return matcher.key(name), orjson.dumps(arguments, option=options, default=str)


def _canonical_parallel_blocks(actual: list[ToolCall], matcher: _CallMatcher) -> list[ToolCall]:
    """Calls requested by one model response have no order among themselves: ordered modes
    see each such block sorted by (name, arguments)."""
    ordered: list[ToolCall] = []
    i = 0
    while i < len(actual):
        group = actual[i].parallel_group
        j = i + 1
        while group is not None and j < len(actual) and actual[j].parallel_group == group:
            j += 1
        block = actual[i:j]
        if len(block) > 1:
            block = sorted(block, key=lambda c: _canonical_key(c.name, c.arguments, matcher))
        ordered += block
        i = j
    return ordered


def _parallel_problems(pairing: _Pairing, actual: Sequence[ToolCall]) -> list[str]:
    by_group: dict[int, list[tuple[_Slot, int]]] = {}
    for slot, index, _ in pairing.pairs:
        if slot.item.group is not None:
            by_group.setdefault(slot.item.group, []).append((slot, index))
    problems = []
    for members in by_group.values():
        groups = {actual[index].parallel_group for _, index in members}
        if len(members) > 1 and (len(groups) != 1 or None in groups):
            names = ", ".join(sorted(actual[i].name for _, i in members))
            problems.append(f"{names} were expected in parallel (one model response)")
    return problems


def _score_calls(
    assertion: ToolCallsAssertion,
    items: Sequence[_Item],
    actual: Sequence[ToolCall],
    matcher: _CallMatcher,
) -> Score:
    mode = assertion.mode
    made = len(actual)
    table = _weight_table(items, actual, matcher)
    if mode == "within":
        allowed = [any(table[i.index][j] is not None for i in items) for j in range(made)]
        outside = [c.name for c, ok in zip(actual, allowed, strict=True) if not ok]
        value = sum(allowed) / made if made else 1.0
        why = f"{len(outside)} of {made} calls not allowed: {', '.join(outside)}"
        return assertion.graded(
            value,
            not outside,
            explanation="every call allowed" if not outside else why,
            details={"mode": mode, "calls": made, "not_allowed": outside},
        )
    ordered = mode in ("strict", "in_order")
    slots = _slots(items, table, ordered=ordered)
    pairing = (_ordered_pairing if ordered else _unordered_pairing)(slots, actual, matcher, table)
    parallel = _parallel_problems(pairing, actual) if assertion.check_parallel else []
    required, matched, missing, extra = (
        pairing.required,
        pairing.matched,
        pairing.missing,
        pairing.extra,
    )
    precision = matched / made if made else 1.0
    recall = pairing.matched_required / required if required else 1.0
    if mode in ("strict", "unordered"):
        total = matched + extra + missing
        value = matched / total if total else 1.0
        passed = missing == 0 and extra == 0
    elif mode in ("contains", "in_order", "recall"):
        value, passed = recall, missing == 0
    elif mode in ("subset", "precision"):
        value, passed = precision, extra == 0
    else:  # f1
        value = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        passed = value >= 1.0
    if mode in GRADED_MODES:
        passed = value >= 1.0  # `threshold` (applied by `graded`) usually lowers this
    passed = passed and not parallel
    details = _pairing_details(mode, items, actual, pairing, matcher)
    details["parallel_problems"] = parallel
    return assertion.graded(
        value,
        passed,
        explanation=_explain(mode, pairing, parallel, details),
        details=details,
    )


def _pairing_details(
    mode: str,
    items: Sequence[_Item],
    actual: Sequence[ToolCall],
    pairing: _Pairing,
    matcher: _CallMatcher,
) -> dict[str, Any]:
    paired_items: dict[int, int] = {}
    for slot, _, _ in pairing.pairs:
        paired_items[slot.item.index] = paired_items.get(slot.item.index, 0) + 1
    used = {index for _, index, _ in pairing.pairs}
    missing = []
    for item in items:
        count = paired_items.get(item.index, 0)
        if count < item.low:
            near = [
                problem
                for call in actual
                if (result := matcher.compare(item.call, call)) is not None
                for problem in result.problems
            ]
            entry: dict[str, Any] = {"name": item.call.name, "expected": item.low, "made": count}
            if near:
                entry["argument_problems"] = near[:5]
            missing.append(entry)
    return {
        "mode": mode,
        "expected": [i.call.name for i in items],
        "actual": [c.name for c in actual],
        "pairs": [
            {"expected": s.item.index, "actual": index, "score": round(w, 6)}
            for s, index, w in pairing.pairs
        ],
        "missing": missing,
        "extra": [{"index": i, "name": c.name} for i, c in enumerate(actual) if i not in used],
        **({"notes": pairing.notes} if pairing.notes else {}),
    }


def _explain(mode: str, pairing: _Pairing, parallel: list[str], details: dict[str, Any]) -> str:
    parts = [
        f"{pairing.matched_required} of {pairing.required} expected calls made, "
        f"{pairing.matched} of {pairing.actual} calls matched"
    ]
    if details["missing"]:
        missing = details["missing"]
        parts.append("missing " + ", ".join(m["name"] for m in missing))
        problems = [p for m in missing for p in m.get("argument_problems", [])]
        if problems:
            parts.append("arguments: " + "; ".join(problems[:3]))
    if pairing.extra and mode not in ("contains", "in_order", "recall"):
        parts.append("extra " + ", ".join(e["name"] for e in details["extra"]))
    parts += parallel
    return "; ".join(parts)


# --- forbidden calls and ordering constraints --------------------------------------------------


class ForbiddenCallsAssertion(AssertionBase):
    """Calls that must never be made (by name, optionally with arguments: `match` defaults to
    partial here, so `{name: cancel_order, arguments: {order_id: X}}` forbids cancelling X).
    Value 1 when none was made, else 0."""

    type: Literal["forbidden"]
    calls: list[ExpectedCall] = Field(description="calls that must not be made")
    normalize_names: bool = False

    def may_judge(self, registry: MetricRegistry) -> bool:
        return _has_judged_rules([_Item(c, i, None, 1, 1) for i, c in enumerate(self.calls)], {})

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        matcher = _CallMatcher("partial", {}, self.normalize_names)
        made = []
        for index, call in enumerate(trajectory.tool_calls):
            if any(matcher.weight(f, call) is not None for f in self.calls):
                made.append({"index": index, "name": call.name, "arguments": call.arguments})
        names = ", ".join(m["name"] for m in made)
        return self.graded(
            0.0 if made else 1.0,
            not made,
            explanation=f"forbidden call(s) made: {names}" if made else "no forbidden call",
            details={"violations": made},
        )


class OrderAssertion(AssertionBase):
    """Every call to `after` comes after a call to `before` (with `require_success`: a call
    that did not fail). Score: the fraction of `after` calls that respect it (1 when none)."""

    type: Literal["order"]
    before: str = Field(description="tool that must come first")
    after: str = Field(description="tool that may only come after it")
    require_success: bool = Field(False, description="only a successful `before` call counts")
    normalize_names: bool = False

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        key = normalize_name if self.normalize_names else (lambda n: n)
        before, after = key(self.before), key(self.after)
        seen_before = False
        total = ok = 0
        violations = []
        for index, call in enumerate(trajectory.tool_calls):
            name = key(call.name)
            if name == after:
                total += 1
                if seen_before:
                    ok += 1
                else:
                    violations.append(index)
            if name == before and (call.error is None or not self.require_success):
                seen_before = True
        what = f"{self.after} after {'a successful ' if self.require_success else ''}"
        explanation = (
            f"every {what}{self.before}"
            if not violations
            else f"{len(violations)} of {total} {self.after} call(s) before any {self.before}"
        )
        return self.graded(
            ok / total if total else 1.0,
            not violations,
            explanation=explanation,
            details={"violations": violations, "checked": total},
        )


# --- goal dependency graphs --------------------------------------------------------------------

WatsonxArgMatch = Literal["strict", "fuzzy", "ignore", "optional"]


class Goal(BaseModel):
    """One goal: a tool call (`tool_call`) or a text answer (`text`), as in watsonx
    Orchestrate's `goal_details`."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tool_call", "text"]
    name: str
    tool_name: str | None = None
    args: dict[str, Any] | None = None
    arg_matching: dict[str, WatsonxArgMatch | ArgumentRule] = Field(
        default_factory=dict,
        description="per argument: strict (default), fuzzy (similarity), ignore, optional, or "
        "a spanscore rule",
    )
    match: ArgMode = Field("exact", description="argument key sets (watsonx: exact)")
    response: str | None = None
    keywords: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tool_named(self) -> Goal:
        if self.type == "tool_call" and not self.tool_name:
            raise ValueError("a tool_call goal needs tool_name")
        return self

    def rules(self, similarity_threshold: float) -> dict[str, ArgumentRule]:
        rules = {}
        for key, how in self.arg_matching.items():
            if isinstance(how, ArgumentRule):
                rules[key] = how
            elif how == "fuzzy":
                rules[key] = ArgumentRule(strategy="similarity", threshold=similarity_threshold)
            elif how != "strict":
                rules[key] = ArgumentRule(strategy=how)
        return rules


# Steps the goals search may take per conversation (each a goal tried at one point): far more
# than any realistic goal graph needs; past it the best placement found so far is kept.
_SEARCH_LIMIT = 100_000


class GoalsAssertion(AssertionBase):
    """A goal dependency graph: `goals` maps a goal to the goals that depend on it. Passes
    (Journey Success) when every goal is met and each after the goals it depends on. Score: the
    fraction of goals met in order."""

    type: Literal["goals"]
    goals: dict[str, list[str]] = Field(
        default_factory=dict, description="goal -> goals that depend on it"
    )
    goal_details: list[Goal]
    similarity_threshold: float = Field(0.8, ge=0, le=1, description="for fuzzy arguments")
    normalize_names: bool = False
    _expected: dict[str, ExpectedCall] = PrivateAttr(default_factory=dict)
    _plan: list[tuple[Goal, list[str]]] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _graph(self) -> GoalsAssertion:
        names = [g.name for g in self.goal_details]
        if len(set(names)) != len(names):
            raise ValueError("goal names in goal_details must be unique")
        known = set(names)
        for goal, dependents in self.goals.items():
            for name in (goal, *dependents):
                if name not in known:
                    raise ValueError(f"goal {name!r} is not in goal_details")
        self._order()  # raises on a cycle
        return self

    def _order(self) -> list[str]:
        """Goals in an order their dependencies allow (Kahn; ties in goal_details order)."""
        needs: dict[str, set[str]] = {g.name: set() for g in self.goal_details}
        for goal, dependents in self.goals.items():
            for dependent in dependents:
                needs[dependent].add(goal)
        order: list[str] = []
        ready = [g.name for g in self.goal_details if not needs[g.name]]
        while ready:
            name = ready.pop(0)
            order.append(name)
            for other in self.goal_details:
                if name in needs[other.name]:
                    needs[other.name].discard(name)
                    if not needs[other.name] and other.name not in order + ready:
                        ready.append(other.name)
        if len(order) != len(needs):
            cycle = sorted(set(needs) - set(order))
            raise ValueError(f"the goal graph has a cycle through {', '.join(cycle)}")
        return order

    def may_judge(self, registry: MetricRegistry) -> bool:
        rules = [r for g in self.goal_details for r in g.rules(self.similarity_threshold).values()]
        return any(r.strategy == "judged" for r in rules)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        # One timeline of tool calls and answers, in order.
        timeline: list[tuple[str, Any]] = []
        for turn in trajectory.turns:
            for call in turn.tool_calls:
                timeline.append(("call", call))
            if turn.final_response is not None:
                timeline.append(("text", turn.final_response))
        if self._plan is None:  # the graph does not change: work it out once
            prerequisites: dict[str, list[str]] = {g.name: [] for g in self.goal_details}
            for source, dependents in self.goals.items():
                for dependent in dependents:
                    prerequisites[dependent].append(source)
            by_name = {g.name: g for g in self.goal_details}
            self._plan = [(by_name[n], prerequisites[n]) for n in self._order()]
        matcher = _CallMatcher("exact", {}, self.normalize_names)
        placed = self._best_placement(timeline, matcher)
        report: dict[str, dict[str, Any]] = {}
        for goal, needs in self._plan:
            name = goal.name
            if name in placed:
                report[name] = {"met": True, "at": placed[name]}
                continue
            blocked = [p for p in needs if p not in placed]
            earliest = max((placed[p] for p in needs if p in placed), default=-1)
            found, why = self._place(goal, timeline, set(), earliest, matcher)
            if found is None:
                reason = why
            elif blocked:
                reason = f"depends on unmet {', '.join(blocked)}"
            else:
                reason = f"each {goal.tool_name} call that fits it meets another goal"
            report[name] = {"met": False, "reason": reason}
        tool_goals = [g for g in self.goal_details if g.type == "tool_call"]
        calls = sum(1 for kind, _ in timeline if kind == "call")
        met_calls = sum(1 for g in tool_goals if report[g.name]["met"])
        met = sum(1 for r in report.values() if r["met"])
        failed = [n for n, r in report.items() if not r["met"]]
        explanation = (
            "journey success: every goal met in order"
            if not failed
            else "; ".join(f"{n}: {report[n]['reason']}" for n in failed)
        )
        return self.graded(
            met / len(report) if report else 1.0,
            not failed,
            explanation=explanation,
            details={
                "goals": report,
                "failed": failed,
                "tool_call_precision": met_calls / calls if calls else 1.0,
                "tool_call_recall": met_calls / len(tool_goals) if tool_goals else 1.0,
            },
        )

    def _best_placement(
        self, timeline: Sequence[tuple[str, Any]], matcher: _CallMatcher
    ) -> dict[str, int]:
        """Where each met goal is met, for the most goals met: each tool call meets at most one
        goal and every goal comes after the goals it depends on. An exact branch and bound
        over the goals in dependency order, earliest placements first (so the first solution
        is the greedy one and ties keep it); it stops at a solution meeting every goal, or
        after `_SEARCH_LIMIT` steps with the best found so far."""
        assert self._plan is not None
        plan = self._plan
        matches = {goal.name: self._matches(goal, timeline, matcher) for goal, _ in plan}
        total = len(plan)
        best: list[Any] = [-1, {}]
        placed: dict[str, int] = {}
        used: set[int] = set()
        steps = [0]

        def search(k: int, count: int) -> None:
            steps[0] += 1
            if count + (total - k) <= best[0]:
                return
            if k == total:
                best[0], best[1] = count, dict(placed)
                return
            goal, needs = plan[k]
            if all(p in placed for p in needs):
                earliest = max((placed[p] for p in needs), default=-1)
                found = matches[goal.name]
                # Lazily, from the first point after `earliest`: a step costs the goals
                # skipped over (at most one per goal used), not the conversation's length.
                options: Iterator[int] = (
                    found[x]
                    for x in range(bisect.bisect_right(found, earliest), len(found))
                    if found[x] not in used
                )
                if goal.type == "text":
                    options = itertools.islice(options, 1)  # not used up: the earliest is best
                for index in options:
                    placed[goal.name] = index
                    if goal.type == "tool_call":
                        used.add(index)
                    search(k + 1, count + 1)
                    del placed[goal.name]
                    used.discard(index)
                    if best[0] == total or steps[0] > _SEARCH_LIMIT:
                        return
            search(k + 1, count)

        search(0, 0)
        return dict(best[1])

    def _matches(
        self, goal: Goal, timeline: Sequence[tuple[str, Any]], matcher: _CallMatcher
    ) -> list[int]:
        """Every point of the timeline that meets the goal, ignoring order and use."""
        if goal.type == "text":
            return [
                index
                for index, (kind, text) in enumerate(timeline)
                if kind == "text"
                and all(k.casefold() in str(text).casefold() for k in goal.keywords)
            ]
        expected = self._expected_call(goal)
        found = []
        for index, (kind, call) in enumerate(timeline):
            if kind == "call":
                result = matcher.compare(expected, call)
                if result is not None and result.passed:
                    found.append(index)
        return found

    def _expected_call(self, goal: Goal) -> ExpectedCall:
        expected = self._expected.get(goal.name)
        if expected is None:  # built once per goal, not per conversation
            expected = self._expected[goal.name] = ExpectedCall(
                name=goal.tool_name or "",
                arguments=goal.args,
                match=goal.match,
                rules=goal.rules(self.similarity_threshold),
            )
        return expected

    def _place(
        self,
        goal: Goal,
        timeline: Sequence[tuple[str, Any]],
        used: set[int],
        after: int,
        matcher: _CallMatcher,
    ) -> tuple[int | None, str]:
        """The earliest point after `after` that meets the goal, or why none does."""
        if goal.type == "text":
            best = 0.0
            for index, (kind, text) in enumerate(timeline):
                if kind != "text" or index <= after:
                    continue
                lowered = str(text).casefold()
                if all(k.casefold() in lowered for k in goal.keywords):
                    return index, ""
                if goal.response:
                    best = max(best, text_similarity(goal.response, str(text)))
            wanted = ", ".join(goal.keywords) or "an answer"
            return None, f"no answer after its dependencies contains {wanted}"
        expected = self._expected_call(goal)
        problems: list[str] = []
        earlier = False
        for index, (kind, call) in enumerate(timeline):
            if kind != "call" or index in used:
                continue
            result = matcher.compare(expected, call)
            if result is None:
                continue
            if not result.passed:
                problems += result.problems
            elif index <= after:
                earlier = True
            else:
                return index, ""
        if earlier:
            return None, f"{goal.tool_name} was called before the goals it depends on"
        if problems:
            return None, f"{goal.tool_name} arguments differ: " + "; ".join(problems[:3])
        return None, f"{goal.tool_name} was not called"


# --- the final answer --------------------------------------------------------------------------


class ResponseAssertion(AssertionBase):
    """Checks of the final answer (the last turn's). Score: the fraction of checks that pass;
    passes when all do."""

    type: Literal["response"]
    keywords: list[str] = Field(default_factory=list, description="all must appear (any case)")
    any_keywords: list[str] = Field(default_factory=list, description="at least one must appear")
    forbidden_keywords: list[str] = Field(default_factory=list, description="none may appear")
    pattern: str | None = Field(None, description="regular expression searched in the answer")
    expected: str | None = Field(None, description="reference answer, compared by similarity")
    similarity_threshold: float = Field(0.8, ge=0, le=1)
    every_turn: bool = Field(False, description="check every turn's answer, not only the last")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            check_pattern(pattern)
        return pattern

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if self.every_turn:
            answers = [t.final_response for t in trajectory.turns]
        else:
            answers = [trajectory.final_response]
        checks: list[tuple[str, bool]] = []
        for answer in answers:
            checks += self._checks(answer or "")
        failed = [name for name, ok in checks if not ok]
        value = sum(ok for _, ok in checks) / len(checks) if checks else 1.0
        return self.graded(
            value,
            not failed,
            explanation="answer passes every check" if not failed else "; ".join(failed),
            details={"checks": [{"check": n, "passed": ok} for n, ok in checks]},
        )

    def _checks(self, answer: str) -> list[tuple[str, bool]]:
        lowered = answer.casefold()
        checks = [(f"contains {k!r}", k.casefold() in lowered) for k in self.keywords]
        if self.any_keywords:
            found = any(k.casefold() in lowered for k in self.any_keywords)
            checks.append((f"contains one of {self.any_keywords}", found))
        checks += [
            (f"does not contain {k!r}", k.casefold() not in lowered)
            for k in self.forbidden_keywords
        ]
        if self.pattern is not None:
            checks.append(
                (f"matches /{self.pattern}/", re.search(self.pattern, answer) is not None)
            )
        if self.expected is not None:
            similarity = text_similarity(self.expected, answer)
            checks.append(
                (
                    f"similar to the reference ({similarity:.2f} >= {self.similarity_threshold:g})",
                    similarity >= self.similarity_threshold,
                )
            )
        return checks
