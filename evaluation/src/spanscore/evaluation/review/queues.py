"""Review queues: a named list of conversations (or of their scores of one metric) that people
work through, built once from a filter or from a run's failures, sampled with a seed, so that
two reviewers see the same items in the same order.

A reviewer's progress is the queue's items they have labelled (`labels.CURRENT_LABELS`, any
label by them of the item's conversation and metric, and of its run for a score's item); the
next item is the first they have not.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any, Literal

import duckdb
import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanscore.evaluation.review.conversations import (
    MAX_PAGE,
    ConversationFilter,
    list_conversations,
)
from spanscore.evaluation.review.labels import CURRENT_LABELS, NotInLake
from spanscore.evaluation.runs import store
from spanscore.lake import ALIAS, arrow_schema, retrying
from spanscore.lake.schema.tables import REVIEW_QUEUE_ITEMS, REVIEW_QUEUES

MAX_QUEUE = 1_000
# Conversations a filter may offer a queue's sample (newest first).
MAX_CANDIDATES = 20_000


class QueueError(ValueError):
    """A queue that cannot be built or found."""


class QueueSpec(BaseModel):
    """A queue to build: from a run's scores (`run`: its failures, or with `failed_only`
    false every score of `metric`, to check a judge on passes too) or from a filter of the
    conversations page; `size` items, the first ones or a seeded random sample. With a
    `metric`, each item is a score of it to review (of the run, else of the newest run that
    scored the conversation)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
    run: str | None = None
    metric: str | None = None
    failed_only: bool = True
    filter: ConversationFilter | None = None
    size: int = Field(default=20, ge=1, le=MAX_QUEUE)
    sample: Literal["random", "newest"] = "random"
    seed: int = 0

    @model_validator(mode="after")
    def _one_source(self) -> QueueSpec:
        if (self.run is None) == (self.filter is None):
            raise ValueError("a queue is built from a run's failures (run) or a filter, not both")
        if not self.failed_only and self.metric is None:
            raise ValueError("failed_only false samples one metric's scores: give the metric")
        return self


def _candidates(con: duckdb.DuckDBPyConnection, spec: QueueSpec) -> list[dict[str, Any]]:
    if spec.run is not None:
        rows = con.execute(
            f"""SELECT conversation_id, metric, scenario_id, run_id FROM {ALIAS}.scores
                WHERE run_id = ? AND (NOT ? OR passed = false OR error IS NOT NULL)
                  AND (? IS NULL OR metric = ?)
                ORDER BY conversation_id, scenario_id NULLS FIRST, metric""",
            [spec.run, spec.failed_only, spec.metric, spec.metric],
        ).fetchall()
        if spec.metric is None:
            # One item a conversation: the whole of it is reviewed.
            seen: dict[str, dict[str, Any]] = {}
            for conversation_id, _, _, run_id in rows:
                seen.setdefault(
                    conversation_id,
                    {
                        "conversation_id": conversation_id,
                        "metric": None,
                        "scenario_id": None,
                        "run_id": run_id,
                    },
                )
            return list(seen.values())
        return [
            {"conversation_id": c, "metric": m, "scenario_id": s, "run_id": r}
            for c, m, s, r in rows
        ]
    assert spec.filter is not None
    page_filter = spec.filter.model_copy(update={"limit": MAX_PAGE, "after": None})
    ids: list[str] = []
    while len(ids) < MAX_CANDIDATES:
        page = list_conversations(con, page_filter)
        ids += [r["conversation_id"] for r in page.rows]
        if page.next is None:
            break
        page_filter = page_filter.model_copy(update={"after": page.next})
    if spec.metric is None:
        return [
            {"conversation_id": c, "metric": None, "scenario_id": None, "run_id": None} for c in ids
        ]
    # Each conversation's score of the metric by the newest run that gave one.
    scored = con.execute(
        f"""SELECT s.conversation_id, s.scenario_id, s.run_id
            FROM {ALIAS}.scores s JOIN {ALIAS}.eval_runs r USING (run_id)
            WHERE s.metric = ? AND list_contains(?, s.conversation_id)
            QUALIFY row_number() OVER (
                PARTITION BY s.conversation_id ORDER BY r.started_at DESC, s.run_id DESC,
                s.scenario_id NULLS FIRST) = 1""",
        [spec.metric, ids],
    ).fetchall()
    newest = {c: (scenario, run) for c, scenario, run in scored}
    return [
        {
            "conversation_id": c,
            "metric": spec.metric,
            "scenario_id": newest[c][0],
            "run_id": newest[c][1],
        }
        for c in ids
        if c in newest
    ]


