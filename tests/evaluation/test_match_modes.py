"""The table of match modes (`assertions.modes.MODES`) is the one place a mode is defined: each
row's value and pass rule on a table of counts, its flags agreeing with its rule, and a new row
accepted by the suite loader and the schema and scored, with nothing else changed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from spanscore.evaluation.assertions.modes import (
    MODES,
    Counts,
    MatchMode,
    docstring_table,
    markdown_table,
)
from spanscore.evaluation.suites.load import SuiteError, load_suite, suite_json_schema
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn


def counts(required: int, made: int, matched: int, matched_required: int) -> Counts:
    return Counts(required=required, made=made, matched=matched, matched_required=matched_required)


PERFECT = counts(2, 2, 2, 2)
ONE_EXTRA = counts(2, 3, 2, 2)  # both expected calls made, and one more
ONE_MISSING = counts(2, 1, 1, 1)  # one of two expected calls made, nothing else
BOTH = counts(2, 2, 1, 1)  # one expected call made, one call made that pairs with nothing
NOTHING = counts(0, 0, 0, 0)  # nothing expected, nothing made

# (mode, counts, value, passed): every row on the same cases
CASES: list[tuple[str, Counts, float, bool]] = [
    ("strict", PERFECT, 1.0, True),
    ("strict", ONE_EXTRA, 2 / 3, False),
    ("strict", ONE_MISSING, 1 / 2, False),
    ("strict", BOTH, 1 / 3, False),
    ("strict", NOTHING, 1.0, True),
    ("unordered", PERFECT, 1.0, True),
    ("unordered", ONE_EXTRA, 2 / 3, False),
    ("unordered", ONE_MISSING, 1 / 2, False),
    ("unordered", BOTH, 1 / 3, False),
    ("unordered", NOTHING, 1.0, True),
    ("contains", PERFECT, 1.0, True),
    ("contains", ONE_EXTRA, 1.0, True),
    ("contains", ONE_MISSING, 1 / 2, False),
    ("contains", BOTH, 1 / 2, False),
    ("contains", NOTHING, 1.0, True),
    ("subset", PERFECT, 1.0, True),
    ("subset", ONE_EXTRA, 2 / 3, False),
    ("subset", ONE_MISSING, 1.0, True),
    ("subset", BOTH, 1 / 2, False),
    ("subset", NOTHING, 1.0, True),
    # within counts the allowed calls as matched, with nothing required
    ("within", counts(0, 3, 3, 0), 1.0, True),
    ("within", counts(0, 3, 2, 0), 2 / 3, False),
    ("within", NOTHING, 1.0, True),
    ("in_order", PERFECT, 1.0, True),
    ("in_order", ONE_EXTRA, 1.0, True),
    ("in_order", ONE_MISSING, 1 / 2, False),
    ("in_order", NOTHING, 1.0, True),
    ("precision", PERFECT, 1.0, True),
    ("precision", ONE_EXTRA, 2 / 3, False),
    ("precision", ONE_MISSING, 1.0, True),
    # an agent that made no call at all is perfectly precise (docs: mind it in gates)
    ("precision", counts(2, 0, 0, 0), 1.0, True),
    ("recall", PERFECT, 1.0, True),
    ("recall", ONE_EXTRA, 1.0, True),
    ("recall", ONE_MISSING, 1 / 2, False),
    ("f1", PERFECT, 1.0, True),
    ("f1", ONE_EXTRA, 0.8, False),
    ("f1", ONE_MISSING, 2 / 3, False),
    ("f1", BOTH, 1 / 2, False),
    # nothing paired with something made and expected: P = R = 0, and f1 0, not a division error
    ("f1", counts(1, 1, 0, 0), 0.0, False),
]


@pytest.mark.parametrize(
    ("mode", "case", "value", "passed"),
    CASES,
    ids=[
        f"{m}-{c.required}R-{c.made}A-{c.matched}m-{c.matched_required}mr" for m, c, _, _ in CASES
    ],
)
def test_each_row_scores_the_counts_as_documented(
    mode: str, case: Counts, value: float, passed: bool
) -> None:
    row = MODES[mode]
    assert row.value(case) == pytest.approx(value)
    assert row.passes(case) is passed


def test_every_row_has_cases() -> None:
    assert {m for m, _, _, _ in CASES} == set(MODES)


def _grid() -> list[Counts]:
    out = []
    for required, made in itertools.product(range(4), range(4)):
        for matched in range(made + 1):
            for matched_required in range(min(required, matched) + 1):
                out.append(counts(required, made, matched, matched_required))
    return out


@pytest.mark.parametrize("name", list(MODES))
def test_the_flags_say_what_passes_and_what_scores_one(name: str) -> None:
    row = MODES[name]
    for c in _grid():
        rule = (row.extras_allowed or c.extra == 0) and (row.omissions_allowed or c.missing == 0)
        assert row.passes(c) is rule, c
        assert (row.value(c) == 1.0) is rule, c
        assert 0.0 <= row.value(c) <= 1.0, c


def test_graded_rows_pass_by_their_value() -> None:
    graded = [row for row in MODES.values() if row.graded]
    assert [row.name for row in graded] == ["precision", "recall", "f1"]
    for row in graded:
        assert row.rule == "value >= threshold (default 1)"
        for c in _grid():
            assert row.passes(c) is (row.value(c) >= 1.0)


# A mode the product does not have: the expected calls in order, nothing else, omissions
# allowed. Defined here, in the test, as one row.
ORDERED_SUBSET = MatchMode(
    "ordered_subset",
    ordered=True,
    extras_allowed=False,
    omissions_allowed=True,
    graded=False,
    value=lambda c: c.precision,
    passes=lambda c: c.extra == 0,
    rule="every call made is paired in order (omissions allowed)",
    formula="matched / A",
    summary="calls made in the expected order; omissions allowed",
    brief_formula="matched / made",
)


def _trajectory(*steps: str | list[str]) -> Trajectory:
    calls = []
    for group, step in enumerate(steps, start=1):
        for name in step if isinstance(step, list) else [step]:
            parallel = group if isinstance(step, list) else None
            calls.append(ToolCall(name=name, arguments={}, parallel_group=parallel))
    return Trajectory(conversation_id="c", turns=[Turn(index=0, steps=calls)])


def _score(mode: str, *steps: str | list[str]) -> Any:
    assertion = {"type": "tool_calls", "mode": mode, "expected": ["a", "b", "c"]}
    suite = load_suite({"name": "s", "metrics": [assertion]})
    (row,) = suite.score(_trajectory(*steps))
    assert row.score.error is None, row.score.error
    return row.score


def test_a_new_row_is_all_a_new_mode_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SuiteError, match="Input should be 'strict'"):
        _score("ordered_subset", "a")
    monkeypatch.setitem(MODES, "ordered_subset", ORDERED_SUBSET)

    # accepted by the loader and listed by the published schema and the docs' tables
    mode_schema = suite_json_schema()["$defs"]["ToolCallsAssertion"]["properties"]["mode"]
    assert mode_schema["enum"][-1] == "ordered_subset"
    assert "ordered_subset" in docstring_table()
    assert "| `ordered_subset` | every call made is paired in order" in markdown_table()

    # scored by its row: in order (so unlike `subset`), omissions allowed
    in_order = _score("ordered_subset", "a", "c")
    assert (in_order.passed, in_order.value) == (True, 1.0)
    assert in_order.details["mode"] == "ordered_subset"
    reordered = _score("ordered_subset", "c", "a")
    assert (reordered.passed, reordered.value) == (False, 0.5)
    assert "c out of order: made as call 1" in (reordered.explanation or "")
    assert _score("subset", "c", "a").passed  # the same calls, unordered
    # ordered: one model response's calls are taken sorted, and the details say where each is
    parallel = _score("ordered_subset", ["b", "a"])
    assert (parallel.passed, parallel.value) == (True, 1.0)
    assert parallel.details["actual"] == ["a", "b"]
    assert parallel.details["actual_index"] == [1, 0]


def test_a_mode_outside_the_table_is_refused_with_the_choices() -> None:
    with pytest.raises(SuiteError) as refused:
        load_suite({"name": "s", "metrics": [{"type": "tool_calls", "mode": "strictt"}]})
    assert "Input should be 'strict', 'unordered', " in str(refused.value)
    assert "'recall' or 'f1'" in str(refused.value)
    assert _score("f1", "a", "b", "c").value == 1.0
