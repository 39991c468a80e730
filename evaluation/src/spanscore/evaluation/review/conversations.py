"""The conversations, filtered, counted and paged by key; and one conversation as the review
app shows it.

The list reads the spans' own columns (the aggregates `conversations` gives, without rebuilding
any turn), newest first, and pages by key: `after` is the last row's (start, id), so a page
costs the same however deep it is and a conversation arriving meanwhile moves no row.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson
from pydantic import BaseModel, ConfigDict, Field

from spanscore.evaluation.report.conversations import conversation_detail
from spanscore.evaluation.review.labels import labels_of
from spanscore.evaluation.runs.store import ScoreRecord
from spanscore.evaluation.simulation import records
from spanscore.evaluation.trajectory.load import load_trajectory
from spanscore.evaluation.trajectory.model import Trajectory
from spanscore.lake import ALIAS

MAX_PAGE = 200
# Characters of a value the conversation page shows before "… N more" (the whole value is one
# request away: the raw spans).
VALUE_LIMIT = 20_000


class ConversationFilter(BaseModel):
    """Which conversations: every field narrows the list (all of them apply)."""

    model_config = ConfigDict(extra="forbid")

    since: dt.datetime | None = None  # started at or after
    until: dt.datetime | None = None  # started before
    service: str | None = None
    agent: str | None = None
    scenario: str | None = None  # its scenario.id attribute, or a scenario that scored it
    run: str | None = None  # scored by this run
    failed: str | None = None  # a metric that failed (in `run`, when given)
    failing: bool | None = None  # True: some metric failed (in `run`, when given)
    simulated: bool | None = None  # True: simulated only; False: production only
    labelled: bool | None = None  # True: with a label; False: none yet
    text: str | None = Field(default=None, max_length=500)  # in user messages, tool calls
    after: str | None = None  # the `next` of the previous page
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)

    def query(self) -> dict[str, str]:
        """The filter as URL query parameters (only what is set), without the page."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(exclude={"after", "limit"}).items():
            if value is None:
                continue
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, dt.datetime):
                out[key] = value.isoformat()
            else:
                out[key] = str(value)
        return out


@dataclass
class ConversationPage:
    rows: list[dict[str, Any]]
    count: int  # conversations matching the filter, on every page
    next: str | None  # `after` for the next page; None on the last
    filter: dict[str, str] = field(default_factory=dict)


