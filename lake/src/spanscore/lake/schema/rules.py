"""The conversation rules, written once in SQL (docs/conversations.md): which span belongs to
which conversation, turn and step, and the views (`tool_calls`, `turns`, `conversations`) made
of them. The trajectory builder reads the same rules (`trajectory`)."""

from __future__ import annotations

from dataclasses import dataclass

from spanscore.lake.schema.simulation import SIMULATION_VIEWS

# The conversation rules, written once (docs/conversations.md): the views below and the rows the
# builder in spanscore.evaluation.trajectory.assemble assembles (`trajectory_rows_sql`) are
# defined from them:
# - conversation: the id a span carries; a span without one (its trace id stood in) takes the
#   one another span of its trace carries. That part is stored, not computed here
#   (`RESOLVE_CONVERSATIONS`), so `spans.conversation_id` is already the conversation and a
#   filter on it reaches the scan. `conversation_source` says where it came from: 'attribute'
#   when some span carried an id, 'trace' when the trace id stood in for the whole conversation;
# - model call: a chat span, or any span whose messages requested tools or gave an answer;
# - turn: a model call with a user message starts a new turn when that message differs from
#   the latest user message before it, or when the model call before it answered (text, no
#   tool calls requested); a model call without a user message never starts one. Without model
#   calls, each trace with tool spans is a turn;
# - tool calls: every call a model requested, joined to its tool span by call id, else by turn,
#   name and order; a tool span joined to no request is a call of its own. A joined call takes
#   the span's arguments and result where the span has them, else the messages'. The calls one
#   model response requested share a `parallel_group`. A server's span of a call (kind SERVER)
#   inside the caller's tool span of the same tool is not a call (`tools`).
# A failed span's error message, beside its type: the `exception.message` of its first
# exception event (where record_exception put the error's own words; OpenTelemetry Python's
# status description repeats them after the type, "RuntimeError: <message>", which read
# "RuntimeError: RuntimeError: ..." beside the type), else the status description (unless it
# only repeats the type, as Google ADK's does), else the `error` of a result shaped
# `{"error": ...}` (ADK's tools report failures so), else the status description. One rule
# for the `tool_calls` view and the trajectory builder; `s` is the spans' alias.
ERROR_MESSAGE_SQL = """CASE WHEN s.status_code = 'ERROR' OR s.error_type IS NOT NULL THEN
    coalesce(nullif(list_filter(from_json(s.events, '["JSON"]'),
            lambda e: e->>'$.name' = 'exception')[1]->>'$.attributes."exception.message"', ''),
        nullif(s.status_message, s.error_type),
        CASE WHEN json_valid(s.tool_result) THEN s.tool_result->>'$.error' END,
        s.status_message) END"""


CALLS_TYPE = """'[{"id": "VARCHAR", "name": "VARCHAR", "arguments": "JSON"}]'"""


_RESULTS_TYPE = """'[{"id": "VARCHAR", "result": "JSON"}]'"""


# Spans of an agent, a workflow or an agent loop: they repeat what their model calls said, so
# they are never model calls themselves, whatever messages they carry (the collector stores
# no requested calls for them). One list, read by the collector, the views and the builder.
AGENT_OPERATIONS = (
    "invoke_agent",
    "create_agent",
    "invoke_workflow",
    "execute_event_loop_cycle",
    "workflow",
    "task",
)


# An agent's span that carries the user's message (an `invoke_agent` span with the turn's
# messages): never a model call, but it starts a turn as a model call would, and gives the turn
# its user message and, when no model call answered, its answer. Producers that capture content
# only on agent spans have turns this way.
_TURN_AGENT_SQL = f"""(coalesce(operation, '') IN ({", ".join(f"'{o}'" for o in AGENT_OPERATIONS)})
    AND user_message IS NOT NULL)"""


# Which spans are model calls (`placed` below).
MODEL_CALL_SQL = f"""(operation = 'chat' OR (
    (tool_calls_requested IS NOT NULL OR response_text IS NOT NULL)
    AND coalesce(operation, '') NOT IN ({", ".join(f"'{o}'" for o in AGENT_OPERATIONS)})))"""


# Log records that say something about a span's model call: what `events` reads. While a lake
# has none, its views are those of `views(log_records=False)`; the collector's writer replaces
# them with the full ones in the transaction that stores the first such record.
_SAYS_SOMETHING = """(user_message IS NOT NULL
    OR tool_calls_requested IS NOT NULL OR tool_results IS NOT NULL OR response_text IS NOT NULL)"""


