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
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field

from spanscore.lake.connection import ALIAS
from spanscore.lake.schema import (
    CONVERSATION_ATTRIBUTES,
    TRAJECTORY_COLUMNS,
    chosen_ids,
    fingerprints_sql,
    stored_fingerprints_sql,
    stored_rows_sql,
    trajectory_rows_sql,
)
from spanscore.lake.stored import by_spans

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


# Spans per query when `load_trajectories` reads many conversations: a background thread
# queries the next chunk while the caller assembles this one, and DuckDB sorts a chunk at a
# time, not the whole window. Each query also scans the conversation ids of the whole lake, so
# chunks are few and large (bench/trajectories.py: on 1,000,000 spans, chunks of 250,000 were
# 15% faster than one query and took half the memory; of 100,000, no faster than one query).
CHUNK_SPANS = 250_000
FIRST_CHUNK_SPANS = 25_000
# Up to this many conversations asked for by id are read by one query without counting
# their spans first (a point query, `load_trajectory`, stays one query).
_UNCOUNTED_IDS = 1_000


def load_trajectories(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
    chunk_spans: int = CHUNK_SPANS,
    stored: bool = True,
) -> Iterator[Trajectory]:
    """Rebuild the trajectories of the given conversations, or of every conversation with a
    span starting in [since, until), or of every conversation, in order of conversation id.

    Streams: the conversations are read in chunks of about `chunk_spans` spans, each by a query
    of its own, which a background thread runs (on a cursor of `con`) while the chunk before is
    assembled; memory holds about two chunks of rows. Each conversation is read whole by one
    query; on a lake that is being written, chunks may see different snapshots.

    `attributes`: span attribute keys to collect into `Trajectory.attributes`, besides
    `CONVERSATION_ATTRIBUTES` (e.g. the keys a suite selects scenarios by). `stored`: read the
    rows maintenance stored where they are current (`trajectory_rows`)."""
    if conversation_ids is not None and len(set(conversation_ids)) <= _UNCOUNTED_IDS:
        chunks = [sorted(set(conversation_ids))] if conversation_ids else []
    else:
        # Small chunks first, each twice the one before: assembling starts soon, and the
        # thread reading the next chunk keeps ahead.
        parts = by_spans(
            _span_counts(con, conversation_ids, since, until),
            chunk_spans,
            first_spans=FIRST_CHUNK_SPANS,
        )
        chunks = [[conversation_id for conversation_id, _ in part] for part in parts]
    batches = rows_of_chunks(
        con, chunks, batch_rows=batch_rows, attributes=attributes, stored=stored
    )
    yield from trajectories_from_batches(batches, attributes)


def rows_of_chunks(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    *,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
    stored: bool = True,
) -> Iterator[pa.RecordBatch]:
    """`trajectory_rows` of each chunk of conversation ids (each sorted) in turn, one query per
    chunk, the next queried by a thread while the caller works on this one (`_prefetched`)."""
    if not chunks:
        return iter(())
    keys = attribute_keys(attributes)
    # Which conversations have stored rows that are still current, by one query for the whole
    # load: fingerprinting chunk by chunk read the spans around each chunk again, three times
    # the work (bench/trajectories.py), in the thread the assembly waits for.
    current = set(stored_current(con, [c for chunk in chunks for c in chunk]) if stored else ())
    if len(chunks) == 1:
        return iter(_rows_of(con, chunks[0], current, keys, batch_rows))
    return _prefetched(con, chunks, batch_rows, keys, current)


def _span_counts(
    con: duckdb.DuckDBPyConnection,
    conversation_ids: Sequence[str] | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
) -> list[tuple[str, int]]:
    """(conversation id, spans) of the conversations asked for by id, else of those with a
    span starting in [since, until) (either bound may be open; the spans counted are those in
    the window), sorted by id."""
    where = ["conversation_id IS NOT NULL"]
    params: list[Any] = []
    if conversation_ids is not None:
        con.register("spanscore_counted", pa.table({"id": list(conversation_ids)}))
        where.append("conversation_id IN (SELECT id FROM spanscore_counted)")
    else:
        conditions, params = _window(since, until)
        where += conditions
    found = con.execute(
        f"SELECT conversation_id, count(*) FROM spans WHERE {' AND '.join(where)} "
        "GROUP BY 1 ORDER BY 1",
        params,
    ).fetchall()
    return found


