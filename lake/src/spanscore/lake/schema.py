"""The lake's tables and views: the one place that defines them.

Table and column names are the user-facing SQL interface: renaming one is a breaking change and
needs a migration. Each table is a tuple of `Column`s so that the DDL, the Arrow schema the
collector appends with, and the README's table reference come from the same definition.

Schema versions: `SCHEMA_VERSION` is the version this code writes. `MIGRATIONS[n]` holds the
statements that take a lake from version n - 1 to n (`MIGRATIONS[1]` creates everything). Views
are recreated after every migration: a view change is a new version with no statements.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    doc: str


_ARROW_TYPES: dict[str, pa.DataType] = {
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The Arrow schema that appends to a table defined by `columns` without casts."""
    return pa.schema([pa.field(c.name, _ARROW_TYPES[c.sql_type]) for c in columns])


def create_table_sql(table: str, columns: tuple[Column, ...]) -> str:
    body = ",\n  ".join(f"{quote_identifier(c.name)} {c.sql_type}" for c in columns)
    return f"CREATE TABLE IF NOT EXISTS {quote_identifier(table)} (\n  {body}\n)"


def quote_identifier(name: str) -> str:
    """Quote a SQL identifier; the one helper every module uses for names it did not write."""
    return '"' + name.replace('"', '""') + '"'


SPANS: tuple[Column, ...] = (
    Column("trace_id", "VARCHAR", "trace id, 32 lowercase hex digits"),
    Column("span_id", "VARCHAR", "span id, 16 lowercase hex digits"),
    Column("parent_span_id", "VARCHAR", "parent span id, NULL for a root span"),
    Column("trace_state", "VARCHAR", "W3C trace state, NULL when empty"),
    Column("flags", "BIGINT", "W3C trace flags and OTLP span flags"),
    Column("name", "VARCHAR", "span name"),
    Column("kind", "VARCHAR", "INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER or UNSPECIFIED"),
    Column("start_time", "TIMESTAMPTZ", "start time (microseconds)"),
    Column("end_time", "TIMESTAMPTZ", "end time (microseconds)"),
    Column("start_time_unix_nano", "BIGINT", "start time, exact, in ns since the epoch"),
    Column("end_time_unix_nano", "BIGINT", "end time, exact, in ns since the epoch"),
    Column("duration_ms", "DOUBLE", "end minus start, in milliseconds"),
    Column("status_code", "VARCHAR", "UNSET, OK or ERROR"),
    Column("status_message", "VARCHAR", "status description, NULL when empty"),
    Column("service_name", "VARCHAR", "resource attribute service.name"),
    Column("resource", "JSON", "resource attributes as a JSON object"),
    Column("scope_name", "VARCHAR", "instrumentation scope name"),
    Column("scope_version", "VARCHAR", "instrumentation scope version"),
    Column("scope_attributes", "JSON", "instrumentation scope attributes"),
    Column("schema_url", "VARCHAR", "schema URL of the scope, else of the resource"),
    Column("attributes", "JSON", "span attributes as a JSON object (keys keep their dots)"),
    Column("events", "JSON", "list of {name, time_unix_nano, attributes}"),
    Column("links", "JSON", "list of {trace_id, span_id, trace_state, attributes}"),
    Column("dropped_attributes_count", "BIGINT", "attributes dropped by the producer or by limits"),
    Column("dropped_events_count", "BIGINT", "events dropped by the producer"),
    Column("dropped_links_count", "BIGINT", "links dropped by the producer"),
    Column("conversation_id", "VARCHAR", "conversation this span belongs to (trace id if none)"),
    Column("agent_name", "VARCHAR", "agent that made the span (gen_ai.agent.name, ...)"),
    Column("operation", "VARCHAR", "chat, execute_tool, invoke_agent, ... (gen_ai.operation.name)"),
    Column("tool_name", "VARCHAR", "tool called (execute_tool spans)"),
    Column("tool_call_id", "VARCHAR", "the model's id for this tool call"),
    Column("tool_arguments", "JSON", "tool call arguments (JSON; a non-JSON value as a string)"),
    Column("tool_result", "VARCHAR", "tool call result as sent (usually JSON text)"),
    Column("user_message", "VARCHAR", "latest user message in this span's model input"),
    Column(
        "tool_calls_requested",
        "JSON",
        "tool calls this model call asked for: [{id, name, arguments}]",
    ),
    Column("tool_results", "JSON", "tool results in this model call's input: [{id, result}]"),
    Column("response_text", "VARCHAR", "text this model call answered"),
    Column("error_type", "VARCHAR", "error.type, or the exception type of a failed span"),
    Column("convention", "VARCHAR", "producer convention the span was read as (genai, ...)"),
    Column("ingest_notes", "VARCHAR", "what the collector changed: limits applied, redactions"),
    Column("ingest_time", "TIMESTAMPTZ", "when the collector committed the span"),
)

