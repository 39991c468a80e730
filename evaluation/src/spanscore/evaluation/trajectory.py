"""Trajectories: each conversation rebuilt from its spans, whatever produced them.

A trajectory is conversation -> turns -> steps. A step is a model call, a tool call or an agent
hand-off, in causal order. The collector has already read every producer's convention into the
same `spans` columns (`operation`, `tool_*`, `user_message`, `tool_calls_requested`,
`tool_results`, `response_text`), and the rules that make conversations, turns and tool calls
of them are SQL, written once in `spanscore.lake.schema` and shared with the `tool_calls`,
`turns` and `conversations` views (docs/conversations.md). Rebuilding is one query over a
window (`trajectory_rows`) and one pass in Python that only assembles what it returns: parsing
arguments and results (JSON, else a Python literal repr read with `ast.literal_eval`, never
`eval`; anything else stays a string) and saying what could not be read. Nothing is fatal: a
conversation gets a warning and the rest is rebuilt.
"""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar

import duckdb
import orjson
import pyarrow as pa
from pydantic import BaseModel, Field

from spanscore.lake.schema import TRAJECTORY_COLUMNS, trajectory_rows_sql

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ToolCall(BaseModel):
    kind: Literal["tool_call"] = "tool_call"
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None  # the error's type, else its message
    error_message: str | None = None  # what the failure said (status description, exception)
    call_id: str | None = None
    span_id: str | None = None
    trace_id: str | None = None
    start_time: dt.datetime | None = None
    latency_ms: float | None = None
    parallel_group: int | None = None  # steps requested by the same model response
    source: Literal["span", "messages", "span+messages"] = "span"


class ModelCall(BaseModel):
    kind: Literal["model_call"] = "model_call"
    span_id: str
    trace_id: str
    name: str
    start_time: dt.datetime | None = None
    latency_ms: float | None = None
    requested: list[str] = Field(default_factory=list)  # names of the tools it asked for
    response_text: str | None = None
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class Handoff(BaseModel):
    kind: Literal["handoff"] = "handoff"
    span_id: str
    from_agent: str | None = None
    to_agent: str | None = None
    start_time: dt.datetime | None = None


Step = Annotated[ToolCall | ModelCall | Handoff, Field(discriminator="kind")]


class Turn(BaseModel):
    index: int
    user_message: str | None = None
    steps: list[Step] = Field(default_factory=list)
    final_response: str | None = None

    @cached_property
    def tool_calls(self) -> list[ToolCall]:
        """The turn's tool calls in order (computed once: a trajectory is read, not edited)."""
        return [s for s in self.steps if isinstance(s, ToolCall)]


class Trajectory(BaseModel):
    conversation_id: str
    agent_name: str | None = None
    service_name: str | None = None
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    span_count: int = 0
    # Conversation-level attributes (scenario.id, user.id, gen_ai.tool.definitions, and any
    # attribute asked for when loading): the first value a span of the conversation carries.
    attributes: dict[str, Any] = Field(default_factory=dict)
    turns: list[Turn] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @cached_property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call in order (computed once: a trajectory is read, not edited)."""
        return [c for t in self.turns for c in t.tool_calls]

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Text derived from the trajectory once and reused (the judge's transcript); it
        travels with the trajectory to the process that scores it again."""
        return {}

    @property
    def model_calls(self) -> list[ModelCall]:
        return [s for t in self.turns for s in t.steps if isinstance(s, ModelCall)]

    @property
    def first_user_message(self) -> str | None:
        return next((t.user_message for t in self.turns if t.user_message is not None), None)

    @property
    def final_response(self) -> str | None:
        return next(
            (t.final_response for t in reversed(self.turns) if t.final_response is not None),
            None,
        )


# --- reading the lake ------------------------------------------------------------------------

# Read from every span's attributes (first value per conversation wins), besides the columns.
CONVERSATION_ATTRIBUTES = ("scenario.id", "user.id", "gen_ai.tool.definitions")


