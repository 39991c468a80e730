"""Invariants of the trajectory assertions, checked with Hypothesis: a trajectory matches
itself in every mode; strict => unordered => contains; scores stay in [0, 1]; optimal pairing
is never worse than any other pairing (first-fit included)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.evaluation.assertions.tool_calls import ToolCallsAssertion
from spanscore.evaluation.matching.pairing import max_weight_matching
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn

MODES = [
    "strict",
    "unordered",
    "contains",
    "subset",
    "within",
    "in_order",
    "precision",
    "recall",
    "f1",
]
NAMES = st.sampled_from(["a", "b", "c"])
VALUES = st.one_of(st.integers(-3, 3), st.sampled_from([1.0, 2.5, "x", "1", True, None]))
ARGS = st.dictionaries(st.sampled_from(["k", "n"]), VALUES, max_size=2)


@st.composite
def calls(draw: st.DrawFn) -> list[ToolCall]:
    """Tool calls, some in parallel blocks."""
    result: list[ToolCall] = []
    for group in range(1, draw(st.integers(0, 5)) + 1):
        size = draw(st.sampled_from([1, 1, 1, 2]))
        for _ in range(size):
            result.append(
                ToolCall(
                    name=draw(NAMES),
                    arguments=draw(ARGS),
                    parallel_group=group if size > 1 else None,
                )
            )
    return result


def expected_from(made: list[ToolCall]) -> list[Any]:
    """The calls made, as an expectation: parallel blocks become parallel steps."""
    steps: list[Any] = []
    i = 0
    while i < len(made):
        j = i + 1
        group = made[i].parallel_group
        while group is not None and j < len(made) and made[j].parallel_group == group:
            j += 1
        block = [{"name": c.name, "arguments": c.arguments} for c in made[i:j]]
        steps.append(block if len(block) > 1 else block[0])
        i = j
    return steps


def run(mode: str, expected: list[Any], made: list[ToolCall], **options: Any) -> tuple[bool, float]:
    assertion = ToolCallsAssertion.model_validate(
        {"type": "tool_calls", "mode": mode, "expected": expected, **options}
    )
    t = Trajectory(conversation_id="c", turns=[Turn(index=0, steps=list(made))])
    score = assertion.evaluate(t, EvalContext())
    assert score.value is not None
    assert score.passed is not None
    return score.passed, score.value


@settings(max_examples=300, deadline=None)
@given(calls())
def test_a_trajectory_matches_itself_in_every_mode(made: list[ToolCall]):
    expected = expected_from(made)
    for mode in MODES:
        passed, value = run(mode, expected, made)
        assert passed, mode
        assert value == 1.0, mode


@settings(max_examples=400, deadline=None)
@given(calls(), calls())
def test_strict_implies_unordered_implies_contains(made: list[ToolCall], other: list[ToolCall]):
    expected = expected_from(other)
    strict, _ = run("strict", expected, made)
    unordered, _ = run("unordered", expected, made)
    contains, _ = run("contains", expected, made)
    subset, _ = run("subset", expected, made)
    in_order, _ = run("in_order", expected, made)
    assert not strict or unordered
    assert not unordered or (contains and subset)
    assert not strict or in_order
    assert not in_order or contains


@settings(max_examples=300, deadline=None)
@given(calls(), calls(), st.sampled_from(MODES))
def test_scores_stay_in_unit_interval(made: list[ToolCall], other: list[ToolCall], mode: str):
    _, value = run(mode, expected_from(other), made)
    assert 0.0 <= value <= 1.0


@st.composite
def with_failures(draw: st.DrawFn) -> tuple[list[ToolCall], list[ToolCall]]:
    """Calls that took effect, and the same calls with failed ones among them (a failed call
    before a retry, or on its own), parallel blocks kept."""
    succeeded = draw(calls())
    made: list[ToolCall] = []
    for call in [*succeeded, None]:
        for _ in range(draw(st.integers(0, 1))):
            name = call.name if call is not None and draw(st.booleans()) else draw(NAMES)
            made.append(ToolCall(name=name, arguments=draw(ARGS), error="RuntimeError"))
        if call is not None:
            made.append(call)
    return succeeded, made


@settings(max_examples=300, deadline=None)
@given(with_failures())
def test_a_trajectory_without_its_failed_calls_matches_itself(
    pair: tuple[list[ToolCall], list[ToolCall]],
):
    succeeded, made = pair
    expected = expected_from(succeeded)
    for mode in MODES:
        # failed calls count as not made: the same verdict and value as if they were never made
        assert run(mode, expected, made, failed_calls="not_made") == run(mode, expected, succeeded)
        assert run(mode, expected, made, failed_calls="not_made")[0], mode
    if len(made) > len(succeeded):  # counted as made, a failed call is an extra call
        assert not run("strict", expected, made)[0]


def _best_by_brute_force(weights: list[list[float | None]]) -> float:
    best = 0.0

    def walk(row: int, used: frozenset[int], total: float) -> None:
        nonlocal best
        if row == len(weights):
            best = max(best, total)
            return
        walk(row + 1, used, total)
        for col, w in enumerate(weights[row]):
            if w is not None and col not in used:
                walk(row + 1, used | {col}, total + w)

    walk(0, frozenset(), 0.0)
    return best


WEIGHT = st.one_of(st.none(), st.sampled_from([1.0, 0.5]), st.floats(0.01, 1.0))


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda cols: st.lists(
            st.lists(WEIGHT, min_size=cols, max_size=cols), min_size=1, max_size=5
        )
    )
)
def test_optimal_pairing_is_never_worse_than_any_pairing(weights: list[list[float | None]]):
    pairs = max_weight_matching(weights)
    assert len({r for r, _ in pairs}) == len(pairs) == len({c for _, c in pairs})
    assert all(weights[r][c] is not None for r, c in pairs)
    total = sum(weights[r][c] or 0.0 for r, c in pairs)
    assert abs(total - _best_by_brute_force(weights)) < 1e-9
    # and never fewer pairs than first-fit finds, with equal weights
    allowed = [[1.0 if w is not None else None for w in row] for row in weights]
    first_fit, used = 0, set()
    for row in allowed:
        col = next((c for c, w in enumerate(row) if w is not None and c not in used), None)
        if col is not None:
            used.add(col)
            first_fit += 1
    assert len(max_weight_matching(allowed)) >= first_fit
