"""The lake's tables, each a tuple of `Column`s from which its DDL, the Arrow schema writers
append with and docs/reference.md are made; and the migrations from one schema version to the
next."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from spanscore.lake.schema.rules import RESOLVE_ALL_CONVERSATIONS, RESOLVE_RECORDS
from spanscore.lake.schema.simulation import SIMULATION_STOP_REASONS


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
    Column(
        "conversation_id",
        "VARCHAR",
        "conversation of the record's span (`RESOLVE_RECORDS`); without a span, the id the "
        "record carries",
    ),
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
    Column("judge_calls", "INTEGER", "LLM-judge calls paid for (answered by the endpoint)"),
    Column("judge_cache_hits", "INTEGER", "judge answers reused from judge_cache"),
    Column("judge_prompt_tokens", "BIGINT", "judge prompt tokens, cached ones included"),
    Column("judge_cached_tokens", "BIGINT", "judge prompt tokens the provider had cached"),
    Column("judge_completion_tokens", "BIGINT", "judge completion tokens"),
    Column("simulation_id", "VARCHAR", "simulation whose conversations the run scored"),
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


JUDGE_CACHE: tuple[Column, ...] = (
    Column("key", "VARCHAR", "hash of what changes the answer (endpoint, model, request)"),
    Column("kind", "VARCHAR", "chat or embedding"),
    Column("purpose", "VARCHAR", "metric or rule that asked"),
    Column("model", "VARCHAR", "model that answered"),
    Column("answer", "JSON", "the parsed answer (a JSON object, or an embedding vector)"),
    Column("prompt_tokens", "BIGINT", "prompt tokens it cost"),
    Column("cached_tokens", "BIGINT", "of which the provider had cached"),
    Column("completion_tokens", "BIGINT", "completion tokens it cost"),
    Column("cost_usd", "DOUBLE", "what it cost when first asked"),
    Column("run_id", "VARCHAR", "run that asked first"),
    Column("created_at", "TIMESTAMPTZ", "when it was stored"),
    Column("conversation_id", "VARCHAR", "conversation whose scoring asked first (erased with it)"),
)


# Span attributes every trajectory carries besides the columns (the first value a span of the
# conversation has), and stored with its rows.
CONVERSATION_ATTRIBUTES = ("scenario.id", "user.id", "gen_ai.tool.definitions")


# The builder's rows (`TRAJECTORY_COLUMNS`), stored by maintenance for conversations whose spans
# have settled (`spanscore.lake.stored`), so that a rebuild reads them instead of applying the
# rules again. Not a contract to query: the views are; this is what they compute, kept.
TRAJECTORY_STEPS: tuple[Column, ...] = (
    Column("conversation_id", "VARCHAR", "conversation"),
    Column("kind", "VARCHAR", "conversation, turn, model_call, tool_call or handoff"),
    Column("turn_index", "BIGINT", "turn of the row (NULL on the conversation's row)"),
    Column("span_id", "VARCHAR", "span of the step"),
    Column("trace_id", "VARCHAR", "trace of the step"),
    Column("name", "VARCHAR", "model call's span name, tool's name"),
    Column("start_ns", "BIGINT", "start, ns since the epoch"),
    Column("end_ns", "BIGINT", "the conversation's end, ns since the epoch"),
    Column("latency_ms", "DOUBLE", "step duration in milliseconds"),
    Column("error", "VARCHAR", "error type of a failed step"),
    Column("error_message", "VARCHAR", "what the failure said"),
    Column("text", "VARCHAR", "a turn's user message, a model call's answer"),
    Column("final_response", "VARCHAR", "a turn's final answer"),
    Column("arguments", "VARCHAR", "a tool call's arguments"),
    Column("result", "VARCHAR", "a tool call's result"),
    Column("call_id", "VARCHAR", "a tool call's id"),
    Column("parallel_group", "BIGINT", "calls one model response requested share it"),
    Column("source", "VARCHAR", "span, messages or span+messages"),
    Column("requested", "VARCHAR[]", "tools a model call asked for"),
    Column("input_tokens", "BIGINT", "a model call's input tokens"),
    Column("output_tokens", "BIGINT", "a model call's output tokens"),
    Column("agent_name", "VARCHAR", "the conversation's agent; the agent that handed off"),
    Column("to_agent", "VARCHAR", "the agent handed off to"),
    Column("service_name", "VARCHAR", "the conversation's service"),
    Column("span_count", "BIGINT", "the conversation's spans"),
    Column("rootless_traces", "BIGINT", "its traces without a root span"),
    Column("orphan_spans", "BIGINT", "its spans whose parent is missing"),
    *(
        Column(f"attribute_{i}", "VARCHAR", f"the conversation's first `{key}`")
        for i, key in enumerate(CONVERSATION_ATTRIBUTES, 1)
    ),
    Column("place", "BIGINT", "where the step stands in the conversation"),
    Column("sub", "BIGINT", "where a requested call stands in its request"),
    Column("fingerprint", "UBIGINT", "what the rows were built from (conversation's row)"),
    Column("rules", "VARCHAR", "version of the rules that built them (conversation's row)"),
)


# `spanscore simulate`: each simulation, each trial (a conversation between a simulated user
# and the agent; a trial interrupted and run again is a new attempt, a new conversation), and
# each user turn. Written by the simulator directly; the agent's spans arrive over OTLP.
SIMULATIONS: tuple[Column, ...] = (
    Column("simulation_id", "VARCHAR", "simulation id"),
    Column("suite_name", "VARCHAR", "suite whose scenarios' users were simulated"),
    Column("suite_hash", "VARCHAR", "the suite's version"),
    Column("target", "VARCHAR", "the agent driven (module:function, or URL)"),
    Column("status", "VARCHAR", "running, completed, interrupted, budget_spent or failed"),
    Column("started_at", "TIMESTAMPTZ", "when it started"),
    Column("finished_at", "TIMESTAMPTZ", "when it ended (NULL while running)"),
    Column("trials", "INTEGER", "trials per scenario"),
    Column("options", "JSON", "max turns, timeouts, seed, concurrency, scenarios"),
    Column("details", "JSON", "counts by stop reason, the user model's calls and cost"),
    Column("host", "VARCHAR", "machine that ran it"),
)


SIMULATED_CONVERSATIONS: tuple[Column, ...] = (
    Column("conversation_id", "VARCHAR", "conversation id the agent's spans carry"),
    Column("simulation_id", "VARCHAR", "simulation"),
    Column("scenario_id", "VARCHAR", "scenario whose user was simulated"),
    Column("trial", "INTEGER", "trial number, from 1"),
    Column("attempt", "INTEGER", "attempt at the trial, from 1 (a resumed trial runs again)"),
    Column("status", "VARCHAR", "planned, running or finished"),
    Column("stop_reason", "VARCHAR", "why it ended: " + ", ".join(SIMULATION_STOP_REASONS)),
    Column("error", "VARCHAR", "the agent's or the user model's error"),
    Column("turn_count", "INTEGER", "user messages sent"),
    Column("started_at", "TIMESTAMPTZ", "when the trial started"),
    Column("finished_at", "TIMESTAMPTZ", "when it ended"),
    Column("user_calls", "INTEGER", "user-model calls paid for"),
    Column("user_cache_hits", "INTEGER", "user turns replayed from the cache"),
    Column("user_cost_usd", "DOUBLE", "the user model's estimated cost"),
)

SIMULATED_TURNS: tuple[Column, ...] = (
    Column("conversation_id", "VARCHAR", "simulated conversation"),
    Column("turn_index", "INTEGER", "turn, from 0 (as the turns view counts)"),
    Column("user_message", "VARCHAR", "what the simulated user said"),
    Column("agent_reply", "VARCHAR", "what the agent answered (NULL when it failed)"),
    Column("error", "VARCHAR", "why the agent gave no answer"),
    Column("latency_ms", "DOUBLE", "the agent's time to answer"),
    Column("user_cached", "BOOLEAN", "the user's message came from the cache"),
    Column("sent_at", "TIMESTAMPTZ", "when the user's message was sent"),
)
# One row per erasure (`spanscore erase`) and per retention pass that deleted rows: who, when
# and how many rows, never which conversations.
ERASURES: tuple[Column, ...] = (
    Column("erase_id", "VARCHAR", "erasure id"),
    Column("reason", "VARCHAR", "erase (asked for) or retention (rows past retention_days)"),
    Column("requested_by", "VARCHAR", "user and host that asked (user@host)"),
    Column("selection", "VARCHAR", "ids, where or retention: how the rows were chosen"),
    Column("started_at", "TIMESTAMPTZ", "when the rows left the lake's current data"),
    Column("finished_at", "TIMESTAMPTZ", "when their old files were deleted (NULL: pending)"),
    Column("status", "VARCHAR", "erased (old files still on disk) or purged (gone from disk)"),
    Column("conversations", "BIGINT", "conversations erased"),
    Column("spans", "BIGINT", "spans deleted"),
    Column("log_records", "BIGINT", "log records deleted"),
    Column("scores_cleared", "BIGINT", "scores whose explanation and details were cleared"),
    Column("derived_rows", "BIGINT", "rows deleted from the tables of CONVERSATION_CONTENT"),
    Column("details", "JSON", "files rewritten and deleted, snapshots expired, rows by table"),
)


# The review loop (`spanscore ui`): what people said of conversations and of their scores, and
# the queues they work through. The only tables the review app writes.
LABELS: tuple[Column, ...] = (
    Column("label_id", "VARCHAR", "label id"),
    Column("conversation_id", "VARCHAR", "conversation labelled"),
    Column("metric", "VARCHAR", "metric the label reviews (NULL: the whole conversation)"),
    Column("scenario_id", "VARCHAR", "scenario of the score reviewed, when it reviews one"),
    Column("run_id", "VARCHAR", "run whose score the label reviews, when it reviews one"),
    Column("passed", "BOOLEAN", "the reviewer's pass or fail"),
    Column("value", "DOUBLE", "the reviewer's value, on the metric's scale"),
    Column("label", "VARCHAR", "the reviewer's categorical label"),
    Column("judge_agreed", "BOOLEAN", "the reviewer agreed (true) or not with the run's score"),
    Column("comment", "VARCHAR", "the reviewer's comment"),
    Column("reviewer", "VARCHAR", "who labelled (the session's or the token's name)"),
    Column("queue", "VARCHAR", "review queue it was given in, if any"),
    Column("created_at", "TIMESTAMPTZ", "when it was given; a reviewer's newest label counts"),
)

REVIEW_QUEUES: tuple[Column, ...] = (
    Column("queue", "VARCHAR", "queue name (unique)"),
    Column("source", "JSON", "what it was built from: a filter, or a run's failures"),
    Column("size", "INTEGER", "conversations asked for"),
    Column("seed", "BIGINT", "seed of the sample"),
    Column("created_by", "VARCHAR", "who built it"),
    Column("created_at", "TIMESTAMPTZ", "when it was built"),
)

REVIEW_QUEUE_ITEMS: tuple[Column, ...] = (
    Column("queue", "VARCHAR", "queue"),
    Column("position", "INTEGER", "place in the queue, from 0"),
    Column("conversation_id", "VARCHAR", "conversation to review"),
    Column("metric", "VARCHAR", "metric to review (NULL: the whole conversation)"),
    Column("scenario_id", "VARCHAR", "scenario of the score to review"),
    Column("run_id", "VARCHAR", "run whose score is reviewed"),
    Column("added_at", "TIMESTAMPTZ", "when it was queued"),
)


# Tables holding what a conversation said, or what was made of it (stored trajectories; judge
# answers, the simulated user's included, which may quote it; simulated users' turns and the
# agent's replies; people's labels and the review queues' items), by `conversation_id`.
# `spanscore erase` deletes a conversation's rows from each, and retention those of the
# conversations whose spans or records it deletes: a new table of conversation content is added
# here, and only here.
CONVERSATION_CONTENT: tuple[str, ...] = (
    "trajectory_steps",
    "judge_cache",
    "simulated_turns",
    "labels",
    "review_queue_items",
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
    "judge_cache": JUDGE_CACHE,
    "trajectory_steps": TRAJECTORY_STEPS,
    "simulations": SIMULATIONS,
    "simulated_conversations": SIMULATED_CONVERSATIONS,
    "simulated_turns": SIMULATED_TURNS,
    "erasures": ERASURES,
    "labels": LABELS,
    "review_queues": REVIEW_QUEUES,
    "review_queue_items": REVIEW_QUEUE_ITEMS,
    "spanscore_schema": SCHEMA_INFO,
}


SCHEMA_VERSION = 14


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
    # 6: the LLM judge: its cache, and what it did in each run.
    6: [
        create_table_sql("judge_cache", JUDGE_CACHE),
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS judge_calls INTEGER",
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS judge_cache_hits INTEGER",
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS judge_prompt_tokens BIGINT",
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS judge_cached_tokens BIGINT",
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS judge_completion_tokens BIGINT",
    ],
    # 7: one definition of a conversation: requested calls that never ran, turns across model
    # calls without a user message, tool spans joined to requests by name and order, where
    # the conversation id came from (`conversation_source`), and `turn_count`.
    7: [],
    # 8: a span's conversation is stored resolved (`RESOLVE_CONVERSATIONS`), so the views
    # filter a stored column: spans stored before are resolved once here.
    8: [RESOLVE_ALL_CONVERSATIONS.format(spans="spans")],
    # 9: the builder's rows, stored by maintenance for settled conversations.
    9: [create_table_sql("trajectory_steps", TRAJECTORY_STEPS)],
    # 10: no data inlining. DuckLake keeps inserts of up to 10 rows in its catalog until
    # `ducklake_flush_inlined_data` moves them to a file, and a query running while that
    # happens may miss the moved rows (seen: a conversation committed seconds before absent
    # from one read in about 70 during maintenance). A small commit now writes its own file,
    # which compaction merges: the same commit latency, measured. Maintenance still flushes
    # what older lakes or other writers inlined.
    10: ["CALL set_option('data_inlining_row_limit', 0)"],
    # 11: a log record is stored with its span's conversation (`RESOLVE_RECORDS`), and the
    # views join records to spans on it: records stored before are resolved once here.
    11: [RESOLVE_RECORDS.format(logs="logs", spans="spans")],
    # 12: simulated users (`spanscore simulate`): the simulations, their trials and turns, and
    # the simulation an evaluation run scored.
    12: [
        create_table_sql("simulations", SIMULATIONS),
        create_table_sql("simulated_conversations", SIMULATED_CONVERSATIONS),
        create_table_sql("simulated_turns", SIMULATED_TURNS),
        "ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS simulation_id VARCHAR",
    ],
    # 13: erasure and retention: the audit table, and which conversation a judge answer was
    # asked for (answers stored before have none: erase cannot find them).
    13: [
        create_table_sql("erasures", ERASURES),
        "ALTER TABLE judge_cache ADD COLUMN IF NOT EXISTS conversation_id VARCHAR",
    ],
    # 14: the review loop: human labels, and the review queues people work through.
    14: [
        create_table_sql("labels", LABELS),
        create_table_sql("review_queues", REVIEW_QUEUES),
        create_table_sql("review_queue_items", REVIEW_QUEUE_ITEMS),
    ],
}
