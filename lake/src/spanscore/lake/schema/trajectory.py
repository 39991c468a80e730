"""The rows the trajectory builder reads (`trajectory_rows_sql`): the conversation rules applied
to a window of conversations, in step order; and the rows maintenance stores for settled
conversations, with the fingerprints that say when they are still current."""

from __future__ import annotations

import hashlib

from spanscore.lake.schema.rules import (
    CALLS,
    CALLS_TYPE,
    LAKE,
    SPAN_ORDER,
    SUMMARY,
    TURNS,
    Source,
    placed_ctes,
)
from spanscore.lake.schema.tables import CONVERSATION_ATTRIBUTES

# The token counts a model call reports (OpenTelemetry's, else OpenInference's).
TOKEN_ATTRIBUTES = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",
    "llm.token_count.completion",
)


# The rows the Python builder (`spanscore.evaluation.trajectory.assemble`) makes trajectories
# of, in this order. Per conversation: a `conversation` row (who, when, how many spans, how
# many traces lack their root and spans their parent, and the first value of each attribute
# asked for),
# then each `turn` row followed by its steps (`model_call`, `tool_call`, `handoff`) in order.
TRAJECTORY_COLUMNS = (
    "conversation_id",
    "kind",
    "turn_index",
    "span_id",
    "trace_id",
    "name",
    "start_ns",
    "end_ns",
    "latency_ms",
    "error",
    "error_message",
    "text",  # a turn's user message, a model call's answer
    "final_response",
    "arguments",
    "result",
    "call_id",
    "parallel_group",
    "source",
    "requested",
    "input_tokens",
    "output_tokens",
    "agent_name",  # the conversation's agent; the agent that handed off
    "to_agent",
    "service_name",
    "span_count",
    "rootless_traces",
    "orphan_spans",
)


def _json_path(key: str) -> str:
    return "'$.\"" + key.replace("'", "''").replace('"', '\\"') + "\"'"


def trajectory_rows_sql(
    chosen: str,
    where: str,
    attribute_keys: tuple[str, ...],
    *,
    placed: bool = False,
    stored: str = "",
    source: Source = LAKE,
) -> str:
    """The builder's rows (`TRAJECTORY_COLUMNS`, then `attribute_1`...), from the same `placed`
    and `calls` as the views: the rules are applied here, once, and the builder only assembles.
    `chosen` is a CTE (with its trailing comma) that `where` may read to narrow the spans.
    `placed` adds the columns the rows are ordered by (`place`, `sub`); `stored` adds the
    stored rows (`stored_rows_sql`) of the conversations it chooses; `source`: where the spans
    and log records are read (the lake's tables by default)."""
    paths = [_json_path(k) for k in (*TOKEN_ATTRIBUTES, *attribute_keys)]
    extra = f", json_extract_string(s.attributes, [{', '.join(paths)}]) AS attribute_list"
    n = len(TOKEN_ATTRIBUTES)
    attributes = "".join(
        f""",
               arg_min(attribute_list[{n + i}], span_order)
                   FILTER (WHERE attribute_list[{n + i}] IS NOT NULL) AS attribute_{i}"""
        for i in range(1, len(attribute_keys) + 1)
    )

    def tokens(first: int) -> str:
        value = f"coalesce(attribute_list[{first}], attribute_list[{first + 2}])"
        return f"TRY_CAST(trunc(TRY_CAST({value} AS DOUBLE)) AS BIGINT)"

    columns = [*TRAJECTORY_COLUMNS, *(f"attribute_{i}" for i in range(1, len(attribute_keys) + 1))]
    stored_rows = (
        f"UNION ALL BY NAME {stored_rows_sql(stored, in_union=True, attribute_keys=attribute_keys)}"
        if stored
        else ""
    )
    return f"""
WITH {chosen}{placed_ctes(where, extra, source=source)}, {CALLS}, {TURNS},
orphans AS (
    SELECT c.conv, count(*) AS orphan_spans FROM placed c
    WHERE c.parent_span_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM placed p WHERE p.conv = c.conv AND p.span_id = c.parent_span_id)
    GROUP BY c.conv
),
steps AS (
    SELECT conv, 'conversation' AS kind, {SUMMARY},
           count(*) AS span_count,
           min(start_time_unix_nano) AS start_ns, max(end_time_unix_nano) AS end_ns,
           count(DISTINCT trace_id) - count(DISTINCT trace_id)
               FILTER (WHERE parent_span_id IS NULL) AS rootless_traces{attributes}
    FROM placed GROUP BY conv
    UNION ALL BY NAME
    SELECT conv, 'turn' AS kind, turn_index, user_message AS text, final_response
    FROM all_turns
    UNION ALL BY NAME
    SELECT conv, 'model_call' AS kind, turn_index, span_order AS place, 0 AS sub, span_id,
           trace_id, name, start_time_unix_nano AS start_ns, duration_ms AS latency_ms, error,
           response_text AS text,
           list_transform(from_json(tool_calls_requested, {CALLS_TYPE}), c -> c.name)
               AS requested,
           {tokens(1)} AS input_tokens, {tokens(2)} AS output_tokens
    FROM placed WHERE is_model
    UNION ALL BY NAME
    SELECT conversation_id AS conv, 'tool_call' AS kind, turn_index, step_place AS place,
           step_sub AS sub, span_id, trace_id, tool_name AS name, start_ns, latency_ms, error,
           error_message, arguments::VARCHAR AS arguments, result, tool_call_id AS call_id,
           parallel_group, source
    FROM calls
    UNION ALL BY NAME
    SELECT p.conv, 'handoff' AS kind, coalesce(p.turn_index, tt.turn_index) AS turn_index,
           span_order AS place, 0 AS sub, span_id, start_time_unix_nano AS start_ns, agent_name,
           nullif(regexp_extract(name, '^[^ ]+ (?:to )?(.+)$', 1), '') AS to_agent
    FROM placed p LEFT JOIN trace_turns tt USING (conv, trace_id) WHERE is_handoff
)
SELECT {", ".join(columns)}{", place, sub" if placed else ""} FROM (
    SELECT conv AS conversation_id, * EXCLUDE (conv) FROM steps LEFT JOIN orphans USING (conv)
    {stored_rows}
)
ORDER BY {_STEP_ORDER}"""


