"""One conversation from a view reads only that conversation's spans (issue 12): in each view,
the filter on `conversation_id` reaches both scans of `spans` (one feeds the windows that place
each span, narrow rows; the other the columns joined to them). Checked on the plan DuckDB ran
(rows out of each scan), not on timings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanscore.lake import connect, include_log_records_in_views

CONVERSATIONS = 300
SPANS_PER_CONVERSATION = 4  # chat (requests get_order), execute_tool, chat (answers), agent

# Every conversation: a model call that requests a tool, the tool span, the model call that
# answers, and an agent span around them; the conversations' spans interleave in the table.
_FILL = f"""
INSERT INTO spans (trace_id, span_id, name, kind, start_time, end_time, start_time_unix_nano,
    end_time_unix_nano, duration_ms, status_code, conversation_id, operation, tool_name,
    tool_call_id, tool_arguments, tool_result, user_message, tool_calls_requested,
    response_text, convention, ingest_time)
SELECT printf('%032x', c), printf('%016x', i), op || ' x', 'INTERNAL',
    make_timestamp(t // 1000), make_timestamp(t // 1000 + 1000), t, t + 1000000, 1.0, 'UNSET',
    'conv-' || c, op,
    CASE WHEN op = 'execute_tool' THEN 'get_order' END,
    CASE WHEN op = 'execute_tool' THEN 'call-' || c END,
    CASE WHEN op = 'execute_tool' THEN '{{"id": ' || c || '}}' END,
    CASE WHEN op = 'execute_tool' THEN '"shipped"' END,
    CASE WHEN op = 'chat' THEN 'where is order ' || c END,
    CASE WHEN op = 'chat' AND step = 0 THEN '[{{"id": "call-' || c
        || '", "name": "get_order", "arguments": {{"id": ' || c || '}}}}]' END,
    CASE WHEN op = 'chat' AND step = 2 THEN 'it shipped' END,
    'genai', now()
FROM (SELECT i, i % {CONVERSATIONS} AS c, i // {CONVERSATIONS} AS step,
             1700000000000000000 + i * 1000000000 AS t,
             ['chat', 'execute_tool', 'chat', 'invoke_agent'][i // {CONVERSATIONS} + 1] AS op
      FROM range({CONVERSATIONS * SPANS_PER_CONVERSATION}) r(i))
"""


def _operators(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children", []):
        yield from _operators(child)


def _scans(profile: Path, table: str = "spans") -> list[int]:
    """Rows that each scan of `table` produced, from DuckDB's JSON profile."""
    plan = json.loads(profile.read_text())
    return [
        int(op["operator_cardinality"])
        for op in _operators(plan)
        if op.get("extra_info", {}).get("Table") == table
    ]


# The same lake with the model calls' messages also sent as log records, one per model call
# (two per conversation), as producers that send messages as events do; only the records
# carry the answer.
_RECORDS = """
INSERT INTO logs (time_unix_nano, trace_id, span_id, event_name, conversation_id,
    user_message, response_text, ingest_time)
SELECT end_time_unix_nano, trace_id, span_id, 'gen_ai.client.inference.operation.details',
    conversation_id, user_message, response_text, now()
FROM spans WHERE operation = 'chat'
"""
RECORDS_PER_CONVERSATION = 2


def _filled(path: Path, *, records: bool) -> Path:
    con = connect(path, create=True)
    try:
        con.execute("BEGIN")
        con.execute(_FILL)
        if records:
            con.execute(_RECORDS)
            con.execute("UPDATE spans SET response_text = NULL")  # the records say it
            include_log_records_in_views(con)  # as the collector's writer does
        con.execute("COMMIT")
    finally:
        con.close()
    return path


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _filled(tmp_path_factory.mktemp("views-plan") / "lake", records=False)


@pytest.fixture(scope="module")
def lake_with_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _filled(tmp_path_factory.mktemp("views-plan-records") / "lake", records=True)


@pytest.mark.parametrize("records", [False, True], ids=["spans", "spans and log records"])
@pytest.mark.parametrize("view", ["tool_calls", "turns", "conversations"])
def test_one_conversation_reads_only_its_spans(
    lake: Path, lake_with_records: Path, tmp_path: Path, view: str, records: bool
) -> None:
    profile = tmp_path / "profile.json"
    con = connect(lake_with_records if records else lake)
    try:
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{profile}'")
        rows = con.execute(f"SELECT * FROM {view} WHERE conversation_id = ?", ["conv-7"]).fetchall()
        con.execute("PRAGMA disable_profiling")
    finally:
        con.close()
    assert len(rows) == 1, rows  # one call, one turn, one conversation
    scans = _scans(profile)
    assert scans, f"no scan of spans in the profile of {view}: the check measured nothing"
    # Two scans, and the filter reached each: they produced the conversation's spans only, not
    # the table's {CONVERSATIONS * SPANS_PER_CONVERSATION} rows. With log records, a third: the
    # spans' parents, read to leave out the records of a span inside a model call.
    assert scans == [SPANS_PER_CONVERSATION] * (3 if records else 2), (view, scans)
    # And the log records: each read of the spans joins them, and reads the conversation's
    # records only (the records are stored with their span's conversation).
    assert _scans(profile, "logs") == ([RECORDS_PER_CONVERSATION] * 2 if records else [])


@pytest.mark.parametrize("records", [False, True], ids=["spans", "spans and log records"])
def test_the_fill_is_what_the_views_rebuild(
    lake: Path, lake_with_records: Path, records: bool
) -> None:
    """The tables above are real conversations for the views (else the plan test proves
    little)."""
    con = connect(lake_with_records if records else lake)
    try:
        call = con.execute(
            "SELECT tool_name, tool_call_id, arguments, result, source, turn_index "
            "FROM tool_calls WHERE conversation_id = 'conv-7'"
        ).fetchall()
        summary = con.execute(
            "SELECT span_count, turn_count, tool_call_count FROM conversations "
            "WHERE conversation_id = 'conv-7'"
        ).fetchall()
        total = con.execute("SELECT count(*) FROM conversations").fetchone()
        answer = con.execute(
            "SELECT final_response FROM turns WHERE conversation_id = 'conv-7'"
        ).fetchall()
    finally:
        con.close()
    assert answer == [("it shipped",)]
    assert call == [("get_order", "call-7", '{"id": 7}', '"shipped"', "span+messages", 0)]
    assert summary == [(SPANS_PER_CONVERSATION, 1, 1)]
    assert total == (CONVERSATIONS,)
