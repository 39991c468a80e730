"""Assembling trajectories from the rows the conversation rules return: one pass in Python that
parses arguments and results (JSON, else a Python literal read with `ast.literal_eval`, never
`eval`; anything else stays a string) and says what could not be read. It builds the models
without validation (the rows are already typed), which is most of its speed."""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from spanscore.evaluation.trajectory.model import (
    EPOCH,
    Handoff,
    ModelCall,
    Step,
    ToolCall,
    Trajectory,
    Turn,
)
from spanscore.lake.schema.trajectory import TRAJECTORY_COLUMNS

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
    return EPOCH + dt.timedelta(microseconds=micros)


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


class Assembler:
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
