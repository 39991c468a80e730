"""A synthetic lake: N conversations of 10 GenAI spans each, written with one SQL statement
per commit (no collector), for benchmarks and for tests that need many conversations fast.

Each conversation: an ``invoke_agent`` root, four model calls (the first two ask for two
parallel tool calls each, the third for one, the fourth answers) and five ``execute_tool``
spans joined to their requests by call id, with realistic JSON arguments and results and token
counts; conversations interleave in time over one day starting at ``start_ns``.
"""

from __future__ import annotations

import time
from pathlib import Path

from spanscore.lake import connect

SPANS_PER_CONVERSATION = 10

# s = span position within the conversation: 0 root, 1/4/6/8 model calls, others tools.
_BUILD = """
INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind, start_time, end_time,
    start_time_unix_nano, end_time_unix_nano, duration_ms, status_code, service_name,
    attributes, conversation_id, agent_name, operation, tool_name, tool_call_id,
    tool_arguments, tool_result, user_message, tool_calls_requested, tool_results,
    response_text, error_type, convention, ingest_time)
WITH base AS (
    SELECT c, s,
        md5('t' || c) AS trace_id,
        substr(md5('s' || c || '-' || s), 1, 16) AS span_id,
        substr(md5('s' || c || '-0'), 1, 16) AS root_id,
        -- conversations interleave: start times spread over a day, 50 ms per step
        {start_ns} + (hash(c) % 86400000000000)::BIGINT + s * 50000000 AS t0,
        'conv-' || substr(md5('c' || c), 1, 12) AS conversation_id,
        CASE WHEN s IN (1, 4, 6, 8) THEN 'chat'
             WHEN s = 0 THEN 'invoke_agent' ELSE 'execute_tool' END AS operation,
        CASE s WHEN 2 THEN 0 WHEN 3 THEN 1 WHEN 5 THEN 2 WHEN 7 THEN 3 WHEN 9 THEN 4 END AS k,
        ['get_order', 'lookup_customer', 'search_products', 'verify_customer',
         'cancel_order'][(c + s) % 5 + 1] AS tool
    FROM range({start}, {stop}) r(c), range(10) q(s)
)
SELECT trace_id, span_id, CASE WHEN s = 0 THEN NULL ELSE root_id END,
    CASE operation WHEN 'chat' THEN 'chat gpt-4.1-mini' WHEN 'invoke_agent'
         THEN 'invoke_agent support' ELSE 'execute_tool ' || tool END,
    'INTERNAL',
    make_timestamp((t0 // 1000)::BIGINT), make_timestamp(((t0 + 20000000) // 1000)::BIGINT),
    t0, t0 + 20000000, 20.0, 'UNSET', 'support-agent',
    '{{"gen_ai.operation.name": "' || operation || '", "gen_ai.request.model": "gpt-4.1-mini"'
        || CASE WHEN operation = 'chat' THEN ', "gen_ai.usage.input_tokens": ' || (200 + s * 40)
                || ', "gen_ai.usage.output_tokens": ' || (20 + s) ELSE '' END || '}}',
    conversation_id, 'support', operation,
    CASE WHEN k IS NOT NULL THEN tool END,
    CASE WHEN k IS NOT NULL THEN 'call_' || c || '_' || k END,
    CASE WHEN k IS NOT NULL THEN '{{"order_id": "ORD-' || c || '", "email": "user' || c
        || '@example.com", "reason": "customer asked about the delivery window", "n": '
        || k || '}}' END,
    CASE WHEN k IS NOT NULL THEN '{{"status": "shipped", "order_id": "ORD-' || c
        || '", "items": [{{"sku": "SKU-1", "qty": 1}}, {{"sku": "SKU-2", "qty": 2}}], '
        || '"eta": "2026-11-24", "carrier": "DHL", "note": "' || repeat('x', 300) || '"}}' END,
    CASE WHEN s = 1 THEN 'Where is my order ORD-' || c || '?' WHEN operation = 'chat'
         THEN 'Where is my order ORD-' || c || '?' END,
    CASE s WHEN 1 THEN '[{{"id": "call_' || c || '_0", "name": "get_order", '
                    || '"arguments": {{}}}}, {{"id": "call_' || c || '_1", '
                    || '"name": "lookup_customer", "arguments": {{}}}}]'
           WHEN 4 THEN '[{{"id": "call_' || c || '_2", "name": "search_products", '
                    || '"arguments": {{}}}}, {{"id": "call_' || c || '_3", '
                    || '"name": "verify_customer", "arguments": {{}}}}]'
           WHEN 6 THEN '[{{"id": "call_' || c || '_4", "name": "cancel_order", '
                    || '"arguments": {{}}}}]'
    END,
    CASE WHEN s IN (4, 6, 8) THEN '[{{"id": "call_' || c || '_0", "result": "ok"}}]' END,
    CASE WHEN s = 8 THEN 'Your order ORD-' || c || ' has shipped.' END,
    NULL, 'genai', now()
FROM base
"""


def build_lake(
    directory: Path | str,
    conversations: int,
    per_commit: int = 25_000,
    *,
    first: int = 0,
    start_ns: int = 1_700_000_000_000_000_000,
) -> float:
    """Add conversations `first`..`first + conversations` to the lake (created if missing);
    returns the seconds it took."""
    con = connect(directory, create=True)
    started = time.perf_counter()
    for start in range(first, first + conversations, per_commit):
        stop = min(first + conversations, start + per_commit)
        con.execute(_BUILD.format(start=start, stop=stop, start_ns=start_ns))
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed
