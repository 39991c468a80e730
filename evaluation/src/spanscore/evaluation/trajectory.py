"""Trajectories: each conversation rebuilt from its spans, whatever produced them.

A trajectory is conversation -> turns -> steps. A step is a model call, a tool call or an agent
hand-off, in causal order. The collector has already read every producer's convention into the
same `spans` columns (`operation`, `tool_*`, `user_message`, `tool_calls_requested`,
`tool_results`, `response_text`), so rebuilding is one SQL query over a window and one pass in
Python, never a query per conversation.

Rules, in the order they apply:
- Conversation: the id a span carries; a span without one (its trace id stood in) takes the id
  another span of its trace carries, so spans exported before their root still join.
- Turn: a model call whose latest user message differs from the current turn's, or that comes
  after the current turn's final answer, starts a new turn. Without model calls, one trace is
  one turn.
- Tool calls come from tool spans and from the calls models requested. A requested call is
  joined to its tool span by call id, else by turn, name and order; joined, it appears once.
  A requested call with no span is rebuilt from the messages: its result is the
  `tool_call_response` with the same id in a later model call's input. Calls requested by the
  same model response share a `parallel_group`.
- Arguments and results that are JSON are parsed; Python reprs of literals (`{'a': 1}`) are
  parsed with `ast.literal_eval` (never `eval`); anything else stays a string.
- What cannot be read is never fatal: the conversation gets a warning and the rest is rebuilt.
"""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar

import duckdb
import orjson
import pyarrow as pa
from pydantic import BaseModel, Field

from spanscore.lake.schema import (
    AGENT_OPERATIONS,
    ERROR_MESSAGE_SQL,
    SPAN_ORDER,
    SPANS_WITH_EVENTS,
)

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

COLUMNS = (
    "conversation_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "operation",
    "agent_name",
    "service_name",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "status_code",
    "status_message",
    "error_type",
    "tool_name",
    "tool_call_id",
    "tool_arguments",
    "tool_result",
    "user_message",
    "tool_calls_requested",
    "tool_results",
    "response_text",
    "error_message",  # computed: ERROR_MESSAGE_SQL
)

# Read from every span's attributes (first value per conversation wins), besides the columns.
CONVERSATION_ATTRIBUTES = ("scenario.id", "user.id", "gen_ai.tool.definitions")
_TOKEN_ATTRIBUTES = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",  # OpenInference
    "llm.token_count.completion",
)

# `spans.conversation_id` is stored resolved (`spanscore.lake.schema.RESOLVE_CONVERSATIONS`):
# a conversation's spans are the rows that carry its id, as in the views.
_QUERY = """
WITH {chosen}picked AS (
    SELECT {columns} FROM {spans} s {where}
)
SELECT {selected} FROM picked
ORDER BY conversation_id, {order}
"""


def is_model_call(r: SpanRow) -> bool:
    """`spanscore.lake.schema.MODEL_CALL_SQL`, for one row (the views and the builder agree)."""
    if r.operation == "chat":
        return True
    return (r.tool_calls_requested is not None or r.response_text is not None) and (
        r.operation or ""
    ) not in AGENT_OPERATIONS


@dataclass
class SpanRow:
    """One span as the builder needs it (a plain row: this is the hot path)."""

    conversation_id: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    operation: str | None
    agent_name: str | None
    service_name: str | None
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: str | None
    status_message: str | None
    error_type: str | None
    tool_name: str | None
    tool_call_id: str | None
    tool_arguments: str | None
    tool_result: str | None
    user_message: str | None
    tool_calls_requested: str | None
    tool_results: str | None
    response_text: str | None
    error_message: str | None
    attribute_values: Sequence[str | None] = ()  # _TOKEN_ATTRIBUTES + attribute keys


_span_row: Callable[..., SpanRow] = SpanRow  # positional: the columns, then the attributes