LOG_RECORD_CONTENT = f"span_id IS NOT NULL AND {_SAYS_SOMETHING}"


@dataclass(frozen=True)
class Source:
    """Where the rules read spans and log records: the lake's tables (`LAKE`), or relations
    holding copies of their rows, each span with its row id in the lake as a column (what an
    evaluation reads its window from: `spanscore.evaluation.trajectory.spread`). `row_id` is
    the expression of that id for the spans' alias `s`."""

    spans: str = "spans"
    logs: str = "logs"
    row_id: str = "s.rowid"


LAKE = Source()


# What GenAI log records say about each span's model call (producers that send messages as
# events, not attributes), by span. A record is stored with its span's conversation
# (`RESOLVE_RECORDS`), and `events` is joined to the spans on it: a view's filter on the
# conversation then reaches the scan of `logs` as it reaches that of `spans` (grouping every
# record of the lake made a point query take 1.4 s on 400,000 records; bench/query.py).
# Not materialized: a filter reaches no CTE that two reads share (`flagged`, `marked`).
# `where` narrows the records as it narrows the builder's spans (its alias `s`, its
# conversation ids). Not `LOG_RECORD_CONTENT`: DuckDB 1.5 keeps a filter that reaches a scan
# late (the view's, through the join) out of a scan already given one (`span_id IS NOT NULL`),
# and a record without a span joins none anyway.
# `marks`: what the windows that place spans read of it (`marked`), whether a record requested
# calls or answered and not what, so that the JSON of the calls is parsed and the answers
# joined once per query, not twice (a full read of `tool_calls` took 1.3 times as long).
def _events(where: str = "", *, marks: bool = False, source: Source = LAKE) -> str:
    if marks:
        said = """any_value(tool_calls_requested) AS tool_calls_requested,
            NULL::JSON AS tool_results, any_value(response_text) AS response_text"""
    else:
        said = f"""CASE WHEN count(tool_calls_requested) > 0 THEN to_json(flatten(list(
                from_json(tool_calls_requested, {CALLS_TYPE}) ORDER BY time_unix_nano)
                FILTER (WHERE tool_calls_requested IS NOT NULL))) END AS tool_calls_requested,
            CASE WHEN count(tool_results) > 0 THEN to_json(flatten(list(
                from_json(tool_results, {_RESULTS_TYPE}) ORDER BY time_unix_nano)
                FILTER (WHERE tool_results IS NOT NULL))) END AS tool_results,
            string_agg(response_text, '\n' ORDER BY time_unix_nano) AS response_text"""
    return f"""{"marks" if marks else "events"} AS NOT MATERIALIZED (
        SELECT conversation_id, trace_id, span_id,
            arg_max(user_message, time_unix_nano)
                FILTER (WHERE user_message IS NOT NULL) AS user_message,
            {said}
        FROM {source.logs} s
        {f"{where} AND" if where else "WHERE"} {_SAYS_SOMETHING}
        GROUP BY conversation_id, trace_id, span_id
    )"""


_EVENTS = _events()


# Spans with what `events` (or `marks`) says, where the span's own attributes say nothing: in
# a query that defines it (`_spans_and`), or on its own (`SPANS_WITH_EVENTS`).
# A span directly inside a model call (its parent is one by its own attributes) is part of
# that call, and what its log records say is that call's messages again: they are not joined.
# Joined, they made it a second model call (Google ADK's legacy schema with content capture on:
# the records of the `generate_content` span inside each `call_llm` span, whose attributes
# hold the same request and response, split each turn in two and asked for each call twice).
# `where` narrows the parents read as it narrows the records (`_events`). The parents are
# grouped, not filtered: DuckDB 1.5 keeps the conversation's filter out of a scan filtered by
# `MODEL_CALL_SQL` (its list of operations becomes a join), so a point query read every model
# call of the lake.
_SAID = ("user_message", "tool_calls_requested", "tool_results", "response_text")