def _window(since: dt.datetime | None, until: dt.datetime | None) -> tuple[list[str], list[Any]]:
    """Conditions on `start_time` for [since, until) (either bound may be open), and their
    parameters."""
    conditions: list[str] = []
    params: list[Any] = []
    if since is not None:
        conditions.append("start_time >= ?")
        params.append(since)
    if until is not None:
        conditions.append("start_time < ?")
        params.append(until)
    return conditions, params


def _prefetched(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    batch_rows: int,
    keys: tuple[str, ...],
    current: AbstractSet[str],
) -> Iterator[pa.RecordBatch]:
    """The rows of each chunk of conversations in turn, queried by a thread one chunk ahead of
    the caller: DuckDB runs a query without holding the GIL, so the next chunk is queried while
    the caller assembles this one. Closing the iterator early stops the thread and its query."""
    cursor = con.cursor()
    cursor.execute(f"USE {ALIAS}")
    ready: queue.Queue[list[pa.RecordBatch] | BaseException | None] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: list[pa.RecordBatch] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def query_chunks() -> None:
        try:
            for chunk in chunks:
                reader = _rows_of(cursor, chunk, current, keys, batch_rows)
                if not hand_over(list(reader)):
                    return
            hand_over(None)
        except BaseException as exc:  # raised again in the caller's thread
            hand_over(exc)

    thread = threading.Thread(target=query_chunks, name="spanscore-trajectory-rows", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield from item
    finally:
        stop.set()
        cursor.interrupt()
        thread.join()
        cursor.close()


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
    stored: bool = True,
) -> pa.RecordBatchReader:
    """The rows `load_trajectories` assembles (`spanscore.lake.schema.TRAJECTORY_COLUMNS`), as
    Arrow batches sorted by conversation, each conversation's rows together: for building
    trajectories elsewhere (`trajectories_from_rows`).

    Conversations asked for by id whose rows maintenance stored (`spanscore.lake.stored`) from
    the spans and log records they have now are read as stored (their attributes past
    `CONVERSATION_ATTRIBUTES` from their spans), unless `stored` is false; the rules are
    applied to the rest. Either way the rows are the same."""
    keys = attribute_keys(attributes)
    if conversation_ids is None:
        chosen = where = ""
        window, params = _window(since, until)
        if window:
            # Whole conversations: every span of one that started in the window.
            spans = f"SELECT DISTINCT conversation_id FROM spans WHERE {' AND '.join(window)}"
            chosen = f"chosen AS ({spans}), "
            where = "WHERE s.conversation_id IN (SELECT conversation_id FROM chosen)"
        return con.execute(trajectory_rows_sql(chosen, where, keys), params).to_arrow_reader(
            batch_rows
        )
    ids = sorted(set(conversation_ids))
    current = set(stored_current(con, ids)) if stored else set()
    return _rows_of(con, ids, current, keys, batch_rows)