LOGS: tuple[Column, ...] = (
    Column("time", "TIMESTAMPTZ", "event time (observed time when the producer sent none)"),
    Column("time_unix_nano", "BIGINT", "event time, exact, in ns (0 when unset)"),
    Column("observed_time_unix_nano", "BIGINT", "observed time, exact, in ns (0 when unset)"),
    Column("trace_id", "VARCHAR", "trace id of the span the record belongs to, if any"),
    Column("span_id", "VARCHAR", "span id of the span the record belongs to, if any"),
    Column("flags", "BIGINT", "W3C trace flags"),
    Column("severity_number", "INTEGER", "OTLP severity number"),
    Column("severity_text", "VARCHAR", "severity text"),
    Column("event_name", "VARCHAR", "event name (gen_ai.user.message, gen_ai.choice, ...)"),
    Column("body", "JSON", "record body as JSON"),
    Column("attributes", "JSON", "record attributes as a JSON object"),
    Column("resource", "JSON", "resource attributes as a JSON object"),
    Column("service_name", "VARCHAR", "resource attribute service.name"),
    Column("scope_name", "VARCHAR", "instrumentation scope name"),
    Column("scope_version", "VARCHAR", "instrumentation scope version"),
    Column("dropped_attributes_count", "BIGINT", "attributes dropped by the producer or by limits"),
    Column("conversation_id", "VARCHAR", "conversation id when the record carries one"),
    Column("user_message", "VARCHAR", "latest user message the record carries (GenAI events)"),
    Column("tool_calls_requested", "JSON", "tool calls a model output in it asked for"),
    Column("tool_results", "JSON", "tool results it carries: [{id, result}]"),
    Column("response_text", "VARCHAR", "model answer text it carries"),
    Column("ingest_notes", "VARCHAR", "what the collector changed: limits applied, redactions"),
    Column("ingest_time", "TIMESTAMPTZ", "when the collector committed the record"),
)

EVAL_RUNS: tuple[Column, ...] = (
    Column("run_id", "VARCHAR", "evaluation run id"),
    Column("suite_name", "VARCHAR", "suite name"),
    Column("suite_hash", "VARCHAR", "hash of the suite's content (its version)"),
    Column("window_start", "TIMESTAMPTZ", "start of the evaluated time window"),
    Column("window_end", "TIMESTAMPTZ", "end of the evaluated time window"),
    Column("sample_spec", "JSON", "sampling settings (rate, limit, seed, strata, filters)"),
    Column("spanscore_version", "VARCHAR", "spanscore version that ran"),
    Column("host", "VARCHAR", "machine that ran it"),
    Column("started_at", "TIMESTAMPTZ", "when the run started"),
    Column("finished_at", "TIMESTAMPTZ", "when the run ended (NULL while running)"),
    Column("status", "VARCHAR", "running, succeeded, gate_failed, interrupted or failed"),
    Column("conversation_count", "INTEGER", "conversations scored"),
    Column("score_count", "INTEGER", "score rows written"),
    Column("error_count", "INTEGER", "scores that could not be given"),
    Column("judge_cost_usd", "DOUBLE", "estimated LLM-judge cost"),
    Column("details", "JSON", "timings, gates and anything else about the run"),
)