def _spans_and(events: str = "events", where: str = "", source: Source = LAKE) -> str:
    said = ",\n        ".join(
        f"coalesce(s.{c}, CASE WHEN m.span_id IS NULL THEN e.{c} END) AS {c}" for c in _SAID
    )
    return f"""(
    SELECT s.* REPLACE (
        {said}),
        {source.row_id} AS span_row
    FROM {source.spans} s
    LEFT JOIN (SELECT conversation_id, trace_id, span_id FROM {source.spans} s {where} GROUP BY ALL
               HAVING bool_or({MODEL_CALL_SQL})) m ON m.conversation_id = s.conversation_id
        AND m.trace_id = s.trace_id AND m.span_id = s.parent_span_id
    LEFT JOIN {events} e ON e.conversation_id = s.conversation_id
        AND e.trace_id = s.trace_id AND e.span_id = s.span_id
)"""


SPANS_WITH_EVENTS = f"(WITH {_EVENTS} SELECT * FROM {_spans_and()})"


# The spans alone, for views of a lake whose log records say nothing about any span
# (`LOG_RECORD_CONTENT`): joining them would change no row, and costs a point query about a
# third of its time (planning the join twice; bench/query.py).
def _spans_alone(source: Source = LAKE) -> str:
    return f"(SELECT s.*, {source.row_id} AS span_row FROM {source.spans} s)"


# A span without a conversation id of its own (its trace id stood in) belongs to the one
# another span of its trace carries (the greatest, should they carry several). The collector
# applies this when it commits: to the spans of the export, and to spans of the same trace it
# stored before (children are exported before their root); maintenance, and migration 8, to
# what no collector saw together (another collector's spans, a restart). Applied again, it
# changes nothing.
# The conversation the spans of `{spans}` carry, per trace, and the aggregate that picks it
# among several (the collector's writer applies it to an export with Arrow's of that name):
KNOWN_CONVERSATION_AGGREGATE = "max"


KNOWN_CONVERSATIONS = f"""SELECT trace_id, {KNOWN_CONVERSATION_AGGREGATE}(conversation_id)
    AS conversation_id FROM {{spans}} WHERE conversation_id <> trace_id GROUP BY trace_id"""


# Spans of `{spans}` stored without one take that of `{known}` (trace_id, conversation_id);
# `{also}` may narrow the spans looked at (`AND s.ingest_time >= ?`). The collector applies
# it to log records too, stored with their trace id until their trace's conversation is known
# (`RESOLVE_RECORDS`).
RESOLVE_CONVERSATIONS = """
UPDATE {spans} s SET conversation_id = known.conversation_id
FROM {known} known
WHERE s.trace_id = known.trace_id AND s.conversation_id = s.trace_id{also}"""


# Every span of `{spans}`, from the ids the lake's spans carry.
RESOLVE_ALL_CONVERSATIONS = RESOLVE_CONVERSATIONS.format(
    spans="{spans}", known=f"({KNOWN_CONVERSATIONS})", also=""
)


# How many stored spans `RESOLVE_ALL_CONVERSATIONS` would change: maintenance looks before it
# holds the writer off.
UNRESOLVED_SPANS = """
SELECT count(*) FROM {spans} s
SEMI JOIN (SELECT trace_id FROM {spans} WHERE conversation_id <> trace_id) known
    ON known.trace_id = s.trace_id
WHERE s.conversation_id = s.trace_id"""


# A log record about a span belongs to its span's conversation, and is stored with it, so that
# a filter on the conversation reaches the records too (`events`). The collector's writer gives
# a record the conversation of its span when it stores both together, else the id the record
# carries, else that of its trace as far as it knows, else the trace id, which it resolves
# with the trace's spans (`collector.conversations`). Maintenance, and migration 11, apply it
# to every record: a record and its span stored by two collectors, a record given another
# conversation than its span came with. Applied again, it changes nothing.
RESOLVE_RECORDS = """
UPDATE {logs} l SET conversation_id = s.conversation_id
FROM {spans} s
WHERE l.trace_id = s.trace_id AND l.span_id = s.span_id
    AND l.conversation_id IS DISTINCT FROM s.conversation_id"""


# How many stored records `RESOLVE_RECORDS` would change (maintenance looks first).
UNRESOLVED_RECORDS = """
SELECT count(*) FROM {logs} l JOIN {spans} s ON l.trace_id = s.trace_id AND l.span_id = s.span_id
WHERE l.conversation_id IS DISTINCT FROM s.conversation_id"""