# The order of the builder's rows: each conversation's row, then each turn's row and its steps.
_STEP_ORDER = "conversation_id, turn_index NULLS FIRST, place NULLS FIRST, sub"


def chosen_ids(registered: str, alias: str = "", bounds: str = "") -> str:
    """`WHERE` the conversation id is one of the relation `registered`'s (a registered Arrow
    table, or a subquery of a list parameter), and between `$first{bounds}` and
    `$last{bounds}`, its least and greatest: a plain range the scan applies, and prunes files
    by, before the join. `alias` is the table's, with its dot."""
    return (
        f"WHERE {alias}conversation_id IN (SELECT conversation_id FROM {registered}) "
        f"AND {alias}conversation_id BETWEEN $first{bounds} AND $last{bounds}"
    )


def stored_rows_sql(
    where: str,
    *,
    in_union: bool = False,
    attribute_keys: tuple[str, ...] = CONVERSATION_ATTRIBUTES,
) -> str:
    """The builder's rows as maintenance stored them (`trajectory_steps`), for the
    conversations `where` chooses (a condition on `conversation_id`), in the builder's order;
    `in_union`: with the columns they are ordered by, unordered (`trajectory_rows_sql` orders
    them with its own). Attributes past `CONVERSATION_ATTRIBUTES` (`attribute_keys` begins
    with them) are read from the spans: the first value in `SPAN_ORDER`, as the rules take it."""
    stored = len(CONVERSATION_ATTRIBUTES)
    columns = [*TRAJECTORY_COLUMNS, *(f"attribute_{i}" for i in range(1, stored + 1))]
    rows = f"SELECT {', '.join(columns)}, place, sub FROM trajectory_steps {where}"
    extra = attribute_keys[stored:]
    if extra:
        paths = ", ".join(_json_path(k) for k in extra)
        added = [f"attribute_{stored + i}" for i in range(1, len(extra) + 1)]
        firsts = ", ".join(
            f"first(v[{i}] ORDER BY {SPAN_ORDER}) FILTER (WHERE v[{i}] IS NOT NULL) AS {name}"
            for i, name in enumerate(added, 1)
        )
        # Joined on the id alone, the values kept on the conversation's row: a join condition
        # on the row's kind made DuckDB plan the rows' query anew, ten times slower.
        kept = ", ".join(
            f"CASE WHEN r.kind = 'conversation' THEN x.{name} END AS {name}" for name in added
        )
        rows = f"""SELECT r.*, {kept} FROM ({rows}) r LEFT JOIN (
            SELECT conversation_id, {firsts}
            FROM (SELECT *, json_extract_string(attributes, [{paths}]) AS v FROM spans {where})
            GROUP BY conversation_id
        ) x ON x.conversation_id = r.conversation_id"""
        columns += added
    if in_union:
        return rows
    return f"SELECT {', '.join(columns)} FROM ({rows}) ORDER BY {_STEP_ORDER}"