def _rows_of(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str],
    current: AbstractSet[str],
    keys: tuple[str, ...],
    batch_rows: int,
) -> pa.RecordBatchReader:
    """`trajectory_rows` of the conversations `ids` (sorted), reading stored rows for those
    that are `current` (`stored_current`)."""
    fresh = [c for c in ids if c in current] if current else []
    named: dict[str, Any] = {}
    stored_where = ""
    if fresh:
        con.register("spanscore_fresh", pa.table({"conversation_id": fresh}))
        stored_where = chosen_ids("spanscore_fresh", bounds="_fresh")
        named = {"first_fresh": fresh[0], "last_fresh": fresh[-1]}
        if len(fresh) == len(ids):
            sql = stored_rows_sql(stored_where, attribute_keys=keys)
            return con.execute(sql, named).to_arrow_reader(batch_rows)
        ids = [i for i in ids if i not in current]
    # A registered Arrow table: a list of any length, joined rather than inlined.
    con.register("spanscore_chosen", pa.table({"conversation_id": ids}))
    chosen = "chosen AS (SELECT conversation_id FROM spanscore_chosen), "
    where = "WHERE s.conversation_id IN (SELECT conversation_id FROM chosen)"
    if ids:  # a chunk of nearby ids then reads little more than its own spans
        where = chosen_ids("chosen", "s.")
        named |= {"first": ids[0], "last": ids[-1]}
    sql = trajectory_rows_sql(chosen, where, keys, stored=stored_where)
    return con.execute(sql, named).to_arrow_reader(batch_rows)


def stored_current(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[str]:
    """Of the conversations `ids`, those whose stored rows are current (built by these rules
    from the spans and log records they have now), sorted."""
    return _current(con, _stored(con, ids))


def _stored(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, int]:
    """{conversation id: fingerprint} of those of `ids` whose rows these rules stored."""
    if not ids:
        return {}
    return _by_id(con, ids, lambda wanted: stored_fingerprints_sql(wanted()))


def _current(con: duckdb.DuckDBPyConnection, stored: dict[str, int]) -> list[str]:
    """The conversations of `stored` whose spans have the fingerprint stored, sorted."""
    if not stored:
        return []
    now = _by_id(
        con,
        list(stored),
        lambda wanted: (
            f"SELECT conversation_id, fingerprint FROM ({fingerprints_sql(wanted('s.'))})"
        ),
    )
    return sorted(c for c, fingerprint in stored.items() if now.get(c) == fingerprint)


def _by_id(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str],
    sql: Callable[[Callable[..., str]], str],
) -> dict[str, Any]:
    """{id: value} from the two-column query `sql(wanted)`, where `wanted(alias)` is the
    condition choosing the ids (`chosen_ids`)."""
    con.register("spanscore_wanted", pa.table({"conversation_id": list(ids)}))
    query = sql(lambda alias="": chosen_ids("spanscore_wanted", alias))
    try:
        found = con.execute(query, {"first": min(ids), "last": max(ids)}).to_arrow_table()
    except duckdb.CatalogException:  # a snapshot from before schema 9 has no stored rows
        return {}
    finally:
        con.unregister("spanscore_wanted")
    return dict(zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True))


