"""`tool_calls` over the calls that took effect (`failed_calls: not_made`, `ignore_tools`) and
`response` over every agent message with its normalisation options: each documented example
and edge case is a row."""

from __future__ import annotations

from typing import Any

import pytest

from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.trajectory.model import ModelCall, ToolCall, Trajectory, Turn


def score(assertion: dict[str, Any], *turns: Turn) -> Score:
    suite = load_suite(
        {"name": "s", "scenarios": [{"id": "x", "assertions": [{"name": "a", **assertion}]}]}
    )
    trajectory = Trajectory(conversation_id="c", attributes={"scenario.id": "x"}, turns=list(turns))
    (row,) = suite.score(trajectory)
    assert row.score.error is None, row.score
    return row.score


def call(name: str, error: str | None = None, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, error=error)


def said(text: str) -> ModelCall:
    return ModelCall(span_id="m", trace_id="t", name="chat", response_text=text)


# --- effective calls ---------------------------------------------------------------------------

RETRY = Turn(
    index=0,
    steps=[
        call("get_order", order_id="#W1"),
        call("update_address", error="ValueError", order_id="#W1", zip="1"),
        call("update_address", order_id="#W1", zip="10001"),
        call("get_order", order_id="#W1"),
    ],
    final_response="Done.",
)
WRITE = {"name": "update_address", "arguments": {"order_id": "#W1", "zip": "10001"}}

EFFECTIVE = [
    # (id, options, passed)
    # the failed attempt is an extra call, and the reads too
    ("default-counts-failed-and-reads", {}, False),
    # the reads are free, but the failed attempt is still an extra call
    ("reads-ignored-failed-counted", {"ignore_tools": ["get_order"]}, False),
    # the failed attempt changed nothing; the reads are extra calls
    ("failed-not-made-reads-counted", {"failed_calls": "not_made"}, False),
    # tau-bench's action rule: the successful writes equal the gold writes
    ("failed-not-made-reads-ignored",
     {"failed_calls": "not_made", "ignore_tools": ["get_order"]}, True),
    ("names-normalised", {"failed_calls": "not_made", "ignore_tools": ["Get-Order"],
                          "normalize_names": True}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "passed"), [r[1:] for r in EFFECTIVE], ids=[r[0] for r in EFFECTIVE]
)
def test_a_failed_and_retried_write_is_one_call(options: dict[str, Any], passed: bool) -> None:
    result = score(
        {"type": "tool_calls", "mode": "unordered", "expected": [WRITE], **options}, RETRY
    )
    assert result.passed is passed, result.explanation


def test_left_out_calls_are_listed_and_positions_stay_the_trajectorys() -> None:
    result = score(
        {"type": "tool_calls", "mode": "strict", "expected": [WRITE], "failed_calls": "not_made",
         "ignore_tools": ["get_order"]},
        RETRY,
    )  # fmt: skip
    assert result.passed
    details = result.details or {}
    assert details["actual_index"] == [2]  # the successful write is the trajectory's third call
    assert details["left_out"] == [
        {"index": 0, "name": "get_order", "why": "ignored tool"},
        {"index": 1, "name": "update_address", "why": "failed"},
        {"index": 3, "name": "get_order", "why": "ignored tool"},
    ]


def test_a_failed_call_alone_is_not_a_call_made() -> None:
    turn = Turn(index=0, steps=[call("cancel_order", error="RuntimeError", order_id="#W1")])
    expected = [{"name": "cancel_order", "arguments": {"order_id": "#W1"}}]
    assertion = {"type": "tool_calls", "mode": "contains", "expected": expected}
    assert score(assertion, turn).passed  # made, though it failed
    assert not score({**assertion, "failed_calls": "not_made"}, turn).passed


# --- said anywhere ------------------------------------------------------------------------------

CONVERSATION = [
    Turn(index=0, user_message="refund?", steps=[said("Let me check: the total is $1,093.34."),
         call("get_order")], final_response="Which card should I refund?"),
    Turn(index=1, user_message="visa", final_response="Refund issued to your VISA card, #W-123."),
]  # fmt: skip

SAID = [
    # (id, response options, passed)
    # the final answer alone does not have the amount
    ("final-answer-only", {"keywords": ["1093.34"], "ignore_thousands_separators": True}, False),
    # an intermediate model message of turn 1 does
    ("any-message", {"keywords": ["1093.34"], "in_any_message": True,
                     "ignore_thousands_separators": True}, True),
    # said with commas: without a normalisation it is not the same text
    ("commas-not-normalised", {"keywords": ["1093.34"], "in_any_message": True}, False),
    # tau-bench's rule: every comma removed from the messages
    ("commas-removed",
     {"keywords": ["1093.34"], "in_any_message": True, "remove_commas": True}, True),
    # a keyword with commas: matches with thousands separators ignored on both sides, never
    # with remove_commas (tau-bench's rule keeps the keyword's commas)
    ("keyword-with-commas-thousands", {"keywords": ["1,093.34"], "in_any_message": True,
                                       "ignore_thousands_separators": True}, True),
    ("keyword-with-commas-removed", {"keywords": ["1,093.34"], "in_any_message": True,
                                     "remove_commas": True, }, False),
    # case: ignored by default, kept on request
    ("case-ignored", {"keywords": ["visa"], "in_any_message": True}, True),
    ("case-kept", {"keywords": ["visa"], "in_any_message": True, "ignore_case": False}, False),
    # punctuation removed from both sides
    ("punctuation",
     {"keywords": ["W123"], "in_any_message": True, "ignore_punctuation": True}, True),
    ("punctuation-kept", {"keywords": ["W123"], "in_any_message": True}, False),
    # a forbidden keyword fails when any message has it, even an intermediate one
    ("forbidden-anywhere", {"forbidden_keywords": ["total"], "in_any_message": True}, False),
    ("pattern-anywhere", {"pattern": r"\$\d", "in_any_message": True}, True),
]  # fmt: skip


@pytest.mark.parametrize(("options", "passed"), [r[1:] for r in SAID], ids=[r[0] for r in SAID])
def test_said_anywhere(options: dict[str, Any], passed: bool) -> None:
    result = score({"type": "response", **options}, *CONVERSATION)
    assert result.passed is passed, result.explanation


def test_an_agent_that_said_nothing_fails_and_says_so() -> None:
    result = score({"type": "response", "keywords": ["x"], "in_any_message": True}, Turn(index=0))
    assert not result.passed
    assert "said nothing" in (result.explanation or "")


def test_every_turn_and_any_message_exclude_each_other() -> None:
    with pytest.raises(Exception, match="exclude each other"):
        score({"type": "response", "keywords": ["x"], "in_any_message": True, "every_turn": True})
