"""A run's scores back into OpenTelemetry: one `gen_ai.evaluation.result` event per score.

The event is an OTLP log record (the GenAI semantic conventions' evaluation event), parented
to the span it judges:
- a verdict about one tool call (its details name a `span_id`, a `call_id`, or list exactly one
  call in `calls`) goes to that tool call's span;
- a verdict about one turn (`turn_index` in its details, 0-based) to the turn's last model call;
- any other verdict to the conversation's last GenAI span (model call or tool call), or, in a
  conversation with no such step (one answer, no tool asked for), to its first span.
A conversation with no span left (expired, erased) gets an event without trace context, found
by its `gen_ai.conversation.id`.

Each record carries the time its score was committed, plus a nanosecond per score before it in
the same commit: sending a run again sends the same records, which a spanscore collector stores
once (its identity of a log record is trace, span, times, event name and body).

Sending is the OpenTelemetry SDK's OTLP log exporter (HTTP/protobuf, or gRPC), configured by
the standard `OTEL_EXPORTER_OTLP_*` variables (logs signal first). Each batch is one export
whose retries the exporter bounds by its timeout; the first batch that still fails ends the
export, and every record not sent is counted, never raised: an export never fails the run.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from spanscore.evaluation.runs.options import installed_version
from spanscore.evaluation.runs.store import (
    RunRow,
    ScoreRecord,
    run_row,
    set_details,
    timed_scores_of_run,
)
from spanscore.evaluation.trajectory.load import load_trajectories
from spanscore.evaluation.trajectory.model import ModelCall, ToolCall, Trajectory

log = logging.getLogger("spanscore.export")

EVENT_NAME = "gen_ai.evaluation.result"

# The event's attributes: the GenAI semantic conventions' names (tests hold them to the
# opentelemetry-semantic-conventions package's constants), then spanscore's own.
EVALUATION_NAME = "gen_ai.evaluation.name"
SCORE_VALUE = "gen_ai.evaluation.score.value"
SCORE_LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
RUN_ID = "spanscore.run.id"
SUITE_NAME = "spanscore.suite.name"
SUITE_VERSION = "spanscore.suite.version"
SCENARIO_ID = "spanscore.scenario.id"
PASSED = "spanscore.evaluation.passed"
THRESHOLD = "spanscore.evaluation.threshold"

# What `error.type` says of a score that could not be given (its reason is the explanation):
# the conventions' value for an error without a more specific type.
SCORE_ERROR_TYPE = "_OTHER"

PROTOCOLS = ("http/protobuf", "grpc")
BATCH_SIZE = 512
_SCOPE = "spanscore.evaluation"


class ExportSettingsError(ValueError):
    """The export cannot be configured (an unsupported protocol): a usage error."""


@dataclass(frozen=True, slots=True)
class Target:
    """The span an event is parented to (hex ids, as the lake stores them)."""

    trace_id: str
    span_id: str


@dataclass(slots=True)
class EvaluationEvent:
    """One `gen_ai.evaluation.result` record, before it is encoded."""

    time_unix_nano: int
    target: Target | None
    attributes: dict[str, str | float | bool]


@dataclass(slots=True)
class ExportOutcome:
    """What an export did: `events` built, `sent` acknowledged, `failed` not sent (with the
    first `error`), `unparented` sent without a span (the conversation had none left)."""

    endpoint: str
    events: int = 0
    sent: int = 0
    failed: int = 0
    unparented: int = 0
    error: str | None = None
    batches: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "events": self.events,
            "sent": self.sent,
            "failed": self.failed,
            "unparented": self.unparented,
            "error": self.error,
        }

    def describe(self) -> str:
        """One line for the run's summary."""
        if self.failed:
            return (
                f"{self.failed} of {self.events} evaluation events could not be exported to "
                f"{self.endpoint} ({self.error}); send them again with `spanscore export RUN`"
            )
        line = f"exported {self.sent} evaluation events to {self.endpoint}"
        if self.unparented:
            line += f" ({self.unparented} without a span: their conversations have none left)"
        return line


# --- where an event goes ---------------------------------------------------------------------


@dataclass(slots=True)
class _Spans:
    """The spans of one conversation an event can be parented to."""

    by_span: dict[str, Target]
    by_call: dict[str, Target]
    turn_last_model: dict[int, Target]
    last: Target | None


def spans_of(trajectory: Trajectory) -> _Spans:
    by_span: dict[str, Target] = {}
    by_call: dict[str, Target] = {}
    turn_last_model: dict[int, Target] = {}
    last: Target | None = None
    for turn in trajectory.turns:
        for step in turn.steps:
            if not isinstance(step, ToolCall | ModelCall):
                continue
            if step.span_id is None or step.trace_id is None:
                continue  # a tool call known only from the messages has no span of its own
            target = Target(step.trace_id, step.span_id)
            by_span[step.span_id] = target
            last = target
            if isinstance(step, ToolCall):
                if step.call_id is not None:
                    by_call.setdefault(step.call_id, target)
            else:
                turn_last_model[turn.index] = target
    return _Spans(by_span, by_call, turn_last_model, last)


