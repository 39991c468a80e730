"""Pairing expected calls with the calls made: optimal (a maximum-weight matching), ordered or
not, with parallel steps and optional or repeated calls; and the score, details and
explanation of a `tool_calls` assertion from the pairing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import orjson

from spanscore.evaluation.assertions.expected import CallMatcher, Item
from spanscore.evaluation.assertions.modes import MODES, Counts, MatchMode
from spanscore.evaluation.matching.pairing import (
    EXACT_WORK_LIMIT,
    fits_exactly,
    max_weight_matching,
)
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall

# --- pairing expected with actual --------------------------------------------------------------

_REQUIRED = 1_000_000.0  # matching a required slot beats any number of optional ones


_PAIR = 1_000.0  # one more pair beats better argument scores


@dataclass
class _Slot:
    item: Item
    required: bool
    repeats: bool = False  # stands for all of an unbounded item's optional slots (in order)


def _slots(items: Sequence[Item], table: WeightTable, *, ordered: bool) -> list[_Slot]:
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
    items: Sequence[Item], actual: Sequence[ToolCall], matcher: CallMatcher
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
    slots: Sequence[_Slot], actual: Sequence[ToolCall], matcher: CallMatcher, table: WeightTable
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
    slots: Sequence[_Slot], actual: Sequence[ToolCall], matcher: CallMatcher, table: WeightTable
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


def _canonical_key(name: str, arguments: Any, matcher: CallMatcher) -> tuple[str, bytes]:
    options = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    return matcher.key(name), orjson.dumps(arguments, option=options, default=str)


def _canonical_order(actual: Sequence[ToolCall], matcher: CallMatcher) -> list[int]:
    """Calls requested by one model response have no order among themselves: ordered modes
    see each such block sorted by (name, arguments). The trajectory's index of each call, in
    that order."""
    order: list[int] = []
    i = 0
    while i < len(actual):
        group = actual[i].parallel_group
        j = i + 1
        while group is not None and j < len(actual) and actual[j].parallel_group == group:
            j += 1
        block = range(i, j)
        if len(block) > 1:
            order += sorted(
                block, key=lambda k: _canonical_key(actual[k].name, actual[k].arguments, matcher)
            )
        else:
            order += block
        i = j
    return order


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


class CallsAssertion(Protocol):
    """What scoring the calls needs of the assertion (`ToolCallsAssertion`)."""

    @property
    def mode(self) -> str: ...

    @property
    def check_parallel(self) -> bool: ...

    def graded(self, value: float, passed: bool, **fields: Any) -> Score: ...


def score_calls(
    assertion: CallsAssertion,
    items: Sequence[Item],
    calls: Sequence[ToolCall],
    matcher: CallMatcher,
) -> Score:
    """Score the trajectory's `calls` by the assertion's row of `MODES`. The details record
    each verdict by position in `actual` (the calls in the order the mode saw them) and, in
    `actual_index`, where each of those calls is in the trajectory."""
    mode = MODES[assertion.mode]
    order = _canonical_order(calls, matcher) if mode.ordered else list(range(len(calls)))
    actual = [calls[k] for k in order]
    made = len(actual)
    table = _weight_table(items, actual, matcher)
    if mode.allow_list:
        allowed = [any(table[i.index][j] is not None for i in items) for j in range(made)]
        outside = [c.name for c, ok in zip(actual, allowed, strict=True) if not ok]
        counts = Counts(required=0, made=made, matched=sum(allowed), matched_required=0)
        why = f"{len(outside)} of {made} calls not allowed: {', '.join(outside)}"
        return assertion.graded(
            mode.value(counts),
            mode.passes(counts),
            explanation="every call allowed" if not outside else why,
            details={
                "mode": mode.name,
                "calls": made,
                "not_allowed": outside,
                "not_allowed_index": [order[j] for j in range(made) if not allowed[j]],
            },
        )
    slots = _slots(items, table, ordered=mode.ordered)
    pair = _ordered_pairing if mode.ordered else _unordered_pairing
    pairing = pair(slots, actual, matcher, table)
    parallel = _parallel_problems(pairing, actual) if assertion.check_parallel else []
    counts = Counts(pairing.required, made, pairing.matched, pairing.matched_required)
    value = mode.value(counts)
    passed = mode.passes(counts) and not parallel
    details = _pairing_details(mode, items, actual, pairing, matcher)
    details["parallel_problems"] = parallel
    details["actual_index"] = order
    return assertion.graded(
        value,
        passed,
        explanation=_explain(mode, pairing, parallel, details),
        details=details,
    )


def _pairing_details(
    mode: MatchMode,
    items: Sequence[Item],
    actual: Sequence[ToolCall],
    pairing: _Pairing,
    matcher: CallMatcher,
) -> dict[str, Any]:
    paired_items: dict[int, int] = {}
    for slot, _, _ in pairing.pairs:
        paired_items[slot.item.index] = paired_items.get(slot.item.index, 0) + 1
    used = {index for _, index, _ in pairing.pairs}
    claimed: set[int] = set()  # unpaired calls already named as out of order
    missing = []
    for item in items:
        count = paired_items.get(item.index, 0)
        if count < item.low:
            # In an ordered mode, a call that fits but could not be paired in order was made
            # out of order: say where, rather than that it was not made.
            misplaced = [
                i
                for i, call in enumerate(actual)
                if mode.ordered
                and i not in used
                and i not in claimed
                and matcher.weight(item.call, call) is not None
            ][: item.low - count]
            claimed.update(misplaced)
            near = [
                problem
                for call in actual
                if (result := matcher.compare(item.call, call)) is not None
                for problem in result.problems
            ]
            entry: dict[str, Any] = {"name": item.call.name, "expected": item.low, "made": count}
            if misplaced:
                entry["out_of_order"] = misplaced  # positions in `actual`
                entry["position"] = item.index  # in `expected`
            if near and not misplaced:
                entry["argument_problems"] = near[:5]
            missing.append(entry)
    return {
        "mode": mode.name,
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


def _explain(
    mode: MatchMode, pairing: _Pairing, parallel: list[str], details: dict[str, Any]
) -> str:
    parts = [
        f"{pairing.matched_required} of {pairing.required} expected calls made, "
        f"{pairing.matched} of {pairing.actual} calls matched"
    ]
    misplaced = {i for m in details["missing"] for i in m.get("out_of_order", [])}
    for m in details["missing"]:
        if m.get("out_of_order"):
            made = ", ".join(str(i + 1) for i in m["out_of_order"])
            parts.append(
                f"{m['name']} out of order: made as call {made} of {pairing.actual}, "
                f"expected as #{m['position'] + 1}"
            )
    missing = [m for m in details["missing"] if not m.get("out_of_order")]
    if missing:
        parts.append("missing " + ", ".join(m["name"] for m in missing))
        problems = [p for m in missing for p in m.get("argument_problems", [])]
        if problems:
            parts.append("arguments: " + "; ".join(problems[:3]))
    extra = [e for e in details["extra"] if e["index"] not in misplaced]
    if extra and not mode.extras_allowed:
        parts.append("extra " + ", ".join(e["name"] for e in extra))
    parts += parallel
    return "; ".join(parts)