def _json_path(key: str) -> str:
    return "'$.\"" + key.replace("'", "''").replace('"', '\\"') + "\"'"


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
    keys = attribute_keys(attributes)
    reader = span_rows(
        con,
        conversation_ids=conversation_ids,
        since=since,
        until=until,
        batch_rows=batch_rows,
        attributes=attributes,
    )
    pending: list[SpanRow] = []
    for batch in reader:
        yield from _build_all(batch, keys, pending)
    if pending:
        yield build_trajectory(pending, keys)


def _build_all(
    batch: pa.RecordBatch | pa.Table, keys: tuple[str, ...], pending: list[SpanRow]
) -> Iterator[Trajectory]:
    """Trajectories of the conversations that end in this batch; the rows of the last one
    stay in `pending` (it may go on in the next batch). The hot loop: kept flat."""
    columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    fixed, extra = columns[: len(COLUMNS)], columns[len(COLUMNS) :]
    current = pending[0].conversation_id if pending else None
    for values, attribute_values in zip(
        zip(*fixed, strict=True), zip(*extra, strict=True), strict=True
    ):
        if values[0] != current:
            if pending:
                yield build_trajectory(pending, keys)
                pending.clear()
            current = values[0]
        pending.append(_span_row(*values, attribute_values))


def attribute_keys(attributes: Sequence[str] = ()) -> tuple[str, ...]:
    """The attribute keys a load with `attributes` collects, in `attribute_values` order."""
    return tuple(dict.fromkeys((*CONVERSATION_ATTRIBUTES, *attributes)))


def span_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
) -> pa.RecordBatchReader:
    """The span rows `load_trajectories` builds from, as Arrow batches sorted by conversation
    (columns `COLUMNS`): for building trajectories elsewhere (`trajectories_from_rows`)."""
    keys = attribute_keys(attributes)
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
        where = "WHERE conversation_id IN (SELECT conversation_id FROM chosen)"
    paths = [_json_path(k) for k in (*_TOKEN_ATTRIBUTES, *keys)]
    # One JSON parse per span for every key, then one flat column per key: Arrow converts
    # flat columns far faster than a list column.
    extracted = f"json_extract_string(attributes, [{', '.join(paths)}]) AS attribute_list"
    sql = _QUERY.format(
        spans=SPANS_WITH_EVENTS,
        chosen=chosen,
        columns=", ".join(
            [
                *(c for c in COLUMNS if c != "error_message"),
                f"{ERROR_MESSAGE_SQL} AS error_message",
                extracted,
            ]
        ),
        where=where,
        selected=", ".join(
            [*COLUMNS, *(f"attribute_list[{i + 1}] AS a{i}" for i in range(len(paths)))]
        ),
        order=SPAN_ORDER,
    )
    return con.execute(sql, params).to_arrow_reader(batch_rows)


