"""Deterministic metrics, table-driven: schema validity, tool errors, efficiency, correctness,
name and description reliability, turns, latency, tokens, and Arcade's critic rubric. The
Dokimos and Arcade documentation examples are cases here; Hypothesis checks the invariants
(values in [0, 1], a trajectory is correct against itself)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.evaluation.matching.critics import critic_weights, tfidf_cosine
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.suites.load import SuiteError, load_suite, suite_json_schema
from spanscore.evaluation.trajectory.model import ModelCall, ToolCall, Trajectory, Turn

Call = str | tuple[str, Any] | ToolCall

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def call(name: str, arguments: Any = None, **fields: Any) -> ToolCall:
    return ToolCall(name=name, arguments={} if arguments is None else arguments, **fields)


def trajectory(*steps: Call, tools: list[dict[str, Any]] | None = None, **extra: Any) -> Trajectory:
    made = [
        s if isinstance(s, ToolCall) else call(s) if isinstance(s, str) else call(*s) for s in steps
    ]
    attributes = {"gen_ai.tool.definitions": tools} if tools is not None else {}
    return Trajectory(
        conversation_id="c-1", attributes=attributes, turns=[Turn(index=0, steps=made)], **extra
    )


def score(
    assertion: dict[str, Any], t: Trajectory, tools: list[dict[str, Any]] | None = None
) -> Score:
    suite = load_suite({"name": "t", "tools": tools or [], "metrics": [assertion]})
    (row,) = suite.score(t)
    return row.score


# --- tool-call validity ------------------------------------------------------------------------

FLIGHTS = {
    "name": "search_flights",
    "description": "Search for available flights",
    "parameters": {
        "type": "object",
        "properties": {
            "origin": {"type": "string", "description": "Origin airport code"},
            "destination": {"type": "string", "description": "Destination airport code"},
            "passengers": {"type": "integer", "minimum": 1},
            "cabin": {"type": "string", "enum": ["economy", "business"]},
            "stops": {"enum": [0, 1, 2]},
            "address": {
                "type": "object",
                "properties": {"zip": {"type": "string"}, "city": {"type": "string"}},
                "required": ["zip"],
            },
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "when": {"$ref": "#/$defs/When"},
            "id": {"oneOf": [{"type": "integer"}, {"type": "string", "pattern": "^F"}]},
        },
        "required": ["origin", "destination"],
        "$defs": {"When": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}},
    },
}
HOTEL = {
    "name": "book_hotel",
    "description": "Book a hotel room",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
FREE = {"name": "ping", "description": "no schema"}
TOOLS = [FLIGHTS, HOTEL, FREE]
OK = {"origin": "JFK", "destination": "CDG"}

# (id, call, strict, problems: substrings, one per expected problem; [] = valid)
VALIDITY: list[tuple[str, ToolCall, bool, list[str]]] = [
    ("valid", call("search_flights", OK), False, []),
    ("dokimos-quickstart-hotel", call("book_hotel", {"city": "Paris", "nights": 5}), False, []),
    ("unknown-tool", call("search_trains", OK), False, ["unknown tool 'search_trains'"]),
    (
        "missing-required",
        call("search_flights", {"origin": "JFK"}),
        False,
        ["missing required argument 'destination'"],
    ),
    ("no-arguments", call("search_flights", None), False, ["'origin'", "'destination'"]),
    (
        "wrong-type",
        call("search_flights", {**OK, "passengers": "2"}),
        False,
        ["argument 'passengers' should be integer, got string"],
    ),
    # JSON Schema (2020-12): a number with a zero fraction is an integer.
    ("integer-as-1.0", call("search_flights", {**OK, "passengers": 1.0}), False, []),
    ("integer-as-1.5", call("search_flights", {**OK, "passengers": 1.5}), False, ["integer"]),
    ("bool-is-not-integer", call("search_flights", {**OK, "passengers": True}), False, ["boolean"]),
    ("below-minimum", call("search_flights", {**OK, "passengers": 0}), False, ["minimum"]),
    ("null-for-string", call("search_flights", {**OK, "cabin": None}), False, ["got null"]),
    ("enum-ok", call("search_flights", {**OK, "cabin": "business"}), False, []),
    ("enum-violation", call("search_flights", {**OK, "cabin": "first"}), False, ["not one of"]),
    ("enum-1.0-is-1", call("search_flights", {**OK, "stops": 1.0}), False, []),
    ("enum-'1'-is-not-1", call("search_flights", {**OK, "stops": "1"}), False, ["not one of"]),
    ("enum-true-is-not-1", call("search_flights", {**OK, "stops": True}), False, ["not one of"]),
    (
        "nested-missing",
        call("search_flights", {**OK, "address": {"city": "Paris"}}),
        False,
        ["missing required argument 'address.zip'"],
    ),
    (
        "nested-wrong-type",
        call("search_flights", {**OK, "address": {"zip": 75001}}),
        False,
        ["'address.zip' should be string"],
    ),
    (
        "array-item",
        call("search_flights", {**OK, "tags": ["a", 2]}),
        False,
        ["argument 'tags[1]' should be string"],
    ),
    ("empty-array", call("search_flights", {**OK, "tags": []}), False, []),
    ("anyof-null", call("search_flights", {**OK, "note": None}), False, []),
    ("anyof-none", call("search_flights", {**OK, "note": 3}), False, ["anyOf"]),
    ("ref-ok", call("search_flights", {**OK, "when": "2026-05-01"}), False, []),
    ("ref-pattern", call("search_flights", {**OK, "when": "May 1"}), False, ["does not match"]),
    ("oneof-int", call("search_flights", {**OK, "id": 7}), False, []),
    ("oneof-neither", call("search_flights", {**OK, "id": "X7"}), False, ["oneOf"]),
    ("extra-allowed", call("search_flights", {**OK, "seat": "12A"}), False, []),
    (
        "extra-strict",
        call("search_flights", {**OK, "seat": "12A"}),
        True,
        ["unexpected argument 'seat'"],
    ),
    (
        "additional-properties-false",
        call("book_hotel", {"city": "Paris", "stars": 4}),
        False,
        ["unexpected argument 'stars'"],
    ),
    (
        "several-problems",
        call("book_hotel", {"nights": "2", "x": 1}),
        False,
        ["'city'", "'nights'", "'x'"],
    ),
    ("arguments-not-object", call("search_flights", "JFK to CDG"), False, ["not a JSON object"]),
    ("tool-without-schema", call("ping", {"anything": [1, {"a": None}]}), False, []),
]


@pytest.mark.parametrize(
    ("made", "strict", "problems"), [v[1:] for v in VALIDITY], ids=[v[0] for v in VALIDITY]
)
def test_tool_call_validity(made: ToolCall, strict: bool, problems: list[str]) -> None:
    result = score({"type": "tool_call_validity", "strict": strict}, trajectory(made, tools=TOOLS))
    assert result.error is None
    found = result.details["calls"][0]["problems"]  # type: ignore[index]
    assert len(found) == len(problems), found
    for wanted in problems:
        assert any(wanted in p for p in found), (wanted, found)
    assert result.value == (0.0 if problems else 1.0)
    assert result.passed is (not problems)
    assert result.threshold == 1.0


def test_validity_is_the_fraction_of_valid_calls() -> None:
    t = trajectory(
        ("search_flights", OK), ("book_hotel", {"city": 1}), ("nope", {}), ("ping", {}), tools=TOOLS
    )
    result = score({"type": "tool_call_validity", "threshold": 0.5}, t)
    assert result.value == 0.5
    assert result.passed is True
    assert "2/4 tool calls are valid" in (result.explanation or "")


def test_validity_uses_the_suite_catalog_over_recorded_definitions() -> None:
    recorded = [{"type": "function", "function": {**HOTEL, "parameters": {"type": "object"}}}]
    made = ("book_hotel", {"city": "Paris", "stars": 4})
    assert score({"type": "tool_call_validity"}, trajectory(made, tools=recorded)).value == 1.0
    with_catalog = score({"type": "tool_call_validity"}, trajectory(made, tools=recorded), [HOTEL])
    assert with_catalog.value == 0.0


@pytest.mark.parametrize(
    ("steps", "value", "error"),
    [
        ((), 1.0, None),  # no calls: nothing invalid (Dokimos)
        ((("book_hotel", {"city": "x"}),), None, "no tool definitions"),
    ],
    ids=["no-calls", "no-definitions"],
)
def test_validity_edges(steps: tuple[Call, ...], value: float | None, error: str | None) -> None:
    result = score({"type": "tool_call_validity"}, trajectory(*steps))
    assert result.value == value
    assert (error is None) == (result.error is None)
    if error:
        assert error in (result.error or "")


# --- tool errors -------------------------------------------------------------------------------

# (id, call, options, failed: reason substring or None)
ERRORS: list[tuple[str, ToolCall, dict[str, Any], str | None]] = [
    ("structured-ok", call("t", result={"status": "shipped"}), {}, None),
    ("text-ok", call("t", result="done"), {}, None),
    ("zero-is-a-result", call("t", result=0), {}, None),
    ("recorded-error", call("t", result={"ok": 1}, error="TimeoutError"), {}, "TimeoutError"),
    ("missing-result", call("t", result=None), {}, "no result"),
    ("blank-result", call("t", result="  \n"), {}, "no result"),
    ("missing-allowed", call("t", result=None), {"missing_result_is_error": False}, None),
    ("json-error-text", call("t", result='{"error": "not found"}'), {}, "error field"),
    ("json-error-parsed", call("t", result={"error": {"code": 404}}), {}, "error field"),
    ("json-error-null", call("t", result='{"error": null, "id": 1}'), {}, None),
    ("json-error-off", call("t", result={"error": "x"}), {"json_error_field": False}, None),
    ("error-nested-is-not-top-level", call("t", result={"data": {"error": "x"}}), {}, None),
    ("array-result", call("t", result=[{"error": "x"}]), {}, None),
    # The Dokimos example detector: result.contains("HTTP 500").
    ("pattern", call("t", result="upstream said HTTP 500"), {"error_pattern": "HTTP 500"}, "HTTP"),
    ("pattern-no-match", call("t", result="HTTP 200"), {"error_pattern": "HTTP 5\\d\\d"}, None),
    ("predicate", call("t", result="FAILED"), {"predicate": "builtins:str.isupper"}, "predicate"),
    ("predicate-false", call("t", result="fine"), {"predicate": "builtins:str.isupper"}, None),
]


@pytest.mark.parametrize(
    ("made", "options", "failed"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_tool_errors(made: ToolCall, options: dict[str, Any], failed: str | None) -> None:
    result = score({"type": "tool_errors", **options}, trajectory(made))
    reason = result.details["calls"][0]["error"]  # type: ignore[index]
    if failed is None:
        assert reason is None
        assert result.value == 1.0
    else:
        assert failed in reason
        assert result.value == 0.0
        assert result.passed is False


def test_tool_errors_fraction_and_no_calls() -> None:
    t = trajectory(call("a", result="ok"), call("b", result=None), call("c", result="ok"))
    result = score({"type": "tool_errors"}, t)
    assert result.value == pytest.approx(2 / 3)
    assert result.passed is False  # default threshold 1.0, as Dokimos
    empty = score({"type": "tool_errors"}, trajectory())
    assert (empty.value, empty.passed) == (1.0, True)


# --- efficiency --------------------------------------------------------------------------------

# (id, steps, options, value, redundant count, loops as (name, calls))
EFFICIENCY: list[tuple[str, list[Call], dict[str, Any], float, int, list[tuple[str, int]]]] = [
    ("no-calls", [], {}, 1.0, 0, []),
    ("distinct", [("a", {"x": 1}), ("b", {"x": 1})], {}, 1.0, 0, []),
    ("same-name-other-args", [("a", {"x": 1}), ("a", {"x": 2})], {}, 1.0, 0, []),
    ("1-equals-1.0", [("a", {"x": 1}), ("a", {"x": 1.0})], {}, 0.5, 1, [("a", 2)]),
    ("'1'-is-not-1", [("a", {"x": "1"}), ("a", {"x": 1})], {}, 1.0, 0, []),
    ("true-is-not-1", [("a", {"x": True}), ("a", {"x": 1})], {}, 1.0, 0, []),
    (
        "nested-key-order",
        [("a", {"q": {"p": 1, "r": [1, 2]}}), ("a", {"q": {"r": [1, 2], "p": 1}})],
        {},
        0.5,
        1,
        [("a", 2)],
    ),
    ("list-order-matters", [("a", {"x": [1, 2]}), ("a", {"x": [2, 1]})], {}, 1.0, 0, []),
    ("repeat-not-consecutive", ["a", "b", "a"], {}, 2 / 3, 1, []),
    ("loop-of-three", ["a", "a", "a", "b"], {}, 0.5, 2, [("a", 3)]),
    ("two-loops", ["a", "a", "b", "b"], {}, 0.5, 2, [("a", 2), ("b", 2)]),
    (
        "ignored-volatile-argument",
        [("a", {"q": 1, "request_id": "r1"}), ("a", {"q": 1, "request_id": "r2"})],
        {"ignore_arguments": ["request_id"]},
        0.5,
        1,
        [("a", 2)],
    ),
    ("names-only", [("a", {"x": 1}), ("a", {"x": 2})], {"names_only": True}, 0.5, 1, [("a", 2)]),
]


@pytest.mark.parametrize(
    ("steps", "options", "value", "redundant", "loops"),
    [e[1:] for e in EFFICIENCY],
    ids=[e[0] for e in EFFICIENCY],
)
def test_efficiency(
    steps: list[Call],
    options: dict[str, Any],
    value: float,
    redundant: int,
    loops: list[tuple[str, int]],
) -> None:
    result = score({"type": "efficiency", **options}, trajectory(*steps))
    assert result.value == pytest.approx(value)
    details = result.details or {}
    assert len(details["redundant"]) == redundant
    assert [(loop["name"], loop["calls"]) for loop in details["loops"]] == loops
    assert result.passed is (value == 1.0)  # Dokimos default threshold 1.0


# --- correctness -------------------------------------------------------------------------------

GET_A = {"name": "get_order", "arguments": {"order_id": "A"}}
GET_B = {"name": "get_order", "arguments": {"order_id": "B"}}
ANY_GET = {"name": "get_order", "arguments": {}, "match": "partial"}

# (id, mode, expected, actual steps, value)
CORRECTNESS: list[tuple[str, str, list[Any], list[Call], float]] = [
    # Dokimos quick start: the expected tools, arguments not compared.
    (
        "names-same",
        "names_only",
        ["search_flights", "book_hotel"],
        ["search_flights", "book_hotel"],
        1.0,
    ),
    ("names-any-order", "names_only", ["a", "b"], ["b", "a"], 1.0),
    ("names-repeats-collapse", "names_only", ["a"], ["a", "a", "a"], 1.0),
    # used {a, c}, expected {a, b}: P = R = 1/2
    ("names-half", "names_only", ["a", "b"], ["a", "a", "c"], 0.5),
    ("names-both-empty", "names_only", [], [], 1.0),
    ("names-none-expected", "names_only", [], ["a"], 0.0),
    ("names-none-made", "names_only", ["a"], [], 0.0),
    ("order-same", "names_and_order", ["a", "b", "c"], ["a", "b", "c"], 1.0),
    ("order-extra", "names_and_order", ["a", "c"], ["a", "b", "c"], 2 / 3),  # LCS 2 / max 3
    ("order-swapped", "names_and_order", ["a", "b"], ["b", "a"], 0.5),
    ("order-repeats-count", "names_and_order", ["a"], ["a", "a"], 0.5),
    ("order-both-empty", "names_and_order", [], [], 1.0),
    ("order-one-empty", "names_and_order", ["a"], [], 0.0),
    (
        "args-swapped-repeats",
        "names_and_args",
        [GET_A, GET_B],
        [("get_order", {"order_id": "B"}), ("get_order", {"order_id": "A"})],
        1.0,
    ),
    # First-fit (Dokimos) pairs A with the catch-all and then fails B: F1 0.5. Optimal: 1.0.
    (
        "args-needs-optimal-pairing",
        "names_and_args",
        [ANY_GET, GET_A],
        [("get_order", {"order_id": "A"}), ("get_order", {"order_id": "B"})],
        1.0,
    ),
    (
        "args-1-vs-1.0",
        "names_and_args",
        [{"name": "a", "arguments": {"n": 1}}],
        [("a", {"n": 1.0})],
        1.0,
    ),
    (
        "args-'1'-vs-1",
        "names_and_args",
        [{"name": "a", "arguments": {"n": "1"}}],
        [("a", {"n": 1})],
        0.0,
    ),
    (
        "args-missing",
        "names_and_args",
        [{"name": "a", "arguments": {"n": 1, "m": 2}}],
        [("a", {"n": 1})],
        0.0,
    ),
    (
        "args-extra-exact",
        "names_and_args",
        [{"name": "a", "arguments": {"n": 1}}],
        [("a", {"n": 1, "m": 2})],
        0.0,
    ),
    (
        "args-extra-partial",
        "names_and_args",
        [{"name": "a", "arguments": {"n": 1}, "match": "partial"}],
        [("a", {"n": 1, "m": 2})],
        1.0,
    ),
    (
        "args-nested-order",
        "names_and_args",
        [{"name": "a", "arguments": {"q": {"x": 1, "y": [1, {"z": 2}]}}}],
        [("a", {"q": {"y": [1, {"z": 2}], "x": 1}})],
        1.0,
    ),
    ("args-not-given", "names_and_args", ["a"], [("a", {"anything": 1})], 1.0),
    (
        "args-one-of-two",
        "names_and_args",
        [GET_A, GET_B],
        [("get_order", {"order_id": "A"})],
        2 / 3,
    ),
    (
        "args-regex-rule",
        "names_and_args",
        [{"name": "a", "arguments": {"id": "x"}, "rules": {"id": {"pattern": "ORD-\\d+"}}}],
        [("a", {"id": "ORD-17"})],
        1.0,
    ),
    ("args-both-empty", "names_and_args", [], [], 1.0),
]


@pytest.mark.parametrize(
    ("mode", "expected", "steps", "value"),
    [c[1:] for c in CORRECTNESS],
    ids=[c[0] for c in CORRECTNESS],
)
def test_correctness(mode: str, expected: list[Any], steps: list[Call], value: float) -> None:
    result = score({"type": "correctness", "mode": mode, "expected": expected}, trajectory(*steps))
    assert result.value == pytest.approx(value)
    assert result.passed is (value == 1.0)


def test_correctness_names_can_be_normalised() -> None:
    rule = {"type": "correctness", "expected": ["Get-Order"], "normalize_names": True}
    assert score(rule, trajectory("get_order")).value == 1.0
    assert score({**rule, "normalize_names": False}, trajectory("get_order")).value == 0.0


def test_correctness_rejects_repetition_bounds() -> None:
    with pytest.raises(SuiteError, match=r"metrics\[0\].*optional.*tool_calls assertion"):
        load_suite(
            {
                "name": "t",
                "metrics": [{"type": "correctness", "expected": [{"name": "a", "optional": True}]}],
            }
        )


# --- name and description reliability ----------------------------------------------------------


def tool(
    name: str, properties: dict[str, Any] | None = None, required: list[str] | None = None
) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties or {}, "required": required or []}
    return {"name": name, "description": "d", "parameters": parameters}


# (id, tool name, checks that fail)
NAMES: list[tuple[str, str, list[str]]] = [
    ("snake", "search_flights", []),
    ("digits", "get_v2_order", []),
    ("camel", "searchFlights", ["snakecase_format"]),
    ("pascal-with-dot", "Weather.GetCurrent", ["snakecase_format"]),
    ("hyphen", "search-flights", ["snakecase_format"]),
    ("double-underscore", "search__flights", ["snakecase_format"]),
    ("leading-digit", "2fa_check", ["snakecase_format"]),
    ("seven-segments", "a_b_c_d_e_f_g", []),
    ("eight-segments", "a_b_c_d_e_f_g_h", ["conciseness"]),
    ("implementation", "summarize_with_llm", ["intent_over_implementation"]),
    (
        "implementation-any-case",
        "Fetch_From_S3",
        ["snakecase_format", "intent_over_implementation"],
    ),
]


@pytest.mark.parametrize(("name", "failing"), [n[1:] for n in NAMES], ids=[n[0] for n in NAMES])
def test_tool_name_reliability(name: str, failing: list[str]) -> None:
    result = score({"type": "tool_name_reliability"}, trajectory(tools=[tool(name)]))
    (per_tool,) = result.details["tools"]  # type: ignore[index]
    assert [k for k, ok in per_tool["checks"].items() if not ok] == failing
    assert result.value == pytest.approx(1 - len(failing) / 3)
    assert result.threshold == 0.8
    assert result.passed is (result.value >= 0.8)


def test_reliability_averages_over_tools() -> None:
    t = trajectory(tools=[tool("good_name"), tool("BadName"), tool("x_via_api")])
    result = score({"type": "tool_name_reliability"}, t)
    assert result.value == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
    only = score({"type": "tool_name_reliability", "tools": ["good_name"]}, t)
    assert only.value == 1.0
    no_tools = score({"type": "tool_name_reliability"}, trajectory(tools=[]))
    assert (no_tools.value, no_tools.passed) == (1.0, True)
    unknown = score({"type": "tool_name_reliability"}, trajectory())
    assert "no tool definitions" in (unknown.error or "")


TYPED = {"type": "string", "description": "x"}

# (id, properties, required, options, failing checks)
DESCRIPTIONS: list[tuple[str, dict[str, Any], list[str], dict[str, Any], list[str]]] = [
    ("no-parameters", {}, [], {}, []),
    ("described-and-typed", {"a": TYPED, "b": TYPED}, ["a"], {}, []),
    ("undescribed", {"a": {"type": "string"}}, ["a"], {}, ["input_arguments_clarity"]),
    ("untyped", {"a": {"description": "x"}}, ["a"], {}, ["input_arguments_types"]),
    (
        "optional-union-is-typed",
        {"a": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "x"}},
        [],
        {},
        [],
    ),
    ("enum-is-typed", {"a": {"enum": ["x", "y"], "description": "x"}}, ["a"], {}, []),
    (
        "six-parameters",
        dict.fromkeys("abcdef", TYPED),
        list("abcdef"),
        {},
        ["max_num_input_arguments"],
    ),
    ("four-optional", dict.fromkeys("abcd", TYPED), [], {}, ["max_optional_input_arguments"]),
    (
        "required-not-declared-ignored",
        dict.fromkeys("abcd", TYPED),
        ["zz"],
        {},
        ["max_optional_input_arguments"],
    ),
    (
        "configured-limits",
        dict.fromkeys("abcd", TYPED),
        [],
        {"max_input_arguments": 3, "max_optional_arguments": 4},
        ["max_num_input_arguments"],
    ),
]


@pytest.mark.parametrize(
    ("properties", "required", "options", "failing"),
    [d[1:] for d in DESCRIPTIONS],
    ids=[d[0] for d in DESCRIPTIONS],
)
def test_tool_description_reliability(
    properties: dict[str, Any], required: list[str], options: dict[str, Any], failing: list[str]
) -> None:
    t = trajectory(tools=[tool("a_tool", properties, required)])
    result = score({"type": "tool_description_reliability", **options}, t)
    (per_tool,) = result.details["tools"]  # type: ignore[index]
    assert [k for k, ok in per_tool["checks"].items() if not ok] == failing
    assert result.value == pytest.approx(1 - len(failing) / 4)


# --- turns, latency, tokens ----------------------------------------------------------------------


def model(
    ms: float | None = None, tokens: tuple[int | None, int | None] = (None, None)
) -> ModelCall:
    return ModelCall(
        span_id="s",
        trace_id="t",
        name="chat",
        latency_ms=ms,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )


def conversation(turns: int, *steps: Any, seconds: float | None = None) -> Trajectory:
    made = [Turn(index=0, steps=list(steps))] + [Turn(index=i) for i in range(1, turns)]
    times = {"start_time": T0, "end_time": T0 + dt.timedelta(seconds=seconds)} if seconds else {}
    return Trajectory(conversation_id="c", turns=made if turns else [], **times)


@pytest.mark.parametrize(
    ("turns", "limits", "passed"),
    [
        (3, {}, None),
        (3, {"max_turns": 3}, True),
        (4, {"max_turns": 3}, False),
        (1, {"min_turns": 2}, False),
        (0, {"min_turns": 0, "max_turns": 5}, True),
    ],
)
def test_turn_count(turns: int, limits: dict[str, Any], passed: bool | None) -> None:
    result = score({"type": "turn_count", **limits}, conversation(turns))
    assert (result.value, result.passed) == (float(turns), passed)


def test_latency() -> None:
    t = conversation(
        1,
        model(400.0),
        call("search", latency_ms=120.0),
        call("search", latency_ms=900.0),
        call("book", latency_ms=50.0),
        call("book"),  # no timing: skipped
        seconds=2.5,
    )
    wall = score({"type": "latency", "max_total_ms": 3000}, t)
    assert (wall.value, wall.passed) == (2500.0, True)
    assert wall.details["max_tool_ms_by_name"] == {"search": 900.0, "book": 50.0}  # type: ignore[index]
    steps = score({"type": "latency", "measure": "steps"}, t)
    assert (steps.value, steps.passed) == (1470.0, None)
    slow = score({"type": "latency", "max_tool_ms": 500}, t)
    assert slow.passed is False
    assert "search 900 ms > 500 ms" in (slow.explanation or "")
    per_tool = score(
        {"type": "latency", "max_tool_ms": 500, "per_tool_max_ms": {"search": 1000}}, t
    )
    assert per_tool.passed is True
    untimed = score({"type": "latency"}, conversation(1, call("a")))
    assert untimed.error is not None


def test_token_usage() -> None:
    t = conversation(1, model(tokens=(100, 20)), model(tokens=(300, None)), model())
    result = score({"type": "token_usage", "max_total_tokens": 500}, t)
    assert (result.value, result.passed) == (420.0, True)
    assert result.details["model_calls_without_counts"] == 1  # type: ignore[index]
    assert score({"type": "token_usage", "value": "input"}, t).value == 400.0
    over = score({"type": "token_usage", "max_output_tokens": 10}, t)
    assert (over.passed, over.value) == (False, 420.0)
    assert score({"type": "token_usage"}, conversation(1, model())).error is not None


def test_counted_metrics_reject_a_threshold() -> None:
    with pytest.raises(SuiteError, match=r"metrics\[0\].*limits"):
        load_suite({"name": "t", "metrics": [{"type": "latency", "threshold": 0.5}]})


# --- Arcade's rubric -----------------------------------------------------------------------------

WEATHER = {
    "type": "tool_call_rubric",
    "expected": [{"name": "GetWeather", "arguments": {"city": "Seattle", "type": "current"}}],
    "critics": [
        {"type": "binary", "critic_field": "city", "weight": 0.7},
        {"type": "binary", "critic_field": "type", "weight": 0.3},
    ],
}
DM = {
    "type": "tool_call_rubric",
    "expected": [
        {"tool_name": "send_dm", "args": {"username": "alice", "message": "Meeting at 3 PM"}}
    ],
    "critics": [
        {"type": "binary", "field": "username", "weight": 0.4},
        {"type": "similarity", "field": "message", "weight": 0.6},
    ],
}
# The TF-IDF cosine of "Meeting at 3 PM" and "meeting at 3pm" as scikit-learn computes it:
# shared words weigh 1, the others ln(3/2) + 1; one-character "3" is not a word.
_ONLY = math.log(1.5) + 1
DM_COSINE = 2 / (2 + _ONLY**2)
TWO_CITIES = {
    "type": "tool_call_rubric",
    "expected": [
        {"name": "Weather_GetCurrent", "arguments": {"location": "Seattle"}},
        {"name": "Weather_GetCurrent", "arguments": {"location": "Portland"}},
    ],
    "critics": [{"type": "binary", "field": "location", "weight": 1}],
}

# (id, rubric, actual steps, value, label)
RUBRIC: list[tuple[str, dict[str, Any], list[Call], float, str]] = [
    (
        "weather-exact",
        WEATHER,
        [("GetWeather", {"city": "Seattle", "type": "current"})],
        1.0,
        "passed",
    ),
    # 1 (selection) + 0.7 (city) + 0 (type) out of 2.0: the docs' "WARNED ... Score: 0.85".
    (
        "weather-wrong-type",
        WEATHER,
        [("GetWeather", {"city": "Seattle", "type": "forecast"})],
        0.85,
        "warned",
    ),
    (
        "weather-wrong-tool",
        WEATHER,
        [("GetForecast", {"city": "Seattle", "type": "current"})],
        0.0,
        "failed",
    ),
    # Without the selection failure rule, the arguments still count: the docs' "Score: 0.50".
    (
        "weather-wrong-tool-graded",
        {**WEATHER, "fail_on_tool_selection": False},
        [("GetForecast", {"city": "Seattle", "type": "current"})],
        0.5,
        "failed",
    ),
    (
        "weather-name-separators",
        WEATHER,
        [("get-weather", {"city": "Seattle", "type": "current"})],
        1.0,
        "passed",
    ),
    (
        "weather-too-many",
        WEATHER,
        [("GetWeather", {"city": "Seattle", "type": "current"})] * 2,
        0.0,
        "failed",
    ),
    # As Arcade: without the quantity rule an extra call is simply not paired.
    (
        "weather-extra-unpaired",
        {**WEATHER, "fail_on_tool_call_quantity": False},
        [("GetWeather", {"city": "Seattle", "type": "current"}), ("GetWeather", {})],
        1.0,
        "passed",
    ),
    ("weather-none-made", WEATHER, [], 0.0, "failed"),
    ("weather-missing-field", WEATHER, [("GetWeather", {"city": "Seattle"})], 0.85, "warned"),
    (
        "dm-exact",
        DM,
        [("send_dm", {"username": "alice", "message": "Meeting at 3 PM"})],
        1.0,
        "passed",
    ),
    (
        "dm-similar",
        DM,
        [("send_dm", {"username": "alice", "message": "meeting at 3pm"})],
        (1 + 0.4 + 0.6 * DM_COSINE) / 2,
        "warned",
    ),
    (
        "dm-reworded",
        DM,
        [("send_dm", {"username": "alice", "message": "3 PM meeting at"})],
        1.0,
        "passed",
    ),
    (
        "dm-wrong-user",
        DM,
        [("send_dm", {"username": "bob", "message": "Meeting at 3 PM"})],
        0.8,
        "warned",
    ),
    # Repeated tools paired optimally: Seattle with Seattle whatever the order.
    (
        "two-cities-swapped",
        TWO_CITIES,
        [
            ("Weather.GetCurrent", {"location": "Portland"}),
            ("Weather.GetCurrent", {"location": "Seattle"}),
        ],
        1.0,
        "passed",
    ),
    (
        "two-cities-one-wrong",
        TWO_CITIES,
        [
            ("Weather.GetCurrent", {"location": "Portland"}),
            ("Weather.GetCurrent", {"location": "Tokyo"}),
        ],
        0.75,
        "failed",
    ),
    ("empty-both", {"type": "tool_call_rubric", "expected": []}, [], 1.0, "passed"),
    (
        "no-critics",
        {"type": "tool_call_rubric", "expected": ["send_dm"]},
        [("send_dm", {"x": 1})],
        1.0,
        "passed",
    ),
]


@pytest.mark.parametrize(
    ("rubric", "steps", "value", "label"),
    [r[1:] for r in RUBRIC],
    ids=[r[0] for r in RUBRIC],
)
def test_tool_call_rubric(
    rubric: dict[str, Any], steps: list[Call], value: float, label: str
) -> None:
    result = score(rubric, trajectory(*steps))
    assert result.error is None, result.error
    assert result.value == pytest.approx(value)
    assert result.label == label
    assert result.passed is (label != "failed")
    assert result.threshold == 0.8


# (id, critic, expected value, actual value, score of weight 1)
CRITICS: list[tuple[str, dict[str, Any], Any, Any, float]] = [
    ("binary-equal", {"type": "binary"}, "x", "x", 1.0),
    ("binary-cast-text-to-int", {"type": "binary"}, 5, "5", 1.0),
    ("binary-cast-int-to-text", {"type": "binary"}, "5", 5, 1.0),
    ("binary-1-vs-1.0", {"type": "binary"}, 1, 1.0, 1.0),
    ("binary-fraction-is-not-int", {"type": "binary"}, 1, 1.5, 0.0),
    ("binary-text-false", {"type": "binary"}, True, "false", 0.0),
    ("binary-text-true", {"type": "binary"}, True, "true", 1.0),
    ("binary-None-text", {"type": "binary"}, "None", None, 1.0),
    ("binary-both-absent", {"type": "binary"}, None, None, 1.0),
    ("binary-absent", {"type": "binary"}, "x", None, 0.0),
    ("binary-nested", {"type": "binary"}, {"a": [1, 2]}, {"a": [1.0, 2]}, 1.0),
    ("numeric-close", {"type": "numeric", "value_range": [0, 100]}, 70, 72, 0.98),
    ("numeric-text", {"type": "numeric", "value_range": [0, 10]}, 5, "4", 0.9),
    ("numeric-out-of-range", {"type": "numeric", "value_range": [0, 10]}, 0, 30, 0.0),
    ("numeric-absent", {"type": "numeric", "value_range": [0, 10]}, 5, None, 0.0),
    ("similarity-same-words", {"type": "similarity"}, "a quick fox", "fox quick a", 1.0),
    ("similarity-disjoint", {"type": "similarity"}, "hello world", "goodbye moon", 0.0),
    (
        "similarity-lists",
        {"type": "similarity"},
        ["Engineering", "Platform"],
        "platform engineering",
        1.0,
    ),
    ("similarity-empty-both", {"type": "similarity"}, "", " ", 1.0),
    ("similarity-empty-one", {"type": "similarity"}, "", "x", 0.0),
    ("similarity-no-words", {"type": "similarity"}, "1 2", "1 2", 1.0),
    ("similarity-no-words-differ", {"type": "similarity"}, "1 2", "2 1", 0.0),
    (
        "datetime-within",
        {"type": "datetime", "tolerance": 3600},
        "2026-05-01T10:00:00",
        "2026-05-01T10:30:00",
        1.0,
    ),
    (
        "datetime-partial",
        {"type": "datetime", "tolerance": 3600},
        "2026-05-01T10:00:00",
        "2026-05-01T11:30:00",
        0.25,
    ),
    (
        "datetime-beyond",
        {"type": "datetime", "tolerance": "PT1H"},
        "2026-05-01T10:00:00",
        "2026-05-01T13:00:00",
        0.0,
    ),
    (
        "datetime-zones",
        {"type": "datetime"},
        "2026-05-01T10:00:00Z",
        "2026-05-01T12:00:00+02:00",
        1.0,
    ),
    (
        "datetime-naive-vs-aware",
        {"type": "datetime"},
        "2026-05-01T10:00:00",
        "2026-05-01T10:00:00+05:00",
        1.0,
    ),
    ("datetime-unreadable", {"type": "datetime"}, "2026-05-01", "May 1st", 0.0),
]


@pytest.mark.parametrize(
    ("critic", "want", "got", "value"), [c[1:] for c in CRITICS], ids=[c[0] for c in CRITICS]
)
def test_critics(critic: dict[str, Any], want: Any, got: Any, value: float) -> None:
    """One critic of weight 1 next to a tool selection of weight 0: the case score is the
    critic's score."""
    rubric = {
        "type": "tool_call_rubric",
        "expected": [{"name": "t", "arguments": {"v": want}}],
        "critics": [{**critic, "field": "v", "weight": 1}],
        "tool_selection_weight": 0,
    }
    result = score(rubric, trajectory(("t", {} if got is None else {"v": got})))
    assert result.value == pytest.approx(value)