def trajectories_from_rows(
    rows: pa.RecordBatch | pa.Table, attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `trajectory_rows` output holding whole conversations."""
    return trajectories_from_batches([rows], attributes)


def trajectories_from_batches(
    batches: Iterable[pa.RecordBatch | pa.Table], attributes: Sequence[str] = ()
) -> Iterator[Trajectory]:
    """Trajectories from `trajectory_rows` output in order, batch after batch (a conversation
    may go on in the next batch)."""
    assembler = _Assembler(attribute_keys(attributes))
    for batch in batches:
        yield from assembler.feed(batch)
    yield from assembler.finish()


def load_trajectory(
    con: duckdb.DuckDBPyConnection, conversation_id: str, *, attributes: Sequence[str] = ()
) -> Trajectory | None:
    found = load_trajectories(con, conversation_ids=[conversation_id], attributes=attributes)
    return next(iter(found), None)


# --- assembling ------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)

# The slots every pydantic model has, set through their descriptors: what `model_construct`
# does, without the validation and the per-call work the hot path cannot pay.
_SLOTS = BaseModel.__dict__
_set_dict = _SLOTS["__dict__"].__set__
_set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__
_new = object.__new__


def _make(cls: type[M], values: dict[str, Any]) -> M:
    """A model from values this module produced itself: no validation. Every field must be
    given; `values` becomes the model's own dict."""
    obj: M = _new(cls)
    _set_dict(obj, values)
    # Every field is set, so every model of a class shares one set of them (pydantic only
    # ever adds a field's name to it, which it already holds).
    _set_fields_set(obj, _ALL_FIELDS[cls])
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


_ALL_FIELDS: dict[type[BaseModel], set[str]] = {
    cls: set(cls.model_fields) for cls in (Trajectory, Turn, ModelCall, ToolCall, Handoff)
}


def _maker(cls: type[BaseModel]) -> tuple[Any, ...]:
    """What `_make` uses, for a loop to bind as locals."""
    return _new, _set_dict, _ALL_FIELDS[cls], _set_fields_set, _set_extra, _set_private


_ModelCall = _maker(ModelCall)
_ToolCall = _maker(ToolCall)


def parse_value(text: Any, warnings: list[str] | None = None, what: str = "value") -> Any:
    """JSON, else a Python literal repr, else the text itself. A JSON string holding a repr
    (how the collector stores arguments that were not JSON) is unwrapped first."""
    value, unreadable = _read(text)
    if unreadable and warnings is not None:
        warnings.append(f"{what} is neither JSON nor a Python literal; kept as text")
    return value


def _read(text: Any) -> tuple[Any, bool]:
    """`parse_value`'s value, and whether it was text shaped like JSON or a literal (it begins
    with a brace or a bracket) that neither reads."""
    if text.__class__ is str and text[:1] in _JSON_OPENERS:  # nearly every value: first
        try:
            return _loads(text), False
        except ValueError:
            pass
    elif not isinstance(text, str):
        return text, False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text
    else:
        if not isinstance(value, str) or value == text:
            return value, False
        text = value
    stripped = text.strip()
    if stripped[:1] in ("{", "[", "(", "'", '"') or stripped in ("None", "True", "False"):
        try:
            return ast.literal_eval(stripped), False
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return text, stripped[:1] in ("{", "[")
    return text, False


_loads = orjson.loads  # raises a ValueError (orjson.JSONDecodeError)
_JSON_OPENERS = ("{", "[")
_from_timestamp = dt.datetime.fromtimestamp
# Below this many seconds from the epoch (the year 2096), a float of whole microseconds over a
# million is within half a microsecond of the time, so `fromtimestamp`'s rounding gives the
# exact microsecond back; past it, the slower exact sum.
_FLOAT_EXACT_S = 4_000_000_000


# `_time`'s common case, which the loops below test for before calling it.
_FLOAT_EXACT_NS = _FLOAT_EXACT_S * 1_000_000_000
_UTC = dt.UTC


def _time(ns: int | None) -> dt.datetime | None:
    """Nanoseconds since the epoch as a UTC datetime, truncated to the microsecond."""
    if not ns:
        return None
    micros = ns // 1000
    if -_FLOAT_EXACT_S < ns // 1_000_000_000 < _FLOAT_EXACT_S:
        return _from_timestamp(micros / 1e6, dt.UTC)
    return _EPOCH + dt.timedelta(microseconds=micros)


# The columns (of `TRAJECTORY_COLUMNS`) each kind of row is built from: each kind is converted
# to Python objects on its own, so a row costs what its step has, not the width of the union.
_CONVERSATION_FIELDS = (
    "conversation_id",
    "agent_name",
    "service_name",
    "start_ns",
    "end_ns",
    "span_count",
    "rootless_traces",
    "orphan_spans",
)
_TURN_FIELDS = ("turn_index", "text", "final_response")
_MODEL_CALL_FIELDS = (
    "span_id",
    "trace_id",
    "name",
    "start_ns",
    "latency_ms",
    "requested",
    "text",
    "error",
    "input_tokens",
    "output_tokens",
)
_TOOL_CALL_FIELDS = (
    "turn_index",
    "name",
    "arguments",
    "result",
    "error",
    "error_message",
    "call_id",
    "span_id",
    "trace_id",
    "start_ns",
    "latency_ms",
    "parallel_group",
    "source",
)
_HANDOFF_FIELDS = ("span_id", "agent_name", "to_agent", "start_ns")
_KIND = TRAJECTORY_COLUMNS.index("kind")


def _rows(
    batch: pa.RecordBatch | pa.Table, kinds: Any, kind: str, fields: Sequence[str]
) -> Iterator[tuple[Any, ...]]:
    """The `fields` of the batch's rows of one kind, as tuples, in order."""
    # Only its columns are filtered: a batch carries every kind's.
    rows = batch.select(fields).filter(pc.equal(kinds, kind))
    if not rows.num_rows:
        return iter(())
    return zip(*(column.to_pylist() for column in rows.columns), strict=True)


def _conversations(rows: Iterator[tuple[Any, ...]], keys: tuple[str, ...]) -> Iterator[Trajectory]:
    for (
        conversation_id,
        agent_name,
        service_name,
        start_ns,
        end_ns,
        span_count,
        rootless_traces,
        orphan_spans,
        *values,
    ) in rows:
        warnings: list[str] = []
        if rootless_traces and orphan_spans:
            warnings.append(
                f"{rootless_traces} trace(s) have no root span ({orphan_spans} span(s) "
                "with a missing parent): rebuilt from the spans present"
            )
        yield _make(
            Trajectory,
            {
                "conversation_id": conversation_id,
                "agent_name": agent_name,
                "service_name": service_name,
                "start_time": _time(start_ns),
                "end_time": _time(end_ns),
                "span_count": span_count,
                "attributes": {
                    key: parse_value(value)
                    for key, value in zip(keys, values, strict=True)
                    if value is not None
                },
                "turns": [],
                "warnings": warnings,
            },
        )


def _turns(rows: Iterator[tuple[Any, ...]]) -> Iterator[Turn]:
    for turn_index, text, final_response in rows:
        yield _make(
            Turn,
            {
                "index": turn_index,
                "user_message": text,
                "steps": [],
                "final_response": final_response,
            },
        )


def _model_calls(rows: Iterator[tuple[Any, ...]]) -> Iterator[ModelCall]:
    # `_make`, inlined: a call per step is a tenth of the step's cost.
    new, set_dict, fields, set_fields, set_extra, set_private = _ModelCall
    for (
        span_id,
        trace_id,
        name,
        start_ns,
        latency_ms,
        requested,
        text,
        error,
        input_tokens,
        output_tokens,
    ) in rows:
        call = new(ModelCall)
        set_dict(
            call,
            {
                "kind": "model_call",
                "span_id": span_id,
                "trace_id": trace_id,
                "name": name,
                "start_time": _from_timestamp(start_ns // 1000 / 1e6, _UTC)
                if start_ns is not None and 0 < start_ns < _FLOAT_EXACT_NS
                else _time(start_ns),
                "latency_ms": latency_ms,
                "requested": (requested if None not in requested else [str(r) for r in requested])
                if requested
                else [],
                "response_text": text,
                "error": error,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
            },
        )
        set_fields(call, fields)
        set_extra(call, None)
        set_private(call, None)
        yield call


def _tool_calls(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[ToolCall, list[str] | None]]:
    """Each tool call, with the warnings its conversation gets for it (None for none)."""
    new, set_dict, fields, set_fields, set_extra, set_private = _ToolCall
    loads, openers = _loads, _JSON_OPENERS
    for (
        turn_index,
        name,
        arguments,
        result,
        error,
        error_message,
        call_id,
        span_id,
        trace_id,
        start_ns,
        latency_ms,
        parallel_group,
        source,
    ) in rows:
        warnings: list[str] | None = None
        # `_read`'s first case (nearly every value is JSON) without its call, else `_read`.
        bad_arguments = bad_result = False
        if arguments.__class__ is str and arguments[:1] in openers:
            try:
                arguments = loads(arguments)
            except ValueError:
                arguments, bad_arguments = _read(arguments)
        elif arguments is not None:
            arguments, bad_arguments = _read(arguments)
        if result.__class__ is str and result[:1] in openers:
            try:
                result = loads(result)
            except ValueError:
                result, bad_result = _read(result)
        elif result is not None:
            result, bad_result = _read(result)
        if span_id is not None:
            if bad_arguments or bad_result:
                warnings = [
                    f"{what} of tool span {span_id} is neither JSON nor a Python literal; "
                    "kept as text"
                    for bad, what in ((bad_arguments, "arguments"), (bad_result, "result"))
                    if bad
                ]
        elif result is None:
            warnings = [
                f"turn {turn_index}: tool call {name} ({call_id}) was requested but "
                "neither a tool span nor a result was recorded"
            ]
        call = new(ToolCall)
        set_dict(
            call,
            {
                "kind": "tool_call",
                "name": name if name is not None else "unknown",
                "arguments": arguments,
                "result": result,
                "error": error,
                "error_message": error_message,
                "call_id": call_id,
                "span_id": span_id,
                "trace_id": trace_id,
                "start_time": _from_timestamp(start_ns // 1000 / 1e6, _UTC)
                if start_ns is not None and 0 < start_ns < _FLOAT_EXACT_NS
                else _time(start_ns),
                "latency_ms": latency_ms,
                "parallel_group": parallel_group,
                "source": source,
            },
        )
        set_fields(call, fields)
        set_extra(call, None)
        set_private(call, None)
        yield call, warnings


def _handoffs(rows: Iterator[tuple[Any, ...]]) -> Iterator[Handoff]:
    for span_id, agent_name, to_agent, start_ns in rows:
        yield _make(
            Handoff,
            {
                "kind": "handoff",
                "span_id": span_id,
                "from_agent": agent_name,
                "to_agent": to_agent,
                "start_time": _time(start_ns),
            },
        )


class _Assembler:
    """Trajectories from `trajectory_rows`, batch after batch: a conversation may go on in the
    next batch, so the one being assembled is yielded when the next begins or at the end. The
    rows already say which turn each step is in and in what order: nothing is decided here.
    Each kind of row is built on its own (`_conversations`, `_turns`...), and one pass over the
    kinds puts what they built in place."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.trajectory: Trajectory | None = None
        self.steps: list[Step] | None = None  # the steps of the turn being assembled

    def finish(self) -> Iterator[Trajectory]:
        if self.trajectory is not None:
            yield self.trajectory
            self.trajectory = None
            self.steps = None

    def feed(self, batch: pa.RecordBatch | pa.Table) -> Iterator[Trajectory]:
        kinds = batch.column(_KIND)
        fields = (*_CONVERSATION_FIELDS, *(f"attribute_{i}" for i in range(1, len(self.keys) + 1)))
        conversations = _conversations(_rows(batch, kinds, "conversation", fields), self.keys)
        turns = _turns(_rows(batch, kinds, "turn", _TURN_FIELDS))
        model_calls = _model_calls(_rows(batch, kinds, "model_call", _MODEL_CALL_FIELDS))
        tool_calls = _tool_calls(_rows(batch, kinds, "tool_call", _TOOL_CALL_FIELDS))
        handoffs = _handoffs(_rows(batch, kinds, "handoff", _HANDOFF_FIELDS))
        trajectory, steps = self.trajectory, self.steps
        for kind in kinds.to_pylist():
            if kind == "tool_call":
                call, warnings = next(tool_calls)
                assert steps is not None
                assert trajectory is not None
                steps.append(call)
                if warnings:
                    trajectory.warnings.extend(warnings)
            elif kind == "model_call":
                assert steps is not None
                steps.append(next(model_calls))
            elif kind == "turn":
                assert trajectory is not None
                turn = next(turns)
                trajectory.turns.append(turn)
                steps = turn.steps
            elif kind == "handoff":
                assert steps is not None
                steps.append(next(handoffs))
            else:  # the conversation's own row: the one before is complete
                if trajectory is not None:
                    yield trajectory
                trajectory, steps = next(conversations), None
        self.trajectory, self.steps = trajectory, steps