# The order of a conversation's spans, everywhere (the builder reads them in this order too),
# given what says a span is a model call (`MODEL_CALL_SQL`, or a column holding it). Producers
# that stamp times to the millisecond (the OpenTelemetry JS SDK under the Vercel AI SDK) start
# several spans in the same one; at the same start time:
# - a tool span comes after the rest (a model call and the tool call it requested; the longer
#   tool span came first);
# - model calls come after other spans, and among them the one that ended first comes first:
#   model calls follow one another, they never enclose one another (a turn's second call,
#   started in its first one's millisecond, came first and split the turn in two);
# - other spans, the longer first: an agent's span before what it encloses.
def span_order(is_model: str = MODEL_CALL_SQL) -> str:
    return (
        f"start_time_unix_nano, operation IS NOT DISTINCT FROM 'execute_tool', {is_model}, "
        f"CASE WHEN {is_model} THEN end_time_unix_nano ELSE -end_time_unix_nano END, span_id"
    )


SPAN_ORDER = span_order()


# The columns of `spans` the views read (narrow rows: every window sorts what it carries).
_PLACED_COLUMNS = (
    "conversation_id",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "operation",
    "start_time",
    "end_time",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "duration_ms",
    "status_code",
    "error_type",
    "agent_name",
    "service_name",
    "convention",
    "tool_name",
    "tool_call_id",
    "tool_arguments",
    "tool_result",
    "user_message",
    "tool_calls_requested",
    "tool_results",
    "response_text",
    "ingest_time",
)


# A hand-off: a span of its own, not a model call or a tool call (the builder's `Handoff`).
_HANDOFF_SQL = """(operation = 'handoff' OR starts_with(name, 'handoff'))
    AND operation IS DISTINCT FROM 'execute_tool' AND operation IS DISTINCT FROM 'chat'
    AND tool_calls_requested IS NULL AND response_text IS NULL"""


# A tool span of kind SERVER: the server's side of a call made from elsewhere (`tools`, in
# `CALLS`).
_SERVER_TOOL_SQL = """s.operation IS NOT DISTINCT FROM 'execute_tool'
    AND s.kind IS NOT DISTINCT FROM 'SERVER'"""