def test_fuzzy_weights_are_normalised() -> None:
    rubric = load_suite(
        {
            "name": "t",
            "metrics": [
                {
                    "type": "tool_call_rubric",
                    "expected": ["a"],
                    "critics": [
                        {"type": "binary", "field": "owner", "weight": "HIGH"},
                        {"type": "binary", "field": "state", "weight": "FuzzyWeight.LOW"},
                    ],
                }
            ],
        }
    ).suite.metrics[0]
    assert critic_weights(rubric.critics) == [0.625, 0.375]  # type: ignore[union-attr]
    # FuzzyWeight critics sum to 1, next to the tool selection's 1: owner right, state wrong.
    t = trajectory(("a", {"owner": "me", "state": "x"}))
    rubric_dict = {
        "type": "tool_call_rubric",
        "expected": [{"name": "a", "arguments": {"owner": "me", "state": "open"}}],
        "critics": [
            {"type": "binary", "field": "owner", "weight": "high"},
            {"type": "binary", "field": "state", "weight": "low"},
        ],
    }
    assert score(rubric_dict, t).value == pytest.approx((1 + 0.625) / 2)


def test_tfidf_matches_scikit_learn_defaults() -> None:
    assert tfidf_cosine("Meeting at 3 PM", "meeting at 3pm") == pytest.approx(DM_COSINE)
    assert tfidf_cosine("!!", "?") is None
    # "the" appears in both texts (idf 1), "cat"/"dog" in one each (idf ln 1.5 + 1).
    assert tfidf_cosine("the cat", "the dog") == pytest.approx(1 / (1 + _ONLY**2))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"threshold": 0.5}, "fail_threshold"),
        ({"critics": [{"type": "binary", "field": "x", "weight": -1}]}, "non-negative"),
        ({"critics": [{"type": "numeric", "field": "x", "value_range": [5, 1]}]}, "minimum"),
        ({"critics": [{"type": "fuzzy", "field": "x"}]}, "critics"),
        (
            {"critics": [{"type": "binary", "field": "x", "weight": "enormous"}]},
            r"critics\[0\]\.weight: a weight is a non-negative number or one of minimal",
        ),
    ],
)
def test_rubric_config_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        load_suite({"name": "t", "metrics": [{**WEATHER, **change}]})