def target_of(spans: _Spans | None, details: Mapping[str, Any] | None) -> Target | None:
    """The span a score judges (see the module doc); None: the conversation has no span."""
    if spans is None:
        return None
    if details:
        span_id = details.get("span_id")
        if isinstance(span_id, str) and span_id in spans.by_span:
            return spans.by_span[span_id]
        call_id = details.get("call_id")
        calls = details.get("calls")
        if call_id is None and isinstance(calls, list) and len(calls) == 1:
            only = calls[0]
            call_id = only.get("call_id") if isinstance(only, dict) else None
        if isinstance(call_id, str) and call_id in spans.by_call:
            return spans.by_call[call_id]
        turn = details.get("turn_index")
        if isinstance(turn, int) and turn in spans.turn_last_model:
            return spans.turn_last_model[turn]
    return spans.last


# --- the events ------------------------------------------------------------------------------


def _attributes(run: RunRow, score: ScoreRecord) -> dict[str, str | float | bool]:
    out: dict[str, str | float | bool] = {
        EVALUATION_NAME: score.metric,
        CONVERSATION_ID: score.conversation_id,
        RUN_ID: run.run_id,
        SUITE_NAME: run.suite_name,
    }
    if run.suite_hash:
        out[SUITE_VERSION] = run.suite_hash
    if score.scenario_id is not None:
        out[SCENARIO_ID] = score.scenario_id
    if score.value is not None:
        out[SCORE_VALUE] = float(score.value)
    label = score.label
    if label is None and score.passed is not None:
        label = "pass" if score.passed else "fail"
    if label is not None:
        out[SCORE_LABEL] = label
    if score.passed is not None:
        out[PASSED] = bool(score.passed)
    if score.threshold is not None:
        out[THRESHOLD] = float(score.threshold)
    if score.error is not None:
        out[ERROR_TYPE] = SCORE_ERROR_TYPE
        out[EXPLANATION] = score.error
    elif score.explanation:
        out[EXPLANATION] = score.explanation
    return out