SCORES: tuple[Column, ...] = (
    Column("run_id", "VARCHAR", "evaluation run that wrote the score"),
    Column("conversation_id", "VARCHAR", "conversation scored"),
    Column("scenario_id", "VARCHAR", "scenario (or policy) the score belongs to"),
    Column("metric", "VARCHAR", "assertion or metric name"),
    Column("value", "DOUBLE", "numeric score"),
    Column("label", "VARCHAR", "categorical score"),
    Column("passed", "BOOLEAN", "pass/fail"),
    Column("threshold", "DOUBLE", "threshold the pass rule used"),
    Column("explanation", "VARCHAR", "why this score"),
    Column("details", "JSON", "structured details (pairings, failed goals, ...)"),
    Column("error", "VARCHAR", "why no score could be given"),
    Column("created_at", "TIMESTAMPTZ", "when the score was written"),
)

SCHEMA_INFO: tuple[Column, ...] = (
    Column("version", "INTEGER", "lake schema version"),
    Column("applied_at", "TIMESTAMPTZ", "when it was applied"),
    Column("applied_by", "VARCHAR", "spanscore version that applied it"),
)

TABLES: dict[str, tuple[Column, ...]] = {
    "spans": SPANS,
    "logs": LOGS,
    "eval_runs": EVAL_RUNS,
    "scores": SCORES,
    "spanscore_schema": SCHEMA_INFO,
}

# The views follow the trajectory rules of spanscore.evaluation.trajectory, in SQL:
# - a span without its own conversation id takes the one another span of its trace carries;
# - a model call starts a new turn when its latest user message differs from the previous
#   model call's, or when the previous model call answered (text, no tool calls requested);
#   without model calls, each trace is a turn;
# - tool calls are the tool spans; a conversation with no tool span at all (client-level
#   instrumentation) gets its tool calls from what its model calls requested, with the results
#   later model calls received.
_CALLS_TYPE = """'[{"id": "VARCHAR", "name": "VARCHAR", "arguments": "JSON"}]'"""
_RESULTS_TYPE = """'[{"id": "VARCHAR", "result": "JSON"}]'"""

# Spans with what their GenAI log records say about the model call (producers that send
# messages as events, not attributes), where the span's own attributes say nothing.
SPANS_WITH_EVENTS = f"""(
    SELECT s.* REPLACE (
        coalesce(s.user_message, e.user_message) AS user_message,
        coalesce(s.tool_calls_requested, e.tool_calls_requested) AS tool_calls_requested,
        coalesce(s.tool_results, e.tool_results) AS tool_results,
        coalesce(s.response_text, e.response_text) AS response_text)
    FROM spans s LEFT JOIN (
        SELECT trace_id, span_id,
            arg_max(user_message, time_unix_nano)
                FILTER (WHERE user_message IS NOT NULL) AS user_message,
            CASE WHEN count(tool_calls_requested) > 0 THEN to_json(flatten(list(
                from_json(tool_calls_requested, {_CALLS_TYPE}) ORDER BY time_unix_nano)
                FILTER (WHERE tool_calls_requested IS NOT NULL))) END AS tool_calls_requested,
            CASE WHEN count(tool_results) > 0 THEN to_json(flatten(list(
                from_json(tool_results, {_RESULTS_TYPE}) ORDER BY time_unix_nano)
                FILTER (WHERE tool_results IS NOT NULL))) END AS tool_results,
            string_agg(response_text, '\n' ORDER BY time_unix_nano) AS response_text
        FROM logs
        WHERE span_id IS NOT NULL AND (user_message IS NOT NULL
            OR tool_calls_requested IS NOT NULL OR tool_results IS NOT NULL
            OR response_text IS NOT NULL)
        GROUP BY trace_id, span_id
    ) e ON e.trace_id = s.trace_id AND e.span_id = s.span_id
)"""