# --- suites --------------------------------------------------------------------------------------

SUITE_YAML = """\
name: customer service
tools:
  - name: get_order
    description: Look an order up
    parameters:
      type: object
      properties:
        order_id: {type: string, description: the order id}
      required: [order_id]
      additionalProperties: false
metrics:
  - type: tool_call_validity
  - type: tool_errors
    missing_result_is_error: false
  - type: efficiency
    threshold: 0.5
  - type: tool_name_reliability
  - type: tool_description_reliability
scenarios:
  - id: status
    assertions:
      - type: correctness
        mode: names_and_args
        expected:
          - name: get_order
            arguments: {order_id: ORD-1}
      - type: tool_call_rubric
        expected:
          - {name: get_order, arguments: {order_id: ORD-1}}
        critics:
          - {type: binary, field: order_id, weight: critical}
      - type: turn_count
        max_turns: 2
"""


def test_yaml_suite_scores_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE_YAML)
    suite = load_suite(path)
    t = trajectory(call("get_order", {"order_id": "ORD-1"}, result={"status": "shipped"}))
    t.attributes["scenario.id"] = "status"
    rows = {row.metric: row.score for row in suite.score(t)}
    assert set(rows) == {
        "tool_call_validity",
        "tool_errors",
        "efficiency",
        "tool_name_reliability",
        "tool_description_reliability",
        "correctness",
        "tool_call_rubric",
        "turn_count",
    }
    assert all(s.passed for s in rows.values()), {k: s.explanation for k, s in rows.items()}