def build_queue(con: duckdb.DuckDBPyConnection, spec: QueueSpec, created_by: str) -> dict[str, Any]:
    """Build and store the queue; returns it as `queue_view` gives it."""
    if con.execute(f"SELECT 1 FROM {ALIAS}.review_queues WHERE queue = ?", [spec.name]).fetchone():
        raise QueueError(f"a queue named {spec.name!r} exists already: choose another name")
    if spec.run is not None and not store.run_row(con, spec.run):
        raise NotInLake(f"no evaluation run {spec.run!r} in this lake")
    candidates = _candidates(con, spec)
    if not candidates:
        raise QueueError("nothing to review: the queue's source selects no conversation")
    if spec.sample == "random" and len(candidates) > spec.size:
        chosen = random.Random(spec.seed).sample(candidates, spec.size)
    else:
        chosen = candidates[: spec.size]
    now = dt.datetime.now(dt.UTC)
    source = spec.model_dump(mode="json", exclude={"name", "size", "seed"})
    queue_row = {
        "queue": spec.name,
        "source": orjson.dumps(source).decode(),
        "size": spec.size,
        "seed": spec.seed,
        "created_by": created_by,
        "created_at": now,
    }
    items = [
        {**item, "queue": spec.name, "position": i, "added_at": now}
        for i, item in enumerate(chosen)
    ]
    cur = con

    def write() -> None:
        cur.execute("BEGIN TRANSACTION")
        try:
            cur.register(
                "spanscore_queue",
                pa.Table.from_pylist([queue_row], schema=arrow_schema(REVIEW_QUEUES)),
            )
            cur.register(
                "spanscore_items",
                pa.Table.from_pylist(items, schema=arrow_schema(REVIEW_QUEUE_ITEMS)),
            )
            cur.execute(f"INSERT INTO {ALIAS}.review_queues BY NAME SELECT * FROM spanscore_queue")
            cur.execute(
                f"INSERT INTO {ALIAS}.review_queue_items BY NAME SELECT * FROM spanscore_items"
            )
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        finally:
            cur.unregister("spanscore_queue")
            cur.unregister("spanscore_items")

    retrying(write, con=cur, what="write the review queue")
    return queue_view(con, spec.name, created_by)


def queues(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every queue, newest first, with its items and how many have a label by anyone."""
    cursor = con.execute(
        f"""SELECT q.queue, q.source, q.size, q.seed, q.created_by, q.created_at,
                   count(i.position) AS items,
                   count(i.position) FILTER (WHERE EXISTS (
                       SELECT 1 FROM {CURRENT_LABELS} l
                       WHERE l.conversation_id = i.conversation_id
                         AND l.metric IS NOT DISTINCT FROM i.metric
                         AND (i.metric IS NULL OR i.run_id IS NULL
                              OR l.run_id IS NOT DISTINCT FROM i.run_id)
                   )) AS labelled
            FROM {ALIAS}.review_queues q
            LEFT JOIN {ALIAS}.review_queue_items i USING (queue)
            GROUP BY ALL ORDER BY q.created_at DESC, q.queue"""
    )
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def queue_view(con: duckdb.DuckDBPyConnection, name: str, reviewer: str) -> dict[str, Any]:
    """The queue's items in order, each marked done when `reviewer` has labelled it; the
    position of the next item they have not labelled (None: all done)."""
    head = con.execute(
        f"SELECT queue, source, size, seed, created_by, created_at "
        f"FROM {ALIAS}.review_queues WHERE queue = ?",
        [name],
    ).fetchone()
    if head is None:
        raise NotInLake(f"no review queue {name!r} in this lake")
    cursor = con.execute(
        f"""SELECT i.position, i.conversation_id, i.metric, i.scenario_id, i.run_id,
                   EXISTS (
                       SELECT 1 FROM {CURRENT_LABELS} l
                       WHERE l.reviewer = ? AND l.conversation_id = i.conversation_id
                         AND l.metric IS NOT DISTINCT FROM i.metric
                         AND (i.metric IS NULL OR i.run_id IS NULL
                              OR l.run_id IS NOT DISTINCT FROM i.run_id)
                   ) AS done
            FROM {ALIAS}.review_queue_items i WHERE i.queue = ? ORDER BY i.position""",
        [reviewer, name],
    )
    names = [d[0] for d in cursor.description or ()]
    items = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    done = sum(1 for i in items if i["done"])
    pending = [i["position"] for i in items if not i["done"]]
    return {
        "queue": head[0],
        "source": orjson.loads(head[1]) if head[1] else None,
        "size": head[2],
        "seed": head[3],
        "created_by": head[4],
        "created_at": head[5],
        "reviewer": reviewer,
        "items": items,
        "done": done,
        "next": pending[0] if pending else None,
    }