# Every view reads a conversation's spans through `placed`, its one materialized relation, and
# goes on from there in one chain of windows, groupings and joins on the conversation: so a
# filter on `conversation_id` reaches the scans of `spans`. (DuckDB pushes a filter into a
# materialized CTE only when every reference to it is filtered as optimisation starts, which a
# reference from another materialized CTE never is: the CTEs these views were built from before
# made every point query scan the whole lake.)
#
# A window sorts every column it carries, and that, not the ranking, is its cost (one window
# over `placed`'s 25 columns: 1 s for 300,000 spans; over one column, 0.07 s). So the windows
# that place the spans run on narrow rows (`ordered`, `turned`), and the wide columns are
# joined to them by the span's row id (`marked` for the windows and `flagged` for the columns
# read the same rows, not materialized, so that the filter reaches both scans; the join is on
# the conversation too, for the same reason: a span without a conversation id, which the
# collector never stores, is in no conversation).
#
# `placed`: every span with its place in the conversation: its rank in `SPAN_ORDER`, whether it
# is a model call (`MODEL_CALL_SQL`) or a tool span, the turn it falls in, and for a model call
# that requested tools the parallel group of what it requested. Any other span's turn is the
# turn of the latest model call before it, the first turn before any (`trace_turns` gives the
# turn of tool and hand-off spans in conversations without model calls).
def placed_ctes(
    where: str = "", extra: str = "", *, log_records: bool = True, source: Source = LAKE
) -> str:
    """`placed` and `trace_turns`; `where` narrows the spans read (the builder's conversations),
    `extra` adds columns (the builder's attribute values); without `log_records`, what log
    records say is left out (`_spans_alone`); `source`: where the spans and records are read."""

    def flagged(name: str, spans: str) -> str:
        return f"""{name} AS NOT MATERIALIZED (
        SELECT span_row, conversation_id AS conv, {", ".join(_PLACED_COLUMNS)}{extra},
               CASE WHEN s.status_code = 'ERROR' OR s.error_type IS NOT NULL
                    THEN coalesce(s.error_type, s.status_message, 'error') END AS error,
               {ERROR_MESSAGE_SQL} AS error_message, {MODEL_CALL_SQL} AS is_model,
               {_TURN_AGENT_SQL} AS is_turn_agent,
               s.operation IS NOT DISTINCT FROM 'execute_tool' AS is_tool,
               {_SERVER_TOOL_SQL} AS is_server_tool,
               {_HANDOFF_SQL} AS is_handoff
        FROM {spans} s {where}
    )"""

    # `flagged`: every span with what it is; `marked`, the same rows read for the windows.
    if log_records:
        read = f"""{_events(where, source=source)}, {_events(where, marks=True, source=source)},
    {flagged("flagged", _spans_and(where=where, source=source))},
    {flagged("marked", _spans_and("marks", where, source))},"""
    else:
        read = f"""{flagged("flagged", _spans_alone(source))},
    marked AS NOT MATERIALIZED (SELECT * FROM flagged),"""
    return f"""
    {read}
    ordered AS (
        SELECT span_row, conv,
               row_number() OVER w AS span_order,
               CASE WHEN (is_model OR is_turn_agent)
                        AND (count(*) FILTER (WHERE is_model OR is_turn_agent) OVER before = 0
                        OR (user_message IS NOT NULL AND (user_message IS DISTINCT FROM
                                last_value(CASE WHEN is_model OR is_turn_agent THEN user_message
                                    END IGNORE NULLS) OVER before
                            OR last_value(CASE WHEN is_model THEN answered
                                    WHEN is_turn_agent THEN false
                                END IGNORE NULLS) OVER before)))
                    THEN 1 ELSE 0 END AS starts_turn,
               count(*) FILTER (WHERE is_model OR is_turn_agent) OVER (w ROWS BETWEEN
                   UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS turn_spans,
               CASE WHEN is_model AND requested
                    THEN count(*) FILTER (WHERE is_model AND requested)
                        OVER (w ROWS UNBOUNDED PRECEDING)
               END AS parallel_group
        FROM (SELECT span_row, conv, start_time_unix_nano, operation, end_time_unix_nano,
                     span_id, is_model, is_turn_agent, user_message,
                     tool_calls_requested IS NOT NULL AS requested,
                     tool_calls_requested IS NULL AND response_text IS NOT NULL AS answered
              FROM marked)
        WINDOW w AS (PARTITION BY conv ORDER BY {span_order("is_model")}),
            before AS (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ),
    turned AS (
        SELECT span_row, conv, span_order, turn_spans, parallel_group,
               CASE WHEN turn_spans > 0
                    THEN greatest(sum(starts_turn) OVER upto - 1, 0) END::BIGINT AS turn_index
        FROM ordered
        WINDOW upto AS (PARTITION BY conv ORDER BY span_order ROWS UNBOUNDED PRECEDING)
    ),
    placed AS MATERIALIZED (
        SELECT f.*, t.span_order, t.turn_spans, t.parallel_group, t.turn_index
        FROM flagged f JOIN turned t
            ON t.span_row = f.span_row AND t.conv = f.conv
    ),
    trace_turns AS (
        SELECT conv, trace_id, min(start_time) AS start_time, row_number() OVER (
                PARTITION BY conv ORDER BY min(start_time_unix_nano), trace_id) - 1 AS turn_index
        FROM placed WHERE (is_tool OR is_handoff) AND turn_spans = 0
        GROUP BY conv, trace_id
    )"""


def _joining(stage: str, source: str, key: str, before: list[str]) -> str:
    """One stage of joining requests to tool spans: of the rows of `source` that no stage
    `before` joined, the k-th request and the k-th tool span with the same turn and `key` are
    one call. Adds `<stage>` (joined here) and `<stage>_rank` (that k)."""
    eligible = " AND ".join(
        ["turn_index IS NOT NULL", *(f"{k.strip()} IS NOT NULL" for k in key.split(","))]
        + [f"NOT {b}" for b in before]
    )
    return f"""{stage} AS (
        SELECT * EXCLUDE (requests_upto, spans_upto, requests_in, spans_in),
               {eligible} AND CASE WHEN is_request THEN requests_upto <= spans_in
                   ELSE spans_upto <= requests_in END AS {stage},
               CASE WHEN is_request THEN requests_upto ELSE spans_upto END AS {stage}_rank
        FROM (SELECT *,
                  count(*) FILTER (WHERE is_request AND {eligible}) OVER upto AS requests_upto,
                  count(*) FILTER (WHERE NOT is_request AND {eligible}) OVER upto AS spans_upto,
                  count(*) FILTER (WHERE is_request AND {eligible}) OVER whole AS requests_in,
                  count(*) FILTER (WHERE NOT is_request AND {eligible}) OVER whole AS spans_in
              FROM {source}
              WINDOW g AS (PARTITION BY conv, turn_index, {key}
                           ORDER BY span_order, request_order),
                  upto AS (g ROWS UNBOUNDED PRECEDING),
                  whole AS (g ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING))
    )"""