def load_trajectories(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
) -> Iterator[Trajectory]:
    """Rebuild the trajectories of the given conversations, or of every conversation with a
    span starting in [since, until). Streams: memory holds one batch of rows.

    `attributes`: span attribute keys to collect into `Trajectory.attributes`, besides
    `CONVERSATION_ATTRIBUTES` (e.g. the keys a suite selects scenarios by)."""
    reader = trajectory_rows(
        con,
        conversation_ids=conversation_ids,
        since=since,
        until=until,
        batch_rows=batch_rows,
        attributes=attributes,
    )
    assembler = _Assembler(attribute_keys(attributes))
    for batch in reader:
        yield from assembler.feed(batch)
    yield from assembler.finish()


def attribute_keys(attributes: Sequence[str] = ()) -> tuple[str, ...]:
    """The attribute keys a load with `attributes` collects, in column order."""
    return tuple(dict.fromkeys((*CONVERSATION_ATTRIBUTES, *attributes)))


def trajectory_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
) -> pa.RecordBatchReader:
    """The rows `load_trajectories` assembles (`spanscore.lake.schema.TRAJECTORY_COLUMNS`), as
    Arrow batches sorted by conversation, each conversation's rows together: for building
    trajectories elsewhere (`trajectories_from_rows`)."""
    params: list[Any] = []
    chosen = where = ""
    if conversation_ids is not None:
        # A registered Arrow table: a list of any length, joined rather than inlined.
        con.register("spanscore_chosen", pa.table({"conversation_id": list(conversation_ids)}))
        chosen = "chosen AS (SELECT conversation_id FROM spanscore_chosen), "
    elif since is not None or until is not None:
        window = []
        if since is not None:
            window.append("start_time >= ?")
            params.append(since)
        if until is not None:
            window.append("start_time < ?")
            params.append(until)
        # Whole conversations: every span of one that started in the window.
        chosen = (
            "chosen AS (SELECT DISTINCT conversation_id FROM spans WHERE "
            + " AND ".join(window)
            + "), "
        )
    if chosen:
        where = "WHERE s.conversation_id IN (SELECT conversation_id FROM chosen)"
    sql = trajectory_rows_sql(chosen, where, attribute_keys(attributes))
    return con.execute(sql, params).to_arrow_reader(batch_rows)