def test_bad_suite_names_the_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE_YAML.replace("mode: names_and_args", "mode: names_and_vibes"))
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    (problem,) = caught.value.problems
    assert problem.path == "scenarios[0].assertions[0].mode"
    assert problem.line == SUITE_YAML.splitlines().index("        mode: names_and_args") + 1
    assert "names_and_args" in problem.message


def test_bad_predicate_is_reported_at_load() -> None:
    with pytest.raises(SuiteError, match=r"metrics\[0\]: cannot load predicate 'nowhere:x'"):
        load_suite({"name": "t", "metrics": [{"type": "tool_errors", "predicate": "nowhere:x"}]})


def test_metric_fields_are_documented_in_the_schema() -> None:
    schema = suite_json_schema()
    for name in (
        "ToolCallValidity",
        "ToolErrors",
        "Efficiency",
        "Correctness",
        "ToolNameReliability",
        "ToolDescriptionReliability",
        "TurnCount",
        "Latency",
        "TokenUsage",
        "ToolCallRubric",
    ):
        definition = schema["$defs"][name]
        assert definition.get("description"), name
        for field, spec in definition["properties"].items():
            if field not in ("type", "name", "description"):
                assert "description" in spec or "$ref" in spec or "items" in spec, (name, field)


# --- invariants ---------------------------------------------------------------------------------

