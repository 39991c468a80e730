"""The judge against people, live from the lake: for each judged metric, the labels that count
(`labels.CURRENT_LABELS`) paired with the score the judge gave the same conversation, and the
statistics `spanscore judge-check` prints (`calibration.agreement`).

A label is paired with the score of its run when it names one, else with the newest score of
the metric for its conversation. The pair compares what both said: the categorical label when
the reviewer gave one, else the value on the metric's scale, else pass or fail. A label that
says none of these (a comment alone) is not paired.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from spanscore.evaluation.calibration.agreement import Category, HumanLabel, agreement
from spanscore.evaluation.review.labels import CURRENT_LABELS
from spanscore.lake import ALIAS

# Each label of a metric with the score it reviews: its run's, else the newest run's.
_PAIRS = f"""
WITH l AS (SELECT * FROM {CURRENT_LABELS} WHERE metric IS NOT NULL
           AND (passed IS NOT NULL OR value IS NOT NULL OR label IS NOT NULL)
           AND (? IS NULL OR metric = ?)),
s AS (
    SELECT s.run_id, s.conversation_id, s.scenario_id, s.metric, s.passed, s.value, s.label,
           s.error, r.started_at
    FROM {ALIAS}.scores s JOIN {ALIAS}.eval_runs r USING (run_id)
    WHERE s.metric IN (SELECT metric FROM l)
      AND s.conversation_id IN (SELECT conversation_id FROM l)
)
SELECT l.conversation_id, l.metric, l.reviewer, l.passed, l.value, l.label,
       s.run_id, s.passed, s.value, s.label, s.error, l.label_id
FROM l LEFT JOIN s ON s.conversation_id = l.conversation_id AND s.metric = l.metric
    AND (l.run_id IS NULL OR s.run_id = l.run_id)
    AND (l.scenario_id IS NULL OR s.scenario_id IS NOT DISTINCT FROM l.scenario_id)
QUALIFY row_number() OVER (
    PARTITION BY l.label_id ORDER BY s.started_at DESC NULLS LAST, s.run_id DESC
) = 1
ORDER BY l.metric, l.conversation_id, l.reviewer
"""


def _verdict(passed: Any, value: Any, label: Any, kind: str) -> Category | None:
    if kind == "label":
        return None if label is None else str(label)
    if kind == "value":
        if value is None:
            return None
        number = float(value)
        return int(number) if number.is_integer() else number
    return None if passed is None else ("pass" if passed else "fail")


_KINDS = ("label", "value", "passed")


def _kind_of(said: list[tuple[Any, Any, Any]]) -> str:
    """`label`, `value` or `passed`: what to compare the labels of one metric on."""
    counts = {kind: sum(1 for s in said if _verdict(*s, kind) is not None) for kind in _KINDS}
    for kind in _KINDS:
        if counts[kind] == len(said):
            return kind
    return max(_KINDS, key=lambda kind: counts[kind])


def judge_agreement(
    con: duckdb.DuckDBPyConnection, metric: str | None = None
) -> list[dict[str, Any]]:
    """Per judged metric with labels: the agreement (`Agreement.to_dict()`), the number of
    labels, and each disagreement (conversation, reviewer, human and judge verdicts, run)."""
    rows = con.execute(_PAIRS, [metric, metric]).fetchall()
    by_metric: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_metric.setdefault(row[1], []).append(row)
    result = []
    for name, pairs in sorted(by_metric.items()):
        # One kind per metric: the richest that every label of it states (a category, a
        # point on the scale, pass or fail), else the one most state; labels without it are
        # counted as not compared, never mixed with the others.
        kind = _kind_of([(r[3], r[4], r[5]) for r in pairs])
        compared = []
        disagreements = []
        for row in pairs:
            if _verdict(row[3], row[4], row[5], kind) is None:
                continue
            human = _verdict(row[3], row[4], row[5], kind)
            judge = _verdict(row[7], row[8], row[9], kind) if row[6] is not None else None
            assert human is not None
            compared.append((human, judge))
            if judge != human:
                disagreements.append(
                    {
                        "conversation_id": row[0],
                        "reviewer": row[2],
                        "human": human,
                        "judge": judge,
                        "run_id": row[6],
                        "judge_error": row[10],
                    }
                )
        stats = agreement(compared, ordinal=kind == "value")
        result.append(
            {
                "metric": name,
                "compared": kind,
                "labels": len(pairs),
                "not_compared": len(pairs) - len(compared),
                "agreement": stats.to_dict(),
                "text": stats.render(),
                "disagreements": disagreements,
            }
        )
    return result


def lake_labels(
    con: duckdb.DuckDBPyConnection, metric: str, *, reviewers: Sequence[str] = ()
) -> tuple[list[HumanLabel], int]:
    """The lake's labels of `metric` as `judge-check` reads a labels file: one per conversation
    (the newest that counts, of the given reviewers or any), its category or value. Returns
    them and the number of labels that gave neither (pass or fail alone, a comment)."""
    rows = con.execute(
        f"SELECT conversation_id, label, value, reviewer, created_at FROM {CURRENT_LABELS} "
        "WHERE metric = ? AND (len(?) = 0 OR list_contains(?, reviewer)) "
        "ORDER BY conversation_id, created_at DESC",
        [metric, list(reviewers), list(reviewers)],
    ).fetchall()
    labels: dict[str, HumanLabel] = {}
    unusable = 0
    for conversation_id, label, value, reviewer, _ in rows:
        if conversation_id in labels:
            continue
        category: Category | None
        if label is not None:
            category = str(label)
        elif value is not None:
            number = float(value)
            category = int(number) if number.is_integer() else number
        else:
            unusable += 1
            continue
        labels[conversation_id] = HumanLabel(
            conversation_id, category, where=f"the lake's labels ({reviewer})"
        )
    return list(labels.values()), unusable