def _details(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _conversation_spans(
    con: duckdb.DuckDBPyConnection, conversation_ids: Sequence[str]
) -> dict[str, _Spans]:
    if not conversation_ids:
        return {}
    found = {
        t.conversation_id: spans_of(t)
        for t in load_trajectories(con, conversation_ids=conversation_ids)
    }
    # A conversation with no model or tool call step (one answer, no tool asked for): its
    # events go to its first span, so that they still sit in its trace.
    bare = [c for c in conversation_ids if c not in found or found[c].last is None]
    if bare:
        rows = con.execute(
            "SELECT conversation_id, min_by(trace_id, (start_time, span_id)), "
            "min_by(span_id, (start_time, span_id)) FROM spans "
            "WHERE conversation_id IN (SELECT unnest(?::VARCHAR[])) "
            "AND trace_id IS NOT NULL AND span_id IS NOT NULL GROUP BY conversation_id",
            [bare],
        ).fetchall()
        for conversation_id, trace_id, span_id in rows:
            spans = found.setdefault(str(conversation_id), _Spans({}, {}, {}, None))
            spans.last = Target(str(trace_id), str(span_id))
    return found


def evaluation_events(
    con: duckdb.DuckDBPyConnection, run_id: str, conversation_ids: Collection[str] | None = None
) -> list[EvaluationEvent]:
    """The events of the run's scores (of these conversations only, if given), in commit
    order. Raises ValueError for a run that does not exist."""
    run = run_row(con, run_id)
    if run is None:
        raise ValueError(f"no evaluation run {run_id!r} in this lake")
    scores = timed_scores_of_run(con, run_id, conversation_ids)
    spans = _conversation_spans(con, sorted({s.conversation_id for s, _ in scores}))
    events = []
    previous, offset = None, 0
    for score, committed in scores:
        offset = offset + 1 if committed == previous else 0
        previous = committed
        events.append(
            EvaluationEvent(
                time_unix_nano=_unix_nano(committed) + offset,
                target=target_of(spans.get(score.conversation_id), _details(score.details)),
                attributes=_attributes(run, score),
            )
        )
    return events


def _unix_nano(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


# --- sending ---------------------------------------------------------------------------------


def resolve_endpoint(
    url: str | None, environ: Mapping[str, str] | None = None, *, signal: str = "logs"
) -> tuple[str, str]:
    """(endpoint, protocol) as the OpenTelemetry exporters read them for `signal` (`logs`, or
    `metrics` for a run's figures): `url` (a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT:
    `/v1/logs` or `/v1/metrics` is added for HTTP unless it is there), else
    OTEL_EXPORTER_OTLP_LOGS_ENDPOINT / ..._METRICS_ENDPOINT (as is), else
    OTEL_EXPORTER_OTLP_ENDPOINT, else the default on localhost; the protocol from
    OTEL_EXPORTER_OTLP_LOGS_PROTOCOL / ..._METRICS_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
    else http/protobuf."""
    env = os.environ if environ is None else environ
    key = f"OTEL_EXPORTER_OTLP_{signal.upper()}"
    protocol = (
        env.get(f"{key}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    ).strip()
    if protocol not in PROTOCOLS:
        raise ExportSettingsError(
            f"OTLP protocol {protocol!r} is not supported for evaluation {signal}: use "
            f"{' or '.join(PROTOCOLS)} ({key}_PROTOCOL)"
        )
    grpc = protocol == "grpc"
    if url:
        base, own = url.strip(), False
    elif env.get(f"{key}_ENDPOINT"):
        base, own = env[f"{key}_ENDPOINT"].strip(), True
    elif env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        base, own = env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip(), False
    else:
        base, own = ("http://localhost:4317" if grpc else "http://localhost:4318"), False
    if "://" not in base:
        raise ExportSettingsError(
            f"OTLP endpoint {base!r} is not a URL: give one like http://collector:4318"
        )
    path = f"/v1/{signal}"
    if grpc or own or base.rstrip("/").endswith(path):
        return base, protocol
    return base.rstrip("/") + path, protocol


def resource() -> Any:
    """The resource of what spanscore sends: the SDK's (OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES), `service.name=spanscore` unless one is given."""
    from opentelemetry.sdk.resources import Resource

    found = Resource.create({})
    if str(found.attributes.get("service.name", "")).startswith("unknown_service"):
        found = found.merge(Resource({"service.name": "spanscore"}))
    return found


def _exporter(endpoint: str, protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        insecure = endpoint.startswith("http://") or None
        return OTLPLogExporter(endpoint=endpoint, insecure=insecure)
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HttpLogExporter,
    )

    return HttpLogExporter(endpoint=endpoint)


def _records(events: Iterable[EvaluationEvent]) -> Iterator[Any]:
    from opentelemetry import trace
    from opentelemetry._logs import LogRecord, SeverityNumber
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    sent_by = resource()
    scope = InstrumentationScope(_SCOPE, installed_version())
    for event in events:
        context = None
        if event.target is not None:
            span = trace.NonRecordingSpan(
                trace.SpanContext(
                    int(event.target.trace_id, 16),
                    int(event.target.span_id, 16),
                    is_remote=True,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                )
            )
            context = trace.set_span_in_context(span)
        record = LogRecord(
            timestamp=event.time_unix_nano,
            observed_timestamp=event.time_unix_nano,
            context=context,
            severity_text="INFO",
            severity_number=SeverityNumber.INFO,
            attributes=event.attributes,
            event_name=EVENT_NAME,
        )
        yield ReadableLogRecord(record, resource=sent_by, instrumentation_scope=scope)


def send_events(
    events: Sequence[EvaluationEvent],
    endpoint: str,
    protocol: str = "http/protobuf",
    *,
    batch_size: int = BATCH_SIZE,
) -> ExportOutcome:
    """Send the events in batches; never raises for the endpoint's sake (see the module doc)."""
    outcome = ExportOutcome(endpoint=endpoint, events=len(events))
    outcome.unparented = sum(1 for e in events if e.target is None)
    if not events:
        return outcome
    from opentelemetry.sdk._logs.export import LogRecordExportResult

    try:
        exporter = _exporter(endpoint, protocol)
    except Exception as exc:  # a malformed endpoint the exporter refuses
        outcome.failed, outcome.error, outcome.unparented = len(events), _said(exc), 0
        return outcome
    try:
        for start in range(0, len(events), batch_size):
            batch = list(_records(events[start : start + batch_size]))
            try:
                done = exporter.export(batch) == LogRecordExportResult.SUCCESS
                problem = None if done else "the endpoint refused or could not be reached"
            except Exception as exc:  # the exporter may raise on network errors
                done, problem = False, _said(exc)
            if not done:
                outcome.failed = len(events) - outcome.sent
                outcome.error = problem
                break
            outcome.sent += len(batch)
            outcome.batches.append(len(batch))
    finally:
        try:
            exporter.shutdown()
        except Exception:  # pragma: no cover - closing what failed to open
            log.debug("closing the OTLP exporter failed", exc_info=True)
    if outcome.failed:
        outcome.unparented = sum(1 for e in events[: outcome.sent] if e.target is None)
    return outcome


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def export_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    endpoint: str,
    protocol: str = "http/protobuf",
    *,
    conversation_ids: Collection[str] | None = None,
    record: bool = True,
) -> ExportOutcome:
    """Build the run's events (of these conversations only, if given) and send them; with
    `record`, the outcome is also kept in the run's details (`export`)."""
    events = evaluation_events(con, run_id, conversation_ids)
    outcome = send_events(events, endpoint, protocol)
    if outcome.failed:
        log.warning("evaluation events of run %s: %s", run_id, outcome.describe())
    if not record:
        return outcome
    try:
        set_details(con, run_id, "record the export", export=outcome.as_dict())
    except duckdb.Error:  # the events went out; the note about them is not worth a failure
        log.warning("could not record the export of run %s", run_id, exc_info=True)
    return outcome