# Arguments as a key: equal when their JSON, minified by `json()`, is; and narrow (a 128-bit
# hash: the windows that rank calls carry it).
_ARGS_KEY = "md5_number(json({})::VARCHAR)"


# Tool calls: every call a model requested (once per call id) and every tool span, ranked on
# narrow rows and joined to their spans at the end. Joining is ranking: the k-th request and
# the k-th span with the same turn and call id are one call; of what is left, so are the k-th
# request and the k-th span with the same turn, tool name and arguments (tools a framework ran
# concurrently start in any order); then the same by turn and tool name. A call's result from
# the messages is the latest `tool_results` entry with its call id.
#
# `tools`: the tool spans that are calls. A tool span of kind SERVER (an MCP server's
# `tools/call NAME` span, as the MCP SDK records it) is the server's side of a call, and not a
# call of its own, when a tool span of another kind in the same conversation and trace, with
# the same tool name, lasts from its start to its end: that span records the call from the
# caller's side, with the arguments and the result. Why so: the OpenTelemetry MCP conventions
# make the client's span the server's span's parent (the trace context goes in the request's
# `params._meta`), and a client's span lasts until the response is back, so the server's span
# lies within it. Within, not below: no parent chain is walked, and the spans in between (the
# SDK's own CLIENT span, an HTTP client's) may be missing or not tool spans. The same tool
# name, so that a server's span inside another tool's call (a tool whose code calls an MCP
# server without recording a tool span of its own) stays the only record of its call; so does
# a server's span with no client span around it (an agent whose MCP client records no tool
# spans). It is still a span of the conversation and of its trace: the trace's turn
# (`trace_turns`) is the same either way, the caller's span being in that trace and starting
# no later. Written as a left join of the SERVER tool spans (usually none) to the others, not
# as a semi- or anti-join: DuckDB pushes a view's filter on the conversation into both sides
# of a left join on it, but not into the right side of a semi- or anti-join, and `placed`, read
# there unfiltered, made one conversation read the whole lake (`test_views_plan.py`). The join
# is about 1 % of a full read of `tool_calls`.
CALLS = f"""
    tools AS (
        SELECT conv, trace_id, turn_index, span_order, tool_call_id, tool_name, tool_arguments
        FROM placed WHERE is_tool AND NOT is_server_tool
        UNION ALL
        SELECT s.conv, s.trace_id, s.turn_index, s.span_order, s.tool_call_id, s.tool_name,
               s.tool_arguments
        FROM placed s LEFT JOIN placed c ON c.conv = s.conv AND c.trace_id = s.trace_id
            AND c.tool_name = s.tool_name AND c.is_tool AND NOT c.is_server_tool
            AND c.start_time_unix_nano <= s.start_time_unix_nano
            AND c.end_time_unix_nano >= s.end_time_unix_nano
        WHERE s.is_server_tool AND c.conv IS NULL
    ),
    items AS (
        SELECT conv, true AS is_request, turn_index, span_order, request_order,
               c.id AS call_id, c.name AS match_name, {_ARGS_KEY.format("c.arguments")} AS args_key
        FROM (SELECT *, unnest(calls) AS c, unnest(range(len(calls))) AS request_order
              FROM (SELECT conv, turn_index, span_order,
                           from_json(tool_calls_requested, {CALLS_TYPE}) AS calls
                    FROM placed WHERE is_model AND tool_calls_requested IS NOT NULL))
        -- a call id requested again (the same response recorded twice) is the first request
        QUALIFY c.id IS NULL OR row_number() OVER (
            PARTITION BY conv, c.id ORDER BY span_order, request_order) = 1
        UNION ALL
        SELECT p.conv, false, coalesce(p.turn_index, tt.turn_index), span_order, 0,
               tool_call_id, tool_name, {_ARGS_KEY.format("tool_arguments")}
        FROM tools p LEFT JOIN trace_turns tt ON tt.conv = p.conv AND tt.trace_id = p.trace_id
    ),
    {_joining("by_id", "items", "call_id", [])},
    {_joining("by_args", "by_id", "match_name, args_key", ["by_id"])},
    {_joining("by_name", "by_args", "match_name", ["by_id", "by_args"])},
    joined AS (
        SELECT *, row_number() OVER (PARTITION BY conv ORDER BY
                      coalesce(model_order, tool_order), coalesce(request_order, 0)) - 1
                      AS step_index
        FROM (SELECT conv, any_value(turn_index) AS turn_index,
                     any_value(span_order) FILTER (WHERE is_request) AS model_order,
                     any_value(request_order) FILTER (WHERE is_request) AS request_order,
                     any_value(call_id) FILTER (WHERE is_request) AS request_id,
                     any_value(match_name) FILTER (WHERE is_request) AS request_name,
                     any_value(span_order) FILTER (WHERE NOT is_request) AS tool_order
              -- the pair an item is in: how it was joined and on what (an item joined by no
              -- stage is a pair of its own)
              FROM (SELECT *, CASE WHEN by_id THEN 1 WHEN by_args THEN 2 WHEN by_name THEN 3
                                   ELSE 0 END AS how
                    FROM by_name)
              GROUP BY conv, how, CASE WHEN how > 0 THEN turn_index END,
                  CASE how WHEN 1 THEN call_id WHEN 2 THEN match_name WHEN 3 THEN match_name END,
                  CASE WHEN how = 2 THEN args_key END,
                  CASE how WHEN 1 THEN by_id_rank WHEN 2 THEN by_args_rank
                      WHEN 3 THEN by_name_rank END,
                  CASE WHEN how = 0 THEN is_request END, CASE WHEN how = 0 THEN span_order END,
                  CASE WHEN how = 0 THEN request_order END)
    ),
    answers AS (
        SELECT conv, r.id AS call_id, arg_max(r.result, [span_order, i]) AS answer
        FROM (SELECT conv, span_order, unnest(results) AS r, unnest(range(len(results))) AS i
              FROM (SELECT *, from_json(tool_results, {_RESULTS_TYPE}) AS results
                    FROM placed WHERE tool_results IS NOT NULL))
        WHERE r.id IS NOT NULL
        GROUP BY ALL
    ),
    calls AS (
        SELECT j.conv AS conversation_id, coalesce(s.trace_id, m.trace_id) AS trace_id,
               s.span_id, coalesce(s.parent_span_id, m.span_id) AS parent_span_id,
               j.turn_index, j.step_index,
               CASE WHEN m.span_id IS NOT NULL THEN j.request_name ELSE coalesce(s.tool_name,
                   nullif(trim(regexp_replace(s.name, '^execute_tool ', '')), ''), 'unknown')
               END AS tool_name,
               coalesce(j.request_id, s.tool_call_id) AS tool_call_id,
               coalesce(s.tool_arguments, from_json(m.tool_calls_requested, {CALLS_TYPE})[
                   j.request_order + 1].arguments)::JSON AS arguments,
               coalesce(s.tool_result, a.answer::VARCHAR) AS result,
               s.error, s.error_message, coalesce(s.start_time, m.end_time) AS start_time,
               s.end_time, s.duration_ms AS latency_ms,
               coalesce(s.agent_name, m.agent_name) AS agent_name,
               coalesce(s.service_name, m.service_name) AS service_name,
               coalesce(s.convention, m.convention) AS producer,
               CASE WHEN m.span_id IS NULL THEN 'span' WHEN s.span_id IS NULL THEN 'messages'
                    ELSE 'span+messages' END AS source,
               m.parallel_group,
               -- for the builder: where the call stands among the conversation's steps
               coalesce(j.model_order, j.tool_order) AS step_place,
               coalesce(j.request_order + 1, 0) AS step_sub,
               coalesce(s.start_time_unix_nano, m.end_time_unix_nano) AS start_ns
        FROM joined j
        LEFT JOIN placed m ON m.conv = j.conv AND m.span_order = j.model_order
        LEFT JOIN placed s ON s.conv = j.conv AND s.span_order = j.tool_order
        LEFT JOIN answers a ON a.conv = j.conv AND a.call_id = j.request_id
    )"""