def _cursor(start: dt.datetime | None, conversation_id: str) -> str:
    raw = orjson.dumps([start.isoformat() if start else None, conversation_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uncursor(text: str) -> tuple[dt.datetime | None, str]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        start, conversation_id = orjson.loads(raw)
        return (dt.datetime.fromisoformat(start) if start else None, str(conversation_id))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"`after` is not a page key this app gave: {text[:40]!r}") from exc


def _where(f: ConversationFilter) -> tuple[list[str], list[Any], list[str], list[Any]]:
    """Conditions on the spans read (pushed into the scan) and on the conversations they make."""
    span_where: list[str] = ["conversation_id IS NOT NULL"]
    span_params: list[Any] = []
    conv_where: list[str] = []
    conv_params: list[Any] = []
    if f.since is not None:
        # A conversation started at or after `since` has no span before it.
        span_where.append("start_time >= ?")
        span_params.append(f.since)
    if f.until is not None:
        conv_where.append("start_time < ?")
        conv_params.append(f.until)
    for column, value in (("service_name", f.service), ("agent_name", f.agent)):
        if value is not None:
            conv_where.append(f"{column} = ?")
            conv_params.append(value)
    ids: list[tuple[str, list[Any]]] = []
    if f.scenario is not None:
        ids.append(
            (
                f"""SELECT conversation_id FROM {ALIAS}.spans
                    WHERE attributes->>'$."scenario.id"' = ?
                    UNION SELECT conversation_id FROM {ALIAS}.scores WHERE scenario_id = ?""",
                [f.scenario, f.scenario],
            )
        )
    if f.run is not None or f.failed is not None or f.failing:
        ids.append(
            (
                f"""SELECT conversation_id FROM {ALIAS}.scores
                    WHERE (? IS NULL OR run_id = ?) AND (? IS NULL OR metric = ?)
                      AND (NOT ? OR passed = false OR error IS NOT NULL)""",
                [f.run, f.run, f.failed, f.failed, f.failed is not None or bool(f.failing)],
            )
        )
    if f.text:
        pattern = "%" + f.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        ids.append(
            (
                f"""SELECT conversation_id FROM {ALIAS}.spans
                    WHERE user_message ILIKE ? ESCAPE '\\'
                       OR tool_arguments::VARCHAR ILIKE ? ESCAPE '\\'
                       OR tool_result ILIKE ? ESCAPE '\\'
                       OR response_text ILIKE ? ESCAPE '\\'""",
                [pattern] * 4,
            )
        )
    for sql, params in ids:
        span_where.append(f"conversation_id IN ({sql})")
        span_params += params
    for flag, sql in (
        (f.simulated, f"SELECT conversation_id FROM {ALIAS}.simulated_conversations"),
        (f.labelled, f"SELECT conversation_id FROM {ALIAS}.labels"),
    ):
        if flag is not None:
            span_where.append(f"conversation_id {'' if flag else 'NOT '}IN ({sql})")
    return span_where, span_params, conv_where, conv_params


def list_conversations(con: duckdb.DuckDBPyConnection, f: ConversationFilter) -> ConversationPage:
    """A page of the conversations `f` selects, newest first, with the count of all of them.

    In two steps: which conversations (their ids and starts only, the cheapest aggregate of
    the spans, from which the count and the page's keys come), then what the page shows of
    its own rows alone."""
    span_where, span_params, conv_where, conv_params = _where(f)
    page_where = list(conv_where)
    page_params = list(conv_params)
    if f.after:
        start, conversation_id = _uncursor(f.after)
        page_where.append("(start_time, conversation_id) < (?, ?)")
        page_params += [start, conversation_id]
    # Who and where only when a filter asks for them: they cost the most of the aggregate.
    who = ""
    if f.service is not None or f.agent is not None:
        who = """, arg_min(agent_name, start_time_unix_nano)
                       FILTER (WHERE agent_name IS NOT NULL) AS agent_name,
                   arg_min(service_name, start_time_unix_nano)
                       FILTER (WHERE service_name IS NOT NULL) AS service_name"""
    chosen = f"""
        WITH c AS (
            SELECT conversation_id, min(start_time) AS start_time{who}
            FROM {ALIAS}.spans WHERE {" AND ".join(span_where)}
            GROUP BY conversation_id
        ),
        matching AS (SELECT * FROM c WHERE {" AND ".join(conv_where) or "true"})"""
    found = con.execute(
        f"""{chosen},
        page AS (
            SELECT conversation_id, start_time FROM matching
            WHERE {" AND ".join(page_where) or "true"}
            ORDER BY start_time DESC, conversation_id DESC LIMIT ?
        )
        SELECT list(conversation_id ORDER BY start_time DESC, conversation_id DESC),
               (SELECT count(*) FROM matching)
        FROM page""",
        [*span_params, *conv_params, *page_params, f.limit + 1],
    ).fetchone()
    ids: list[str] = list(found[0] or []) if found else []
    count = int(found[1]) if found and found[1] is not None else 0
    more = len(ids) > f.limit
    ids = ids[: f.limit]
    rows = _page_rows(con, ids)
    last = rows[-1] if rows else None
    return ConversationPage(
        rows=rows,
        count=count,
        next=_cursor(last["start_time"], last["conversation_id"]) if more and last else None,
        filter=f.query(),
    )


def _page_rows(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list[dict[str, Any]]:
    """What the list shows of each of `ids`, in their order."""
    if not ids:
        return []
    cursor = con.execute(
        f"""
        WITH page AS (
            SELECT conversation_id,
                   min(start_time) AS start_time, max(end_time) AS end_time,
                   arg_min(agent_name, start_time_unix_nano)
                       FILTER (WHERE agent_name IS NOT NULL) AS agent_name,
                   arg_min(service_name, start_time_unix_nano)
                       FILTER (WHERE service_name IS NOT NULL) AS service_name,
                   count(*) AS span_count,
                   count(*) FILTER (WHERE status_code = 'ERROR' OR error_type IS NOT NULL)
                       AS error_count,
                   arg_min(user_message, start_time_unix_nano)
                       FILTER (WHERE user_message IS NOT NULL) AS first_user_message
            FROM {ALIAS}.spans WHERE list_contains(?, conversation_id)
            GROUP BY conversation_id
        ),
        failing AS (
            SELECT conversation_id, list(DISTINCT metric ORDER BY metric) AS failing
            FROM {ALIAS}.scores WHERE list_contains(?, conversation_id)
              AND (passed = false OR error IS NOT NULL)
            GROUP BY ALL
        ),
        labelled AS (
            SELECT conversation_id, count(*) AS label_count FROM {ALIAS}.labels
            WHERE list_contains(?, conversation_id) GROUP BY ALL
        ),
        simulated AS (
            SELECT DISTINCT conversation_id FROM {ALIAS}.simulated_conversations
            WHERE list_contains(?, conversation_id)
        )
        SELECT page.*, coalesce(failing.failing, []) AS failing,
               coalesce(labelled.label_count, 0) AS label_count,
               simulated.conversation_id IS NOT NULL AS simulated
        FROM page
        LEFT JOIN failing USING (conversation_id)
        LEFT JOIN labelled USING (conversation_id)
        LEFT JOIN simulated USING (conversation_id)""",
        [ids, ids, ids, ids],
    )
    names = [d[0] for d in cursor.description or ()]
    by_id = {r[0]: dict(zip(names, r, strict=True)) for r in cursor.fetchall()}
    return [by_id[i] for i in ids if i in by_id]


def _scores(con: duckdb.DuckDBPyConnection, conversation_id: str) -> list[dict[str, Any]]:
    cursor = con.execute(
        f"""SELECT s.run_id, r.suite_name, r.started_at, r.simulation_id, s.scenario_id,
                   s.metric, s.value, s.label, s.passed, s.threshold, s.explanation, s.details,
                   s.error, s.created_at
            FROM {ALIAS}.scores s LEFT JOIN {ALIAS}.eval_runs r USING (run_id)
            WHERE s.conversation_id = ?
            ORDER BY r.started_at DESC NULLS LAST, s.run_id, s.scenario_id NULLS FIRST, s.metric
        """,
        [conversation_id],
    )
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def _first_steps(t: Trajectory, max_steps: int) -> tuple[Trajectory, int]:
    """The trajectory cut after its first `max_steps` steps, and how many steps it has."""
    total = sum(len(turn.steps) for turn in t.turns)
    if total <= max_steps:
        return t, total
    turns, left = [], max_steps
    for turn in t.turns:
        if left <= 0:
            break
        turns.append(turn.model_copy(update={"steps": turn.steps[:left]}))
        left -= len(turn.steps)
    return t.model_copy(update={"turns": turns}), total


def conversation_view(
    con: duckdb.DuckDBPyConnection,
    conversation_id: str,
    *,
    run: str | None = None,
    max_steps: int | None = None,
    value_limit: int = VALUE_LIMIT,
) -> dict[str, Any] | None:
    """One conversation: its trajectory as the report draws it (`detail`, with the scores of
    `run`, else of the newest run that scored it, marked on its calls; its first `max_steps`
    steps when given: `step_count` says how many it has; its values cut at `value_limit`
    characters), its scores in every run, its labels
    (those that count, and the history), and how a simulation drove it. None: no such
    conversation."""
    trajectory = load_trajectory(con, conversation_id)
    step_count = sum(len(turn.steps) for turn in trajectory.turns) if trajectory else 0
    shown = trajectory
    if trajectory is not None and max_steps is not None:
        shown, step_count = _first_steps(trajectory, max_steps)
    simulated = records.simulated_conversation(con, conversation_id)
    scores = _scores(con, conversation_id)
    if trajectory is None and simulated is None and not scores:
        return None
    runs = list(dict.fromkeys(s["run_id"] for s in scores))
    shown_run = run if run is not None else (runs[0] if runs else None)
    marked = [
        ScoreRecord(
            conversation_id=conversation_id,
            scenario_id=s["scenario_id"],
            metric=s["metric"],
            value=s["value"],
            label=s["label"],
            passed=s["passed"],
            threshold=s["threshold"],
            explanation=s["explanation"],
            details=s["details"],
            error=s["error"],
        )
        for s in scores
        if s["run_id"] == shown_run
    ]
    detail = conversation_detail(shown, marked, value_limit) if shown is not None else None
    history = labels_of(con, conversation_id, history=True)
    simulation = None
    if simulated is not None:
        trial, turns = simulated
        simulation = {**vars(trial), "turns": [vars(t) for t in turns]}
    return {
        "conversation_id": conversation_id,
        "detail": detail,
        "shown_run": shown_run,
        "runs": runs,
        "scores": scores,
        "labels": [label for label in history if label["counts"]],
        "label_history": history,
        "simulation": simulation,
        "span_count": trajectory.span_count if trajectory is not None else 0,
        "step_count": step_count,
        "steps_shown": sum(len(turn["steps"]) for turn in detail["turns"]) if detail else 0,
    }


def raw_spans(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, offset: int = 0, limit: int = 100
) -> dict[str, Any]:
    """The conversation's spans as stored, in time order, a page at a time."""
    total = con.execute(
        f"SELECT count(*) FROM {ALIAS}.spans WHERE conversation_id = ?", [conversation_id]
    ).fetchone()
    cursor = con.execute(
        f"""SELECT trace_id, span_id, parent_span_id, name, kind, start_time, end_time,
                   duration_ms, status_code, status_message, service_name, operation,
                   tool_name, tool_call_id, tool_arguments, tool_result, error_type,
                   convention, attributes, events
            FROM {ALIAS}.spans WHERE conversation_id = ?
            ORDER BY start_time_unix_nano, span_id LIMIT ? OFFSET ?""",
        [conversation_id, limit, offset],
    )
    names = [d[0] for d in cursor.description or ()]
    return {
        "conversation_id": conversation_id,
        "total": int(total[0]) if total else 0,
        "offset": offset,
        "spans": [dict(zip(names, r, strict=True)) for r in cursor.fetchall()],
    }
