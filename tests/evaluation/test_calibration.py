"""Judge calibration: the human labels file (every format, every error with its place) and the
agreement statistics, checked against values worked out by hand from their definitions
(Cohen 1960, Cohen 1968) and against invariants with Hypothesis."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanscore.evaluation.calibration.agreement import (
    Agreement,
    Category,
    HumanLabel,
    LabelsError,
    LabelStats,
    agreement,
    landis_koch,
    load_labels,
)


def repeat(
    *counts: tuple[Category, Category | None, int],
) -> list[tuple[Category, Category | None]]:
    """Pairs from (human, judge, how many) rows: a confusion matrix written out."""
    return [(human, judge) for human, judge, count in counts for _ in range(count)]


# The classic 2x2 example: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no.
# Human: 25 yes, 25 no. Judge: 30 yes, 20 no. p_o = 35/50 = 0.7;
# p_e = (25·30 + 25·20) / 50² = 1250/2500 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
CLASSIC = repeat(("yes", "yes", 20), ("yes", "no", 5), ("no", "yes", 10), ("no", "no", 15))

# Ordinal example on a 1-4 scale, pairs (1,1) (2,3) (3,3) (4,2) (2,2) (3,4); n = 6.
# Both raters' marginals are (1, 2, 2, 1). Unweighted: p_o = 3/6, p_e = (1+4+4+1)/36 = 10/36,
# kappa = (18/36 - 10/36) / (26/36) = 8/26 = 4/13.
# Linear weights |i-j|: observed disagreement (1 + 2 + 1)/6 = 4/6. Expected: Σ r_i c_j |i-j|,
# row by row with r = c = (1,2,2,1): 9 + 10 + 10 + 9 = 38, over 36.
# kappa_w = 1 - (4/6)/(38/36) = 1 - 12/19 = 7/19.
# Quadratic weights (i-j)²: observed (1 + 4 + 1)/6 = 1. Expected: rows 19 + 14 + 14 + 19 = 66,
# over 36. kappa_w = 1 - 1/(66/36) = 1 - 6/11 = 5/11.
ORDINAL = [(1, 1), (2, 3), (3, 3), (4, 2), (2, 2), (3, 4)]


# --- agreement: textbook values ------------------------------------------------------------


def test_classic_two_by_two() -> None:
    result = agreement(CLASSIC, labels=["yes", "no"])
    assert result.n == 50
    assert result.missing == 0
    assert result.accuracy == pytest.approx(0.7)
    assert result.kappa == pytest.approx(0.4)
    assert result.interpretation == "fair"
    assert result.confusion == ((20, 5), (10, 15))
    assert result.weights is None
    assert result.weighted_kappa is None
    yes, no = result.per_label
    # yes: TP 20, judge said yes 30 times, human 25 times
    assert (yes.precision, yes.recall, yes.f1, yes.support) == pytest.approx(
        (20 / 30, 20 / 25, 40 / 55, 25)
    )
    assert (no.precision, no.recall, no.f1, no.support) == pytest.approx(
        (15 / 20, 15 / 25, 30 / 45, 25)
    )


def test_three_categories() -> None:
    # human a: 10 a, 2 b, 3 c | human b: 1 a, 8 b, 1 c | human c: 4 a, 0 b, 21 c.
    # Rows (15, 10, 25), columns (15, 10, 25). p_o = 39/50 = 0.78;
    # p_e = (15·15 + 10·10 + 25·25)/2500 = 950/2500 = 0.38; kappa = 0.40/0.62 = 20/31.
    pairs = repeat(
        ("a", "a", 10), ("a", "b", 2), ("a", "c", 3),
        ("b", "a", 1), ("b", "b", 8), ("b", "c", 1),
        ("c", "a", 4), ("c", "c", 21),
    )  # fmt: skip
    result = agreement(pairs)
    assert result.labels == ("a", "b", "c")
    assert result.confusion == ((10, 2, 3), (1, 8, 1), (4, 0, 21))
    assert result.accuracy == pytest.approx(0.78)
    assert result.kappa == pytest.approx(20 / 31)
    assert result.interpretation == "substantial"


@pytest.mark.parametrize(
    ("weights", "expected"),
    [pytest.param("linear", 7 / 19, id="linear"), pytest.param("quadratic", 5 / 11, id="quad")],
)
def test_weighted_kappa_by_hand(weights: Any, expected: float) -> None:
    result = agreement(ORDINAL, ordinal=True, weights=weights)
    assert result.labels == (1, 2, 3, 4)
    assert result.kappa == pytest.approx(4 / 13)
    assert result.weighted_kappa == pytest.approx(expected)
    assert result.weights == weights


def test_an_unused_category_in_labels_still_widens_the_scale() -> None:
    # Pairs (1,1) (1,2) (4,4) (4,2): rows over (1,2,4) are (2,0,2), columns (1,2,1), n = 4.
    # Default order 1,2,4 (positions 0,1,2), quadratic: observed 1 + 1 = 2; expected
    # 2·(0 + 2·1 + 1·4) + 2·(1·4 + 2·1 + 0) = 24; kappa_w = 1 - 4·2/24 = 2/3.
    # labels 1,2,3,4 (positions 0,1,3): observed 1 + 4 = 5; expected 2·(0 + 2·1 + 1·9)
    # + 2·(1·9 + 2·4 + 0) = 56; kappa_w = 1 - 4·5/56 = 9/14.
    pairs = [(1, 1), (1, 2), (4, 4), (4, 2)]
    assert agreement(pairs, ordinal=True).weighted_kappa == pytest.approx(2 / 3)
    spread = agreement(pairs, ordinal=True, labels=[1, 2, 3, 4])
    assert spread.weighted_kappa == pytest.approx(9 / 14)
    assert spread.confusion[2] == (0, 0, 0, 0)
    assert [row[2] for row in spread.confusion] == [0, 0, 0, 0]
    # the unweighted kappa does not care about positions
    assert spread.kappa == agreement(pairs).kappa


def test_swapping_the_raters_leaves_kappa_unchanged() -> None:
    swapped = [(judge, human) for human, judge in ORDINAL]
    for weights in ("linear", "quadratic"):
        a = agreement(ORDINAL, ordinal=True, weights=weights)
        b = agreement(swapped, ordinal=True, weights=weights)
        assert (a.kappa, a.weighted_kappa) == (b.kappa, b.weighted_kappa)
        assert b.confusion == tuple(zip(*a.confusion, strict=True))


def test_perfect_agreement_is_one() -> None:
    result = agreement([(0, 0), (1, 1), (2, 2), (2, 2)], ordinal=True)
    assert (result.accuracy, result.kappa, result.weighted_kappa) == (1.0, 1.0, 1.0)
    assert result.interpretation == "almost perfect"
    assert result.kappa_undefined is None


def test_a_constant_judge_earns_kappa_zero_however_accurate() -> None:
    # p_e = (9·10 + 1·0)/100 = 0.9 = p_o
    result = agreement(repeat(("ok", "ok", 9), ("bad", "ok", 1)))
    assert result.accuracy == pytest.approx(0.9)
    assert result.kappa == 0.0
    assert result.interpretation == "slight"


# --- agreement: degenerate cases -----------------------------------------------------------


def test_one_single_category_leaves_kappa_undefined_not_nan() -> None:
    result = agreement([("pass", "pass")] * 4, ordinal=True, labels=["pass"])
    assert result.accuracy == 1.0
    assert result.kappa is None
    assert result.weighted_kappa is None
    assert result.interpretation is None
    assert result.kappa_undefined is not None
    assert "'pass'" in result.kappa_undefined
    assert "chance agreement is 1" in result.kappa_undefined
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False))["kappa"] is None
    assert "kappa=undefined" in result.render()


def test_a_label_only_the_judge_used() -> None:
    result = agreement([("a", "a"), ("b", "b"), ("a", "c"), ("b", "b")])
    assert result.labels == ("a", "b", "c")
    assert result.confusion == ((1, 0, 1), (0, 2, 0), (0, 0, 0))
    c = result.per_label[2]
    # the judge said c once and was wrong; no human said c, so recall has no base
    assert c == LabelStats("c", precision=0.0, recall=None, f1=0.0, support=0)
    # a human label the judge never said: no precision, recall 0
    only_human = agreement([("a", "a"), ("b", "a"), ("a", "a")]).per_label[1]
    assert only_human == LabelStats("b", precision=None, recall=0.0, f1=0.0, support=1)


def test_a_label_nobody_used_has_no_statistics() -> None:
    result = agreement([("a", "a"), ("b", "b")], labels=["a", "b", "c"])
    assert result.per_label[2] == LabelStats("c", None, None, None, 0)
    assert result.kappa == 1.0
    assert result.render().splitlines()[-1].split() == ["c", "-", "-", "-", "0"]


def test_missing_verdicts_are_counted_and_left_out() -> None:
    result = agreement([*CLASSIC, ("yes", None), ("no", None)], labels=["yes", "no"])
    assert (result.n, result.missing) == (50, 2)
    assert result.kappa == pytest.approx(0.4)
    assert sum(s.support for s in result.per_label) == 50


def test_numbers_order_numerically_and_integral_floats_are_the_same_point() -> None:
    result = agreement([(10, 10.0), (2, 9), (9, 2.5)])
    assert result.labels == (2, 2.5, 9, 10)
    assert result.confusion[3][3] == 1  # 10 and 10.0


@pytest.mark.parametrize(
    ("pairs", "options", "message"),
    [
        pytest.param([], {}, "no (human, judge) pairs", id="no-pairs"),
        pytest.param(
            [("a", None), ("b", None)], {}, "no verdict for any of the 2", id="all-missing"
        ),
        pytest.param([(None, "a")], {}, "needs the human's label", id="human-none"),
        pytest.param(
            [("a", "b")], {"labels": ["a"]}, "the judge said 'b', which is not one", id="unknown"
        ),
        pytest.param(
            [("z", "a")], {"labels": ["a"]}, "the human said 'z', which is not one", id="unknown-h"
        ),
        pytest.param([("a", "a")], {"labels": ["a", "a"]}, "'a' is listed twice", id="dup-label"),
        pytest.param(
            [("low", "high")], {"ordinal": True}, "needs `labels` to give their order", id="ord"
        ),
        pytest.param([(1, 2)], {"weights": "cubic"}, "expected 'linear' or 'quadratic'", id="w"),
        pytest.param([(1, float("nan"))], {}, "expected a finite number", id="nan"),
        pytest.param([(1, [2])], {}, "expected a category (a string) or a number", id="list"),
    ],
)
def test_agreement_refuses_bad_input(pairs: Any, options: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        agreement(pairs, **options)


@pytest.mark.parametrize(
    ("kappa", "word"),
    [
        pytest.param(-0.01, "poor", id="below-0"),
        pytest.param(0.0, "slight", id="0"),
        pytest.param(0.2, "slight", id="0.20"),
        pytest.param(0.21, "fair", id="0.21"),
        pytest.param(0.4, "fair", id="0.40"),
        pytest.param(0.41, "moderate", id="0.41"),
        pytest.param(0.6, "moderate", id="0.60"),
        pytest.param(0.61, "substantial", id="0.61"),
        pytest.param(0.8, "substantial", id="0.80"),
        pytest.param(0.81, "almost perfect", id="0.81"),
        pytest.param(1.0, "almost perfect", id="1"),
    ],
)
def test_landis_koch_words(kappa: float, word: str) -> None:
    assert landis_koch(kappa) == word


# --- agreement: output ---------------------------------------------------------------------


def test_render() -> None:
    result = agreement([*CLASSIC, ("no", None)], labels=["yes", "no"])
    assert result.render() == (
        "n=50  missing=1  accuracy=0.700  kappa=0.400 (fair)\n"
        "\n"
        "confusion matrix (rows: human, columns: judge)\n"
        "human \\ judge  yes  no\n"
        "yes             20   5\n"
        "no              10  15\n"
        "\n"
        "label  precision  recall     f1  support\n"
        "yes        0.667   0.800  0.727       25\n"
        "no         0.750   0.600  0.667       25\n"
    )


def test_render_ordinal_header() -> None:
    header = agreement(ORDINAL, ordinal=True, weights="linear").render().splitlines()[0]
    assert header == (
        "n=6  missing=0  accuracy=0.500  kappa=0.308 (fair)  weighted kappa (linear)=0.368 (fair)"
    )


def test_to_dict_is_json() -> None:
    result = agreement(ORDINAL, ordinal=True)
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["n"] == 6
    assert data["labels"] == [1, 2, 3, 4]
    assert data["confusion"][3] == [0, 1, 0, 0]
    assert data["weights"] == "quadratic"
    assert data["weighted_kappa"] == pytest.approx(5 / 11)
    assert data["interpretation"] == "fair"
    assert data["per_label"][0] == {
        "label": 1,
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "support": 1,
    }
    assert isinstance(result, Agreement)
    with pytest.raises(AttributeError):
        result.n = 7  # type: ignore[misc]


# --- agreement: properties -----------------------------------------------------------------

PAIRS = st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcd")), min_size=1)
BINARY = st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from([0, 1])), min_size=1)


@given(PAIRS)
def test_kappa_stays_in_range_and_is_undefined_only_for_one_shared_category(
    pairs: list[tuple[str, str]],
) -> None:
    result = agreement(pairs, ordinal=True, labels=list("abcd"))
    used = {label for pair in pairs for label in pair}
    if len(used) == 1:
        assert result.kappa is None
        assert result.weighted_kappa is None
        assert result.kappa_undefined
    else:
        assert result.kappa is not None
        assert result.weighted_kappa is not None
        assert -1 - 1e-12 <= result.kappa <= 1 + 1e-12
        assert result.weighted_kappa <= 1 + 1e-12
        assert (result.kappa == pytest.approx(1)) == (result.accuracy == 1)


@given(PAIRS)
def test_kappa_is_symmetric(pairs: list[tuple[str, str]]) -> None:
    a = agreement(pairs, ordinal=True, labels=list("abcd"))
    b = agreement([(j, h) for h, j in pairs], ordinal=True, labels=list("abcd"))
    assert (a.kappa, a.weighted_kappa, a.accuracy) == (b.kappa, b.weighted_kappa, b.accuracy)


@given(BINARY)
def test_linear_weighted_kappa_equals_kappa_for_two_categories(
    pairs: list[tuple[int, int]],
) -> None:
    result = agreement(pairs, ordinal=True, weights="linear", labels=[0, 1])
    if result.kappa is None:
        assert result.weighted_kappa is None
    else:
        assert result.weighted_kappa == pytest.approx(result.kappa, abs=1e-12)


# --- the labels file -----------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        pytest.param(
            "labels.json",
            json.dumps(
                [
                    {"conversation_id": "c1", "label": "correct", "note": "cites the policy"},
                    {"conversation_id": " c2 ", "label": " wrong ", "annotator": "kim"},
                ]
            ),
            [
                HumanLabel("c1", "correct", "cites the policy", "labels.json: [0]"),
                HumanLabel("c2", "wrong", None, "labels.json: [1]"),
            ],
            id="json-list",
        ),
        pytest.param(
            "labels.json",
            json.dumps({"c1": "correct", "c2": {"label": "wrong", "note": "n"}}),
            [
                HumanLabel("c1", "correct", None, 'labels.json: ["c1"]'),
                HumanLabel("c2", "wrong", "n", 'labels.json: ["c2"]'),
            ],
            id="json-mapping",
        ),
        pytest.param(
            "labels.json",
            json.dumps({"c1": 4, "c2": 3.0, "c3": {"score": 2.5, "conversation_id": "c3"}}),
            [
                HumanLabel("c1", 4, None, 'labels.json: ["c1"]'),
                HumanLabel("c2", 3, None, 'labels.json: ["c2"]'),
                HumanLabel("c3", 2.5, None, 'labels.json: ["c3"]'),
            ],
            id="json-mapping-numbers",
        ),
        pytest.param(
            "labels.jsonl",
            '{"conversation_id": "c1", "value": 5}\n\n  \n'
            '{"conversation_id": "c2", "score": "4", "note": "line\u2028sep"}\n',
            [
                HumanLabel("c1", 5, None, "labels.jsonl:1"),
                HumanLabel("c2", 4, "line\u2028sep", "labels.jsonl:4"),
            ],
            id="jsonl",
        ),
        pytest.param(
            "labels.csv",
            '\ufeffConversation_ID,value,note\r\nc1,4.0,\r\n\r\nc2,1.5,"two\nlines"\r\nc3,0,x\r\n',
            [
                HumanLabel("c1", 4, None, "labels.csv:2"),
                HumanLabel("c2", 1.5, "two\nlines", "labels.csv:4"),
                HumanLabel("c3", 0, "x", "labels.csv:6"),
            ],
            id="csv-bom-multiline",
        ),
        pytest.param(
            "labels.csv",
            "conversation_id,label,score\nc1,good,\nc2,bad,,\n",
            [
                HumanLabel("c1", "good", None, "labels.csv:2"),
                HumanLabel("c2", "bad", None, "labels.csv:3"),
            ],
            id="csv-empty-cells",
        ),
    ],
)
def test_load_labels(tmp_path: Path, name: str, text: str, expected: list[HumanLabel]) -> None:
    path = write(tmp_path, name, text)
    labels = load_labels(path)
    assert labels == [
        HumanLabel(e.conversation_id, e.label, e.note, e.where.replace(name, str(path)))
        for e in expected
    ]
    assert [type(label.label) for label in labels] == [type(e.label) for e in expected]


def test_format_overrides_the_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "labels.txt", "conversation_id,label\nc1,good\n")
    assert load_labels(path, format="csv")[0].label == "good"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # every format: nothing labelled
        pytest.param("l.json", "", "l.json: no labelled conversations", id="json-empty"),
        pytest.param("l.json", " []\n", "l.json: no labelled conversations", id="json-[]"),
        pytest.param("l.json", "{}", "l.json: no labelled conversations", id="json-{}"),
        pytest.param("l.jsonl", "\n \n", "l.jsonl: no labelled conversations", id="jsonl-blank"),
        pytest.param("l.csv", "", "l.csv: no labelled conversations", id="csv-empty"),
        pytest.param(
            "l.csv", "conversation_id,label\n", "l.csv: no labelled conversations", id="csv-header"
        ),
        # JSON document
        pytest.param("l.json", '[\n{"a": 1,}\n]', "l.json:2: invalid JSON", id="json-invalid"),
        pytest.param(
            "l.json", '"c1"', "l.json: expected a list of records or an object", id="json-string"
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "label": "a"}, 3]',
            "l.json: [1]: expected an object with conversation_id and label or value, "
            "got the number 3",
            id="json-item",
        ),
        pytest.param(
            "l.json",
            json.dumps(
                [{"conversation_id": f"c{i}", "label": "a"} for i in range(3)]
                + [{"conversation_id": "c3", "label": 2}]
            ),
            "l.json: [3].label: expected a category (a string), got the number 2",
            id="json-label-type",
        ),
        pytest.param(
            "l.json", '[{"label": "a"}]', "l.json: [0].conversation_id: missing", id="json-no-id"
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": 7, "label": "a"}]',
            "l.json: [0].conversation_id: expected a string, got the number 7",
            id="json-id-type",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1"}]',
            "l.json: [0]: expected a label (a category) or a value or score (a number)",
            id="json-no-label",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "label": "a", "value": 2}]',
            "l.json: [0].value: expected one of label, value and score, got label and value",
            id="json-label-and-value",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "value": true}]',
            "l.json: [0].value: expected a number, got the boolean true",
            id="json-bool",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "score": NaN}]',
            "l.json: [0].score: expected a finite number, got nan",
            id="json-nan",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "label": "a", "note": 3}]',
            "l.json: [0].note: expected a string, got the number 3",
            id="json-note",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "label": "a"}, {"conversation_id": "c1", "label": "b"}]',
            "l.json: [1].conversation_id: 'c1' is labelled twice (first at l.json: [0])",
            id="json-duplicate",
        ),
        pytest.param(
            "l.json",
            '{"c1": "a", "c2": "b", "c1": "c"}',
            "l.json: [\"c1\"]: 'c1' is labelled twice",
            id="json-duplicate-key",
        ),
        pytest.param(
            "l.json",
            '{"c1": ["a"]}',
            'l.json: ["c1"]: expected a label (a string), a value (a number) or an object',
            id="json-mapping-list",
        ),
        pytest.param(
            "l.json",
            '{"c1": {"conversation_id": "c2", "label": "a"}}',
            "l.json: [\"c1\"].conversation_id: expected 'c1' (the key), got 'c2'",
            id="json-mapping-id",
        ),
        pytest.param(
            "l.json",
            '{"c1": "good", "c2": 3}',
            'l.json: ["c2"]: expected a category (label), as l.json: ["c1"] has',
            id="json-mixed",
        ),
        pytest.param(
            "l.json",
            '[{"conversation_id": "c1", "label": "a", "label": "b"}]',
            "l.json: [0].label: expected once in a record, given twice",
            id="json-field-twice",
        ),
        # JSONL
        pytest.param(
            "l.jsonl",
            '{"conversation_id": "c1", "value": 1}\n{"conversation_id": "c2", "value": 1, '
            '"value": 2}\n',
            "l.jsonl:2: value: expected once in a record, given twice",
            id="jsonl-field-twice",
        ),
        pytest.param(
            "l.jsonl",
            '{"conversation_id": "c1", "label": "a"}\n\n{"conversation_id": \n',
            "l.jsonl:3: invalid JSON: Expecting value (column 21)",
            id="jsonl-invalid",
        ),
        pytest.param(
            "l.jsonl",
            '{"conversation_id": "c1", "label": "a"}\n["c2", "b"]\n',
            "l.jsonl:2: expected an object with conversation_id and label or value, got a list",
            id="jsonl-list",
        ),
        pytest.param(
            "l.jsonl",
            '{"conversation_id": "c1", "label": "a"}\n{"conversation_id": "c2", "label": "a"}\n'
            '{"conversation_id": "c1", "label": "b"}\n',
            "l.jsonl:3: conversation_id: 'c1' is labelled twice (first at l.jsonl:1)",
            id="jsonl-duplicate",
        ),
        pytest.param(
            "l.jsonl",
            '{"conversation_id": "c1", "value": 1}\n{"conversation_id": "c2", "label": "b"}\n',
            "l.jsonl:2: expected a number (value/score), as l.jsonl:1 has",
            id="jsonl-mixed",
        ),
        # CSV
        pytest.param(
            "l.csv",
            "id,label\nc1,a\n",
            "l.csv:1: expected a header row naming conversation_id and label, value or score",
            id="csv-no-id-column",
        ),
        pytest.param(
            "l.csv",
            "conversation_id,verdict\nc1,a\n",
            "l.csv:1: expected a header row",
            id="csv-no-label-column",
        ),
        pytest.param(
            "l.csv",
            "conversation_id,label,label\nc1,a,b\n",
            "l.csv:1: expected a header row",
            id="csv-column-twice",
        ),
        pytest.param(
            "l.csv",
            "conversation_id,value\nc1,3\nc2,three\n",
            "l.csv:3: value: expected a number, got 'three'",
            id="csv-not-a-number",
        ),
        pytest.param(
            "l.csv",
            "conversation_id,label\nc1,a,b\n",
            "l.csv:2: expected 2 cells like the header, got 3",
            id="csv-extra-cell",
        ),
        pytest.param(
            "l.csv",
            "conversation_id,label\n,a\n",
            "l.csv:2: conversation_id: missing",
            id="csv-empty-id",
        ),
        pytest.param(
            "l.csv",
            'conversation_id,label\n"c1\n,a\nc2,b\n',  # a quote never closed
            "l.csv:2: invalid CSV: unexpected end of data",
            id="csv-unclosed-quote",
        ),
        pytest.param(
            "l.csv",
            'conversation_id,label\nc1,a\n"c2" x,b\n',
            "l.csv:3: invalid CSV: ',' expected after '\"'",
            id="csv-stray-quote",
        ),
        # the file itself
        pytest.param("l.yaml", "c1: a\n", "l.yaml: cannot tell the format", id="extension"),
        pytest.param("l.csv", b"conversation_id,label\nc1,\xff\n", "l.csv: not UTF-8", id="bytes"),
    ],
)
def test_load_labels_errors(tmp_path: Path, name: str, text: str | bytes, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(LabelsError) as info:
        load_labels(path)
    assert message.replace(name, str(path)) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "l.csv", "conversation_id,value\nc1,x\nc2,4\n,3\nc3,y\n")
    with pytest.raises(LabelsError) as info:
        load_labels(path)
    assert info.value.problems == [
        f"{path}:2: value: expected a number, got 'x'",
        f"{path}:4: conversation_id: missing: every record names the conversation it labels",
        f"{path}:5: value: expected a number, got 'y'",
    ]


def test_a_file_wrong_on_every_line_shows_the_first_problems(tmp_path: Path) -> None:
    path = write(tmp_path, "l.jsonl", "[]\n" * 25)
    with pytest.raises(LabelsError) as info:
        load_labels(path)
    assert len(info.value.problems) == 25
    lines = str(info.value).splitlines()
    assert len(lines) == LabelsError.SHOWN + 1
    assert lines[0].startswith(f"{path}:1: expected an object")
    assert lines[-1] == "... and 5 more problems"


def test_an_unknown_format_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "labels.txt", "conversation_id,label\nc1,good\n")
    with pytest.raises(
        LabelsError, match=r"labels.txt: format: expected json, jsonl or csv, got 'tsv'"
    ):
        load_labels(path, format="tsv")


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LabelsError, match="cannot read"):
        load_labels(tmp_path / "absent.json")