# A turn: the user message of the model call that started it and the last answer given in it
# (text, no tool calls requested); in a conversation without model calls, a trace.
TURNS = """all_turns AS (
            SELECT conv, turn_index,
                   arg_min_null(user_message, span_order) AS user_message,
                   coalesce(arg_max(response_text, span_order) FILTER (WHERE is_model
                           AND tool_calls_requested IS NULL AND response_text IS NOT NULL),
                       arg_max(response_text, span_order) FILTER (WHERE is_turn_agent
                           AND response_text IS NOT NULL)) AS final_response,
                   min(start_time) AS start_time,
                   count(*) FILTER (WHERE is_model) AS model_call_count
            FROM placed WHERE is_model OR is_turn_agent
            GROUP BY conv, turn_index
            UNION ALL
            SELECT conv, turn_index, NULL, NULL, start_time, 0 FROM trace_turns
        )"""


# Who and where, the same in `conversations` and the builder's `Trajectory`.
SUMMARY = """arg_min(agent_name, start_time_unix_nano)
                   FILTER (WHERE agent_name IS NOT NULL) AS agent_name,
               arg_min(service_name, start_time_unix_nano)
                   FILTER (WHERE service_name IS NOT NULL) AS service_name"""


# Where the conversation id came from: an attribute of some span, or only the trace id.
_CONVERSATION_SOURCE = """CASE WHEN bool_or(conversation_id <> trace_id) THEN 'attribute'
                    ELSE 'trace' END AS conversation_source"""