# What a conversation's stored rows were built from: which spans it has and when each was
# stored, and which log records about spans it has. A span added, removed or moved to another
# conversation (`RESOLVE_CONVERSATIONS`), and a log record added or moved (`RESOLVE_RECORDS`),
# change it; `where` narrows the spans and records (`s`) read. The records are read on their
# own, by the conversation they are stored with, so that a lake without any costs no join.
def fingerprints_sql(where: str) -> str:
    return f"""
    SELECT conversation_id, span_count, last_ingest_time,
           hash(span_count, spans_hash, coalesce(records, 0), coalesce(records_hash, 0))
               AS fingerprint
    FROM (SELECT s.conversation_id, count(*) AS span_count,
                 max(s.ingest_time) AS last_ingest_time,
                 bit_xor(hash(s.trace_id, s.span_id, s.ingest_time)) AS spans_hash
          FROM spans s {where} GROUP BY s.conversation_id)
    LEFT JOIN (SELECT s.conversation_id, count(*) AS records,
                      bit_xor(hash(s.trace_id, s.span_id, s.time_unix_nano, s.ingest_time))
                          AS records_hash
               FROM logs s {f"{where} AND" if where else "WHERE"} s.span_id IS NOT NULL
               GROUP BY s.conversation_id) USING (conversation_id)"""


# The version of the rules stored rows were built by: rows another version stored are not
# read, and maintenance builds them again.
STORED_RULES = hashlib.sha256(
    (
        trajectory_rows_sql("", "", CONVERSATION_ATTRIBUTES, placed=True) + fingerprints_sql("")
    ).encode()
).hexdigest()[:16]


def stored_fingerprints_sql(where: str) -> str:
    """(conversation id, fingerprint) of the conversations `where` chooses whose rows these
    rules stored: a reader then compares the fingerprints their spans have now."""
    return f"""
    SELECT conversation_id, fingerprint FROM trajectory_steps {where}
    {"AND" if where else "WHERE"} kind = 'conversation' AND rules = '{STORED_RULES}'"""


def stale_stored_sql() -> str:
    """Conversations whose stored rows maintenance must build again or delete (id, spans):
    built from other spans or by other rules, and settled (no span stored since the time
    given), or stored but without spans any more; by id."""
    return f"""
SELECT coalesce(f.conversation_id, t.conversation_id) AS conversation_id,
       coalesce(f.span_count, 0) AS span_count
FROM ({fingerprints_sql("WHERE s.conversation_id IS NOT NULL")}) f
FULL JOIN (SELECT conversation_id, fingerprint, rules FROM trajectory_steps
           WHERE kind = 'conversation') t ON t.conversation_id = f.conversation_id
WHERE f.conversation_id IS NULL OR (f.last_ingest_time < ? AND (t.conversation_id IS NULL
      OR t.fingerprint <> f.fingerprint OR t.rules <> '{STORED_RULES}'))
ORDER BY 1"""


def store_rows_sql(rows: str, fingerprints: str) -> str:
    """Store some conversations' rows (`rows`) with what they were built from (`fingerprints`),
    in the builder's order, so that a conversation's rows sit together in the files
    (`spanscore.lake.stored` deletes their rows stored before in the same transaction)."""
    return f"""INSERT INTO trajectory_steps BY NAME
SELECT * FROM (
    SELECT r.*, CASE WHEN r.kind = 'conversation' THEN f.fingerprint END AS fingerprint,
           CASE WHEN r.kind = 'conversation' THEN '{STORED_RULES}' END AS rules
    FROM ({rows}) r LEFT JOIN ({fingerprints}) f ON f.conversation_id = r.conversation_id
)
ORDER BY {_STEP_ORDER}"""