NAMES_ST = st.sampled_from(["a", "b", "c"])
VALUES = st.one_of(st.integers(-3, 3), st.sampled_from([1.0, 2.5, "x", "1", True, None]))
ARGS = st.dictionaries(st.sampled_from(["k", "n"]), VALUES, max_size=2)
CALLS = st.lists(
    st.builds(
        ToolCall,
        name=NAMES_ST,
        arguments=ARGS,
        result=st.one_of(st.none(), st.just("ok"), st.just({"error": "x"})),
        error=st.one_of(st.none(), st.just("boom")),
    ),
    max_size=6,
)
GRADED = [
    {"type": "tool_call_validity"},
    {"type": "tool_errors"},
    {"type": "efficiency"},
    {"type": "correctness", "expected": ["a", "b"]},
    {"type": "correctness", "mode": "names_and_order", "expected": ["a", "b"]},
    {
        "type": "correctness",
        "mode": "names_and_args",
        "expected": [{"name": "a", "arguments": {"k": 1}}],
    },
    {"type": "tool_name_reliability"},
    {"type": "tool_description_reliability"},
    {
        "type": "tool_call_rubric",
        "expected": [{"name": "a", "arguments": {"k": 1, "n": "x"}}, {"name": "b"}],
        "critics": [
            {"type": "numeric", "field": "k", "value_range": [0, 2]},
            {"type": "similarity", "field": "n", "weight": "low"},
        ],
        "fail_on_tool_selection": False,
        "fail_on_tool_call_quantity": False,
    },
]
GRADED_SUITE = load_suite(
    {"name": "p", "metrics": [{**m, "name": f"m{i}"} for i, m in enumerate(GRADED)]}
)
SCHEMA_TOOLS = [
    {"name": n, "parameters": {"type": "object", "properties": {"k": {"type": "integer"}}}}
    for n in ("a", "b")
]


