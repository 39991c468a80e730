"""`quick_check`, the judge's shortcut for checking a verdict against its schema, and
`surely_valid`, tool-call validity's shortcut for the common tool schema, never accept what
`check_arguments` finds a problem with, and accept the verdicts judges give and the calls
agents make."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.evaluation.llm.answers import strict_schema
from spanscore.evaluation.matching.schema_check import (
    check_arguments,
    quick_check,
    surely_valid,
)

SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 8),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 5.0, -0.0]),
    st.text(max_size=6),
    st.sampled_from(["pass", "fail", "safe", "unsafe", ""]),
)
VALUE = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3), max_leaves=4)


@st.composite
def verdict_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """Closed objects of scalar properties, as the judged metrics ask for, and some that are
    not (extra keywords, open objects, booleans or floats in an enum)."""
    properties: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(["reasoning", "score", "label", "ok"]), unique=True)):
        kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "array"]))
        sub: dict[str, Any] = {"type": kind}
        if draw(st.booleans()):
            sub["description"] = "why"
        if kind == "string" and draw(st.booleans()):
            sub["enum"] = draw(st.lists(st.sampled_from(["pass", "fail", "safe"]), min_size=1))
        if kind in ("integer", "number") and draw(st.booleans()):
            sub["enum"] = draw(
                st.lists(st.sampled_from([0, 1, 5, True, 1.0]), min_size=1, max_size=3)
            )
        if draw(st.integers(0, 9)) == 0:
            sub["minimum"] = 1
        properties[name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    return strict_schema(schema) if draw(st.booleans()) else schema


@st.composite
def answers(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    properties = schema.get("properties", {})
    names = list(properties)
    if draw(st.integers(0, 4)) == 0:
        names = draw(st.lists(st.sampled_from([*names, "extra"]), unique=True))
    answer: dict[str, Any] = {}
    for name in names:
        sub = properties.get(name, {})
        pick = draw(st.integers(0, 2))
        if "enum" in sub and pick == 0:
            answer[name] = draw(st.sampled_from(sub["enum"]))
        elif "enum" in sub and pick == 1:  # near the options: 1 against True or 1.0
            answer[name] = draw(st.sampled_from([0, 1, 5, 1.0, True, "pass"]))
        else:
            answer[name] = draw(VALUE)
    return answer if draw(st.integers(0, 9)) else draw(VALUE)


@settings(max_examples=600, deadline=None)
@given(data=st.data())
def test_what_the_quick_check_accepts_has_no_problem(data: st.DataObject):
    schema = data.draw(verdict_schemas())
    quick = quick_check(schema)
    answer = data.draw(answers(schema))
    if quick is not None and quick(answer):
        assert check_arguments(answer, schema) == []


@settings(max_examples=600, deadline=None)
@given(data=st.data(), strict=st.booleans())
def test_what_the_tool_schema_shortcut_accepts_has_no_problem(data: st.DataObject, strict: bool):
    schema = dict(data.draw(verdict_schemas()))  # a strict schema is shared and read-only
    names = list(schema["properties"])
    schema["required"] = data.draw(st.lists(st.sampled_from([*names, "gone"]), unique=True))
    additional = data.draw(st.sampled_from([None, True, False, {"type": "string"}]))
    if additional is None:
        schema.pop("additionalProperties", None)
    else:
        schema["additionalProperties"] = additional
    answer = data.draw(answers(schema))
    if surely_valid(answer, schema, strict=strict):
        assert check_arguments(answer, schema, strict=strict) == []


def test_the_calls_agents_make_take_the_tool_schema_shortcut():
    schema = {
        "type": "object",
        "description": "an order",
        "properties": {
            "order_id": {"type": "string", "description": "ORD-..."},
            "n": {"type": "integer"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
        },
        "required": ["order_id"],
    }
    assert surely_valid({"order_id": "ORD-1", "n": 2, "mode": "fast", "note": "x"}, schema)
    # anything else is left to check_arguments, which says what is wrong (or that it is fine)
    for wrong, strict in (
        ({"n": 2}, False),
        ({"order_id": "ORD-1", "n": True}, False),
        ({"order_id": "ORD-1", "mode": "other"}, False),
        ({"order_id": "ORD-1", "note": "x"}, True),
        ({"order_id": "ORD-1", "n": 2.0}, False),  # valid (2.0 is an integer), said the long way
    ):
        assert not surely_valid(wrong, schema, strict=strict)
    assert check_arguments({"order_id": "ORD-1", "n": 2.0}, schema) == []
    nested = {"type": "object", "properties": {"address": {"type": "object"}}}
    assert not surely_valid({"address": {}}, nested)


def test_the_judges_verdicts_take_the_quick_path():
    scale = strict_schema(
        {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "score": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]},
            },
        }
    )
    labels = strict_schema(
        {
            "type": "object",
            "properties": {"reasoning": {"type": "string"}, "label": {"enum": ["a", "b"]}},
        }
    )
    quick = quick_check(scale)
    assert quick is not None
    assert quick({"reasoning": "fine", "score": 3})
    # anything else is left to check_arguments, which says what is wrong
    for wrong in (
        {"reasoning": "fine", "score": 6},
        {"reasoning": "fine", "score": True},
        {"reasoning": "fine"},
        {"reasoning": "fine", "score": 3, "extra": 1},
        ["fine", 3],
    ):
        assert not quick(wrong)
        assert check_arguments(wrong, scale)
    assert quick_check(labels) is None  # an enum without a type: the full check
    # `1 == True` and `1 == 1.0` in Python; in JSON Schema a boolean is no number
    odd = {"type": "object", "properties": {"score": {"type": "integer", "enum": [True, 0]}}}
    assert quick_check(strict_schema(odd)) is None
    assert check_arguments({"score": 1}, strict_schema(odd))