_RESOLVED = f"""
    resolved AS (
        SELECT s.*, coalesce(
            max(s.conversation_id) FILTER (WHERE s.conversation_id <> s.trace_id)
                OVER (PARTITION BY s.trace_id),
            s.conversation_id) AS conv
        FROM {SPANS_WITH_EVENTS} s
    )"""

VIEWS: dict[str, str] = {
    "tool_calls": f"""
        WITH {_RESOLVED},
        models AS (
            SELECT conv, start_time_unix_nano AS t, user_message,
                   lag(user_message) OVER w AS prev_user,
                   lag(tool_calls_requested IS NULL AND response_text IS NOT NULL) OVER w
                       AS prev_answered,
                   lag(start_time_unix_nano) OVER w AS prev_t
            FROM resolved
            WHERE operation = 'chat' OR tool_calls_requested IS NOT NULL
            WINDOW w AS (PARTITION BY conv ORDER BY start_time_unix_nano, span_id)
        ),
        turn_starts AS (
            SELECT conv, t, sum(CASE WHEN prev_t IS NULL OR (user_message IS NOT NULL AND (
                        user_message IS DISTINCT FROM prev_user OR prev_answered))
                    THEN 1 ELSE 0 END)
                OVER (PARTITION BY conv ORDER BY t ROWS UNBOUNDED PRECEDING)::BIGINT - 1
                AS turn_index
            FROM models
        ),
        trace_turns AS (
            SELECT conv, trace_id, row_number() OVER (PARTITION BY conv
                ORDER BY min(start_time_unix_nano), trace_id) - 1 AS turn_index
            FROM resolved GROUP BY conv, trace_id
        ),
        requested AS (
            SELECT conv, trace_id, span_id, end_time_unix_nano, end_time, agent_name,
                   service_name, convention,
                   unnest(from_json(tool_calls_requested, {_CALLS_TYPE})) AS c
            FROM resolved WHERE tool_calls_requested IS NOT NULL
        ),
        answered AS (
            SELECT conv, r.id, arg_max(r.result, start_time_unix_nano) AS result
            FROM (SELECT conv, start_time_unix_nano, unnest(from_json(tool_results,
                    {_RESULTS_TYPE})) AS r
                  FROM resolved WHERE tool_results IS NOT NULL)
            GROUP BY conv, r.id
        ),
        -- A tool span's content, where the producer put it only in the messages (events).
        from_spans AS (
            SELECT s.conv AS conversation_id, s.trace_id, s.span_id, s.parent_span_id,
                   s.start_time_unix_nano AS t, s.tool_name, s.tool_call_id,
                   coalesce(s.tool_arguments, q.c.arguments) AS arguments,
                   coalesce(s.tool_result, a.result::VARCHAR) AS result,
                   CASE WHEN s.status_code = 'ERROR' OR s.error_type IS NOT NULL
                        THEN coalesce(s.error_type, s.status_message, 'error') END AS error,
                   s.start_time, s.end_time, s.duration_ms AS latency_ms,
                   s.agent_name, s.service_name, s.convention AS producer, 'span' AS source
            FROM resolved s
            LEFT JOIN requested q ON q.conv = s.conv AND q.c.id = s.tool_call_id
            LEFT JOIN answered a ON a.conv = s.conv AND a.id = s.tool_call_id
            WHERE s.operation = 'execute_tool'
        ),
        from_messages AS (
            SELECT q.conv AS conversation_id, q.trace_id, NULL AS span_id,
                   q.span_id AS parent_span_id, q.end_time_unix_nano AS t,
                   q.c.name AS tool_name, q.c.id AS tool_call_id,
                   q.c.arguments AS arguments, a.result::VARCHAR AS result, NULL AS error,
                   q.end_time AS start_time, NULL::TIMESTAMPTZ AS end_time,
                   NULL::DOUBLE AS latency_ms,
                   q.agent_name, q.service_name, q.convention AS producer, 'messages' AS source
            FROM requested q
            LEFT JOIN answered a ON a.conv = q.conv AND a.id = q.c.id
            WHERE q.conv NOT IN (SELECT conv FROM resolved WHERE operation = 'execute_tool')
        ),
        calls AS (SELECT * FROM from_spans UNION ALL BY NAME SELECT * FROM from_messages)
        SELECT c.conversation_id, c.trace_id, c.span_id, c.parent_span_id,
               coalesce(ts.turn_index, tt.turn_index) AS turn_index,
               row_number() OVER (PARTITION BY c.conversation_id
                                  ORDER BY c.t, c.span_id, c.tool_call_id) - 1 AS step_index,
               c.tool_name, c.tool_call_id, c.arguments::JSON AS arguments, c.result, c.error,
               c.start_time, c.end_time, c.latency_ms, c.agent_name, c.service_name,
               c.producer, c.source
        FROM calls c
        ASOF LEFT JOIN turn_starts ts ON ts.conv = c.conversation_id AND ts.t <= c.t
        LEFT JOIN trace_turns tt ON tt.conv = c.conversation_id AND tt.trace_id = c.trace_id
    """,
    "conversations": f"""
        WITH {_RESOLVED}
        SELECT conv AS conversation_id,
               arg_min(agent_name, start_time_unix_nano)
                   FILTER (WHERE agent_name IS NOT NULL) AS agent_name,
               arg_min(service_name, start_time_unix_nano) AS service_name,
               min(start_time) AS start_time,
               max(end_time) AS end_time,
               count(*) AS span_count,
               count(DISTINCT trace_id) AS trace_count,
               greatest(count(*) FILTER (WHERE operation = 'execute_tool'),
                        CASE WHEN count(*) FILTER (WHERE operation = 'execute_tool') = 0
                             THEN sum(json_array_length(tool_calls_requested)) ELSE 0 END
               )::BIGINT AS tool_call_count,
               count(*) FILTER (WHERE status_code = 'ERROR' OR error_type IS NOT NULL)
                   AS error_count,
               arg_min(user_message, start_time_unix_nano)
                   FILTER (WHERE user_message IS NOT NULL) AS first_user_message,
               max(ingest_time) AS last_ingest_time
        FROM resolved
        GROUP BY conv
    """,
}

