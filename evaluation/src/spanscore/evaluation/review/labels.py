"""Human labels: rows of the lake's `labels` table, written by reviewers in the review app,
through its JSON API, or by a script.

A reviewer may change a label: every label is kept (the history), and the newest label per
reviewer, conversation, metric and run counts (`CURRENT_LABELS`). A label of the whole
conversation has no metric; a label of a score names its run (and scenario).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanscore.lake import ALIAS, append_rows, arrow_schema
from spanscore.lake.schema.tables import LABELS

# The labels that count: each reviewer's newest for a conversation, metric and run. SQL, so
# the app, the agreement and a user's own query read the same rows.
COUNTS = """row_number() OVER (
        PARTITION BY conversation_id, coalesce(metric, ''), coalesce(run_id, ''), reviewer
        ORDER BY created_at DESC, label_id DESC
    ) = 1"""
CURRENT_LABELS = f"(SELECT * FROM {ALIAS}.labels QUALIFY {COUNTS})"

MAX_COMMENT = 10_000


class LabelError(ValueError):
    """A label that cannot be stored (nothing said, an unknown conversation or run...)."""


class NotInLake(LookupError):
    """What was asked for (a conversation, a run's score, a queue) is not in the lake."""


class NewLabel(BaseModel):
    """What a reviewer says of a conversation, or of one of its scores."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(min_length=1, max_length=1_000)
    metric: str | None = Field(default=None, max_length=1_000)
    scenario_id: str | None = Field(default=None, max_length=1_000)
    run_id: str | None = Field(default=None, max_length=200)
    passed: bool | None = None
    value: float | None = None
    label: str | None = Field(default=None, max_length=1_000)
    judge_agreed: bool | None = None
    comment: str | None = Field(default=None, max_length=MAX_COMMENT)
    queue: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _says_something(self) -> NewLabel:
        said = (self.passed, self.value, self.label, self.judge_agreed, self.comment)
        if all(v is None or v == "" for v in said):
            raise ValueError(
                "a label says something: passed, value, label, judge_agreed or comment"
            )
        if self.value is not None and not math.isfinite(self.value):
            raise ValueError("value must be a finite number")
        if self.judge_agreed is not None and self.run_id is None:
            raise ValueError("judge_agreed reviews a score: give its run_id and metric")
        if self.run_id is not None and self.metric is None:
            raise ValueError("a label of a run's score names its metric")
        return self


def _judge_score(
    con: duckdb.DuckDBPyConnection, label: NewLabel
) -> tuple[str | None, bool | None, float | None, str | None] | None:
    """(scenario, passed, value, label) of the score the label reviews; None: no such score."""
    row = con.execute(
        f"SELECT scenario_id, passed, value, label FROM {ALIAS}.scores "
        "WHERE run_id = ? AND conversation_id = ? AND metric = ? "
        "AND (? IS NULL OR scenario_id IS NOT DISTINCT FROM ?) "
        "ORDER BY scenario_id NULLS FIRST LIMIT 1",
        [label.run_id, label.conversation_id, label.metric, label.scenario_id, label.scenario_id],
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


def add_label(con: duckdb.DuckDBPyConnection, label: NewLabel, reviewer: str) -> dict[str, Any]:
    """Store a label by `reviewer`; returns the stored row. Agreeing with the judge copies the
    score's verdict into the label, disagreeing with a pass or fail says the other, so the label
    always states what the reviewer holds true."""
    if not reviewer:
        raise LabelError("a label needs a reviewer")
    known = (
        con.execute(
            f"SELECT 1 FROM {ALIAS}.spans WHERE conversation_id = ? LIMIT 1",
            [label.conversation_id],
        ).fetchone()
        or con.execute(
            f"SELECT 1 FROM {ALIAS}.scores WHERE conversation_id = ? LIMIT 1",
            [label.conversation_id],
        ).fetchone()
    )
    if not known:
        raise NotInLake(f"no conversation {label.conversation_id!r} in this lake")
    row = label.model_dump()
    if label.run_id is not None:
        score = _judge_score(con, label)
        if score is None:
            raise NotInLake(
                f"run {label.run_id!r} has no score {label.metric!r} "
                f"for conversation {label.conversation_id!r}"
            )
        scenario, passed, value, category = score
        row["scenario_id"] = scenario
        if label.judge_agreed is True:
            for key, judged in (("passed", passed), ("value", value), ("label", category)):
                if row[key] is None:
                    row[key] = judged
        elif label.judge_agreed is False and row["passed"] is None and passed is not None:
            row["passed"] = not passed
    row.update(
        label_id=uuid.uuid4().hex,
        reviewer=reviewer,
        created_at=dt.datetime.now(dt.UTC),
    )
    schema = arrow_schema(LABELS)
    append_rows(con, "labels", pa.Table.from_pylist([row], schema=schema))
    return row


def labels_of(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, history: bool = False
) -> list[dict[str, Any]]:
    """A conversation's labels, newest first: those that count, or every one (`history`),
    each with `counts`: whether it is its reviewer's newest."""
    cursor = con.execute(
        f"SELECT *, {COUNTS} AS counts FROM {ALIAS}.labels WHERE conversation_id = ? "
        "ORDER BY created_at DESC, label_id",
        [conversation_id],
    )
    names = [d[0] for d in cursor.description or ()]
    rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    return rows if history else [r for r in rows if r["counts"]]