def trajectories_from_rows(
    rows: pa.RecordBatch | pa.Table, attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `trajectory_rows` output holding whole conversations."""
    assembler = _Assembler(attribute_keys(attributes))
    yield from assembler.feed(rows)
    yield from assembler.finish()


def load_trajectory(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, attributes: Sequence[str] = ()
) -> Trajectory | None:
    found = load_trajectories(con, conversation_ids=[conversation_id], attributes=attributes)
    return next(iter(found), None)


# --- assembling ------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def _make(cls: type[M], **values: Any) -> M:
    """A model from values this module produced itself: no validation (like `model_construct`,
    which does more per call than the hot path can pay). Every field must be given."""
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def parse_value(text: Any, warnings: list[str] | None = None, what: str = "value") -> Any:
    """JSON, else a Python literal repr, else the text itself. A JSON string holding a repr
    (how the collector stores arguments that were not JSON) is unwrapped first."""
    if not isinstance(text, str):
        return text
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text
    else:
        if not isinstance(value, str) or value == text:
            return value
        text = value
    stripped = text.strip()
    if stripped[:1] in ("{", "[", "(", "'", '"') or stripped in ("None", "True", "False"):
        try:
            return ast.literal_eval(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if warnings is not None and stripped[:1] in ("{", "["):
                warnings.append(f"{what} is neither JSON nor a Python literal; kept as text")
    return text


def _time(ns: int | None) -> dt.datetime | None:
    if not ns:
        return None
    return _EPOCH + dt.timedelta(microseconds=ns // 1000)


class _Assembler:
    """Trajectories from `trajectory_rows`, batch after batch: a conversation may go on in the
    next batch, so the one being assembled is yielded when the next begins or at the end. The
    rows already say which turn each step is in and in what order: nothing is decided here."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.trajectory: Trajectory | None = None
        self.turns: list[Turn] = []
        self.warnings: list[str] = []

    def finish(self) -> Iterator[Trajectory]:
        if self.trajectory is not None:
            yield self.trajectory
            self.trajectory = None

    def feed(self, batch: pa.RecordBatch | pa.Table) -> Iterator[Trajectory]:
        columns = [c.to_pylist() for c in batch.columns]
        keys = self.keys
        n_fixed = len(TRAJECTORY_COLUMNS)
        turn: Turn | None = self.turns[-1] if self.turns else None
        for row in zip(*columns, strict=True):
            (
                conversation_id,
                kind,
                turn_index,
                span_id,
                trace_id,
                name,
                start_ns,
                end_ns,
                latency_ms,
                error,
                error_message,
                text,
                final_response,
                arguments,
                result,
                call_id,
                parallel_group,
                source,
                requested,
                input_tokens,
                output_tokens,
                agent_name,
                to_agent,
                service_name,
                span_count,
                rootless_traces,
                orphan_spans,
            ) = row[:n_fixed]
            if kind == "tool_call":
                warnings = self.warnings
                if span_id is not None:
                    what = f"tool span {span_id}"
                    arguments = parse_value(arguments, warnings, f"arguments of {what}")
                    result = parse_value(result, warnings, f"result of {what}")
                else:
                    arguments = parse_value(arguments)
                    result = parse_value(result)
                    if result is None:
                        warnings.append(
                            f"turn {turn_index}: tool call {name} ({call_id}) was requested but "
                            "neither a tool span nor a result was recorded"
                        )
                assert turn is not None
                turn.steps.append(
                    _make(
                        ToolCall,
                        kind="tool_call",
                        name=name if name is not None else "unknown",
                        arguments=arguments,
                        result=result,
                        error=error,
                        error_message=error_message,
                        call_id=call_id,
                        span_id=span_id,
                        trace_id=trace_id,
                        start_time=_time(start_ns),
                        latency_ms=latency_ms,
                        parallel_group=parallel_group,
                        source=source,
                    )
                )
            elif kind == "model_call":
                assert turn is not None
                turn.steps.append(
                    _make(
                        ModelCall,
                        kind="model_call",
                        span_id=span_id,
                        trace_id=trace_id,
                        name=name,
                        start_time=_time(start_ns),
                        latency_ms=latency_ms,
                        requested=[str(r) for r in requested] if requested else [],
                        response_text=text,
                        error=error,
                        input_tokens=input_tokens,
                        output_tokens=output_tokens,
                    )
                )
            elif kind == "turn":
                turn = _make(
                    Turn,
                    index=turn_index,
                    user_message=text,
                    steps=[],
                    final_response=final_response,
                )
                self.turns.append(turn)
            elif kind == "handoff":
                assert turn is not None
                turn.steps.append(
                    _make(
                        Handoff,
                        kind="handoff",
                        span_id=span_id,
                        from_agent=agent_name,
                        to_agent=to_agent,
                        start_time=_time(start_ns),
                    )
                )
            else:  # the conversation's own row: the one before is complete
                yield from self.finish()
                self.turns = []
                self.warnings = []
                turn = None
                attributes = {
                    key: parse_value(value)
                    for key, value in zip(keys, row[n_fixed:], strict=True)
                    if value is not None
                }
                if rootless_traces and orphan_spans:
                    self.warnings.append(
                        f"{rootless_traces} trace(s) have no root span ({orphan_spans} span(s) "
                        "with a missing parent): rebuilt from the spans present"
                    )
                self.trajectory = _make(
                    Trajectory,
                    conversation_id=conversation_id,
                    agent_name=agent_name,
                    service_name=service_name,
                    start_time=_time(start_ns),
                    end_time=_time(end_ns),
                    span_count=span_count,
                    attributes=attributes,
                    turns=self.turns,
                    warnings=self.warnings,
                )