SCHEMA_VERSION = 5

# MIGRATIONS[1] creates the current tables, so a new lake then runs every later migration on
# tables that already have their columns: later migrations must be idempotent (IF NOT EXISTS).
MIGRATIONS: dict[int, list[str]] = {
    1: [create_table_sql(name, cols) for name, cols in TABLES.items()],
    # 2: what model calls asked for and received, read from every producer's message format.
    2: [
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS tool_calls_requested JSON",
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS tool_results JSON",
        "ALTER TABLE spans ADD COLUMN IF NOT EXISTS response_text VARCHAR",
    ],
    # 3: views follow the trajectory rules (turns, tool calls rebuilt from messages).
    3: [],
    # 4: GenAI log records (messages sent as events) read like span attributes.
    4: [
        "ALTER TABLE logs ADD COLUMN IF NOT EXISTS user_message VARCHAR",
        "ALTER TABLE logs ADD COLUMN IF NOT EXISTS tool_calls_requested JSON",
        "ALTER TABLE logs ADD COLUMN IF NOT EXISTS tool_results JSON",
        "ALTER TABLE logs ADD COLUMN IF NOT EXISTS response_text VARCHAR",
    ],
    # 5: tool_calls fills a tool span's arguments and result from the messages when the
    # producer put its content only there.
    5: [],
}