@settings(max_examples=150, deadline=None)
@given(CALLS)
def test_graded_values_stay_in_unit_interval(made: list[ToolCall]) -> None:
    t = trajectory(*made, tools=SCHEMA_TOOLS)
    for row in GRADED_SUITE.score(t):
        assert row.score.error is None, (row.metric, row.score.error)
        value = row.score.value
        assert value is not None, row.metric
        assert 0.0 <= value <= 1.0, row.metric
        assert row.score.passed is not None
        json.dumps(row.score.details)  # details are stored as JSON


@settings(max_examples=100, deadline=None)
@given(CALLS)
def test_a_trajectory_is_correct_against_itself(made: list[ToolCall]) -> None:
    t = trajectory(*made)
    expected = [{"name": c.name, "arguments": c.arguments} for c in made]
    for mode in ("names_only", "names_and_order", "names_and_args"):
        suite = load_suite(
            {"name": "p", "metrics": [{"type": "correctness", "mode": mode, "expected": expected}]}
        )
        (row,) = suite.score(t)
        assert row.score.value == 1.0, mode
    rubric = {
        "type": "tool_call_rubric",
        "expected": expected,
        "critics": [{"type": "binary", "field": "k"}, {"type": "binary", "field": "n"}],
    }
    (row,) = load_suite({"name": "p", "metrics": [rubric]}).score(t)
    assert row.score.value == 1.0


@settings(max_examples=100, deadline=None)
@given(CALLS)
def test_efficiency_counts_each_distinct_call_once(made: list[ToolCall]) -> None:
    (row,) = load_suite({"name": "p", "metrics": [{"type": "efficiency"}]}).score(trajectory(*made))
    details = row.score.details or {}
    assert details["distinct"] + len(details["redundant"]) == len(made)
    assert all(loop["calls"] >= 2 for loop in details["loops"])