def trajectories_from_rows(
    rows: pa.RecordBatch | pa.Table, attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `span_rows` output holding whole conversations (sorted as given)."""
    keys = attribute_keys(attributes)
    pending: list[SpanRow] = []
    yield from _build_all(rows, keys, pending)
    if pending:
        yield build_trajectory(pending, keys)


def load_trajectory(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, attributes: Sequence[str] = ()
) -> Trajectory | None:
    found = load_trajectories(con, conversation_ids=[conversation_id], attributes=attributes)
    return next(iter(found), None)


# --- building one ----------------------------------------------------------------------------


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


def _latency(row: SpanRow) -> float | None:
    if not row.start_time_unix_nano or not row.end_time_unix_nano:
        return None
    return (row.end_time_unix_nano - row.start_time_unix_nano) / 1e6


def _error(row: SpanRow) -> str | None:
    if row.status_code == "ERROR" or row.error_type:
        return row.error_type or row.status_message or "error"
    return None


def _json_list(text: str | None, warnings: list[str], what: str) -> list[dict[str, Any]]:
    if not text:
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        warnings.append(f"{what} is not valid JSON; ignored")
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def build_trajectory(
    rows: list[SpanRow], attribute_keys: Sequence[str] = CONVERSATION_ATTRIBUTES
) -> Trajectory:
    """One conversation's spans (sorted by start time) as a trajectory. Pure: no I/O.
    `attribute_keys` names the values after the token counts in `SpanRow.attribute_values`."""
    first = rows[0]
    warnings: list[str] = []
    attributes: dict[str, Any] = {}
    n_tokens = len(_TOKEN_ATTRIBUTES)
    n_keys = len(attribute_keys)
    # One pass for what the whole conversation needs before steps are placed.
    known: set[str] = set()
    traces: set[str] = set()
    rooted: set[str] = set()
    start = end = 0
    agent_name = service_name = None
    has_model_calls = False
    results_by_id: dict[str, Any] = {}  # results model inputs carried, by call id (last wins)
    for r in rows:
        known.add(r.span_id)
        traces.add(r.trace_id)
        if not r.parent_span_id:
            rooted.add(r.trace_id)
        if not start or (r.start_time_unix_nano and r.start_time_unix_nano < start):
            start = r.start_time_unix_nano
        if r.end_time_unix_nano > end:
            end = r.end_time_unix_nano
        agent_name = agent_name or r.agent_name
        service_name = service_name or r.service_name
        if len(attributes) < n_keys and r.attribute_values:
            for key, value in zip(attribute_keys, r.attribute_values[n_tokens:], strict=False):
                if value is not None and key not in attributes:
                    attributes[key] = parse_value(value)
        if is_model_call(r):
            has_model_calls = True
        if r.tool_results:
            for item in _json_list(r.tool_results, warnings, f"tool results of span {r.span_id}"):
                if isinstance(item.get("id"), str):
                    results_by_id[item["id"]] = item.get("result")
    trajectory = _make(
        Trajectory,
        conversation_id=first.conversation_id,
        agent_name=agent_name,
        service_name=service_name,
        start_time=_time(start),
        end_time=_time(end),
        span_count=len(rows),
        attributes=attributes,
        turns=[],
        warnings=warnings,
    )
    missing_roots = traces - rooted
    if missing_roots:
        orphans = sum(1 for r in rows if r.parent_span_id and r.parent_span_id not in known)
        if orphans:
            warnings.append(
                f"{len(missing_roots)} trace(s) have no root span ({orphans} span(s) with a "
                "missing parent): rebuilt from the spans present"
            )
    turns: list[Turn] = []
    turn_of_trace: dict[str, Turn] = {}

    def new_turn(user_message: str | None) -> Turn:
        turn = _make(
            Turn, index=len(turns), user_message=user_message, steps=[], final_response=None
        )
        turns.append(turn)
        return turn

    current: Turn | None = None
    last_user: str | None = None  # the latest user message a model call carried
    answered = False  # the previous model call answered (text, no tool calls requested)
    # Requested calls not yet joined to a tool span, per turn: [(ToolCall, name)].
    open_requests: dict[int, list[ToolCall]] = {}
    requested_ids: set[str] = set()  # a call id requested again is the first request
    group = 0
    for r in rows:
        if is_model_call(r):
            if current is None or (
                r.user_message is not None and (r.user_message != last_user or answered)
            ):
                current = new_turn(r.user_message)
            if r.user_message is not None:
                last_user = r.user_message
            requested = _json_list(
                r.tool_calls_requested, warnings, f"requested tool calls of span {r.span_id}"
            )
            counts = r.attribute_values or [None] * n_tokens
            tokens = [
                _int(counts[i]) if counts[i] is not None else _int(counts[i + 2]) for i in (0, 1)
            ]
            model_call = _make(
                ModelCall,
                kind="model_call",
                span_id=r.span_id,
                trace_id=r.trace_id,
                name=r.name,
                start_time=_time(r.start_time_unix_nano),
                latency_ms=_latency(r),
                requested=[str(c.get("name")) for c in requested],
                response_text=r.response_text,
                error=_error(r),
                input_tokens=tokens[0],
                output_tokens=tokens[1],
            )
            current.steps.append(model_call)
            answered = not r.tool_calls_requested and r.response_text is not None
            if requested:
                group += 1
                for call in requested:
                    call_id = call.get("id") if isinstance(call.get("id"), str) else None
                    if call_id is not None:
                        if call_id in requested_ids:
                            continue
                        requested_ids.add(call_id)
                    tool = _make(
                        ToolCall,
                        kind="tool_call",
                        name=str(call.get("name")),
                        arguments=call.get("arguments"),
                        result=results_by_id.get(call_id) if call_id else None,
                        error=None,
                        call_id=call_id,
                        span_id=None,
                        trace_id=r.trace_id,
                        start_time=_time(r.end_time_unix_nano),
                        latency_ms=None,
                        parallel_group=group,
                        source="messages",
                    )
                    current.steps.append(tool)
                    open_requests.setdefault(current.index, []).append(tool)
            elif r.response_text is not None:
                current.__dict__["final_response"] = r.response_text
        elif r.operation == "execute_tool":
            if current is None or (not has_model_calls and r.trace_id not in turn_of_trace):
                current = turn_of_trace.get(r.trace_id) or new_turn(None)
            turn_of_trace.setdefault(r.trace_id, current)
            _add_tool_span(current, r, open_requests.setdefault(current.index, []), warnings)
        elif r.operation == "handoff" or r.name.startswith("handoff"):
            if current is None:
                current = new_turn(None)
            current.steps.append(
                _make(
                    Handoff,
                    kind="handoff",
                    span_id=r.span_id,
                    from_agent=r.agent_name,
                    to_agent=r.name.split(" ", 1)[1] if " " in r.name else None,
                    start_time=_time(r.start_time_unix_nano),
                )
            )
    for turn in turns:
        for unanswered in turn.tool_calls:
            if unanswered.source == "messages" and unanswered.result is None:
                warnings.append(
                    f"turn {turn.index}: tool call {unanswered.name} ({unanswered.call_id}) was "
                    "requested but neither a tool span nor a result was recorded"
                )
    trajectory.__dict__["turns"] = turns
    return trajectory


def _add_tool_span(
    turn: Turn, r: SpanRow, open_requests: list[ToolCall], warnings: list[str]
) -> None:
    arguments = parse_value(r.tool_arguments, warnings, f"arguments of tool span {r.span_id}")
    result = parse_value(r.tool_result, warnings, f"result of tool span {r.span_id}")
    error = _error(r)
    # Join to the model's request: by call id, else the first open request with the same name.
    match = None
    if r.tool_call_id:
        match = next((c for c in open_requests if c.call_id == r.tool_call_id), None)
    if match is None:
        match = next(
            (c for c in open_requests if c.name == r.tool_name and c.span_id is None), None
        )
    if match is not None:
        open_requests.remove(match)
        fields = match.__dict__  # the model is ours and not yet returned: skip validation
        fields["span_id"] = r.span_id
        fields["trace_id"] = r.trace_id
        fields["call_id"] = match.call_id or r.tool_call_id
        fields["start_time"] = _time(r.start_time_unix_nano)
        fields["latency_ms"] = _latency(r)
        fields["error"] = error
        fields["error_message"] = r.error_message
        if r.tool_arguments is not None:
            fields["arguments"] = arguments
        if r.tool_result is not None or match.result is None:
            fields["result"] = result
        fields["source"] = "span+messages"
        return
    turn.steps.append(
        _make(
            ToolCall,
            kind="tool_call",
            name=r.tool_name or r.name.removeprefix("execute_tool ").strip() or "unknown",
            arguments=arguments,
            result=result,
            error=error,
            error_message=r.error_message,
            call_id=r.tool_call_id,
            span_id=r.span_id,
            trace_id=r.trace_id,
            start_time=_time(r.start_time_unix_nano),
            latency_ms=_latency(r),
            parallel_group=None,
            source="span",
        )
    )