# Each conversation's id, source, who, where and when, as `conversations` gives them: plain
# aggregates of its spans, so what a run chooses its conversations by costs a scan, not the
# rebuilding of every conversation in the window (20 s for 7.8 million spans).
CONVERSATION_SUMMARIES = f"""(
    SELECT conversation_id, {_CONVERSATION_SOURCE}, {SUMMARY},
           min(start_time) AS start_time, max(end_time) AS end_time
    FROM spans WHERE conversation_id IS NOT NULL GROUP BY conversation_id
)"""


# Columns of `calls` that only the builder reads.
_BUILDER_ONLY = "step_place, step_sub, start_ns"


def views(*, log_records: bool = True) -> dict[str, str]:
    """The views' definitions; without `log_records`, for a lake whose log records say nothing
    about any span (`LOG_RECORD_CONTENT`), where they give the same rows sooner."""
    placed = placed_ctes(log_records=log_records)
    return {
        "tool_calls": f"WITH {placed}, {CALLS} SELECT * EXCLUDE ({_BUILDER_ONLY}) FROM calls",
        "turns": f"""
        WITH {placed}, {CALLS},
        turn_calls AS (
            SELECT conversation_id AS conv, turn_index, count(*) AS calls
            FROM calls GROUP BY ALL
        ),
        handoffs AS (
            SELECT conv, coalesce(p.turn_index, tt.turn_index) AS turn_index, count(*) AS handoffs
            FROM placed p LEFT JOIN trace_turns tt USING (conv, trace_id)
            WHERE is_handoff GROUP BY ALL
        ),
        {TURNS}
        SELECT t.conv AS conversation_id, t.turn_index, t.user_message, t.final_response,
               t.start_time, t.model_call_count::BIGINT AS model_call_count,
               coalesce(c.calls, 0)::BIGINT AS tool_call_count,
               coalesce(h.handoffs, 0)::BIGINT AS handoff_count
        FROM all_turns t
        LEFT JOIN turn_calls c ON c.conv = t.conv AND c.turn_index = t.turn_index
        LEFT JOIN handoffs h ON h.conv = t.conv AND h.turn_index = t.turn_index
    """,
        "conversations": f"""
        WITH {placed}, {CALLS},
        call_counts AS (
            SELECT conversation_id AS conv, count(*) AS calls FROM calls GROUP BY 1
        ),
        trace_turn_counts AS (SELECT conv, count(*) AS turns FROM trace_turns GROUP BY 1)
        SELECT r.conv AS conversation_id, {_CONVERSATION_SOURCE}, {SUMMARY},
               min(start_time) AS start_time,
               max(end_time) AS end_time,
               count(*) AS span_count,
               count(DISTINCT trace_id) AS trace_count,
               coalesce(max(turn_index) FILTER (WHERE is_model OR is_turn_agent) + 1,
                   any_value(tt.turns), 0)
                   AS turn_count,
               coalesce(any_value(cc.calls), 0)::BIGINT AS tool_call_count,
               count(*) FILTER (WHERE status_code = 'ERROR' OR error_type IS NOT NULL)
                   AS error_count,
               arg_min(user_message, start_time_unix_nano)
                   FILTER (WHERE user_message IS NOT NULL) AS first_user_message,
               max(ingest_time) AS last_ingest_time
        FROM placed r
        LEFT JOIN call_counts cc ON cc.conv = r.conv
        LEFT JOIN trace_turn_counts tt ON tt.conv = r.conv
        GROUP BY r.conv
    """,
        **SIMULATION_VIEWS,
    }


VIEWS = views()


VIEWS_WITHOUT_LOG_RECORDS = views(log_records=False)
