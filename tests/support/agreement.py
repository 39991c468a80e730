"""One definition of a conversation: the Python trajectory builder, the trajectories maintenance
stores and the SQL views (`tool_calls`, `turns`, `conversations`) must list the same turns,
tool calls and counts for every conversation. `agree_all` checks that and returns the built
trajectories for a test's own assertions."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.evaluation import Trajectory, load_trajectories, open_lake
from spanscore.evaluation.trajectory.assemble import parse_value
from spanscore.evaluation.trajectory.load import trajectories_from_batches
from spanscore.evaluation.trajectory.model import Handoff, ModelCall
from spanscore.evaluation.trajectory.rows import attribute_keys, rows_of, stored_current
from spanscore.evaluation.trajectory.spread import spread
from spanscore.lake.schema.rules import CONVERSATION_SUMMARIES
from spanscore.lake.stored import store_trajectories


def builder_and_views_agree(lake: Path, conversation_id: str) -> Trajectory:
    """The builder's trajectory and the views list the same turns, tool calls and counts."""
    return agree_all(lake, [conversation_id])[0]


def _spread_dumps(con: duckdb.DuckDBPyConnection, conversation_ids: list[str]) -> list[Any]:
    """The trajectories rebuilt from the conversations spread one per chunk (and a chunk of
    an unknown conversation, which reads nothing)."""
    chunks = [[c] for c in sorted(set(conversation_ids))] + [["no-such-conversation"]]
    keys = attribute_keys()
    with contextlib.ExitStack() as cleanup:
        window = spread(con, chunks, cleanup)
        assert window is not None, "the conversations could not be spread"
        batches = []
        for k, chunk in enumerate(chunks):
            source = window.source(k)
            assert source is not None, "the conversations could not be copied"
            batches += rows_of(con, chunk, set(), keys, 10_000, source)
            window.drop(k)
    return [t.model_dump() for t in trajectories_from_batches(batches)]


def agree_all(lake: Path, conversation_ids: list[str]) -> list[Trajectory]:
    """`builder_and_views_agree` for many conversations: one load, one query per view."""
    con = open_lake(lake)
    built = {
        t.conversation_id: t
        for t in load_trajectories(con, conversation_ids=conversation_ids, stored=False)
    }
    missing = set(conversation_ids) - set(built)
    assert not missing, f"the builder found no spans for conversations the views list: {missing}"
    # Read as a load of many chunks reads them (spread: the spans and log records copied out
    # of the lake, a file per chunk), the builder rebuilds the same trajectories.
    assert _spread_dumps(con, conversation_ids) == [
        built[c].model_dump() for c in sorted(set(conversation_ids))
    ]
    # What maintenance stores of them rebuilds the same trajectories, read from the store.
    store_trajectories(con, settled_after_s=0)
    assert stored_current(con, conversation_ids) == sorted(set(conversation_ids))
    from_store = load_trajectories(con, conversation_ids=conversation_ids)
    assert [t.model_dump() for t in from_store] == [
        built[c].model_dump() for c in sorted(set(conversation_ids))
    ]
    con.register("wanted", pa.table({"id": conversation_ids}))
    views: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for view, sql in {
        "calls": "SELECT conversation_id, turn_index, tool_name, arguments, result, error, "
        "tool_call_id, parallel_group FROM tool_calls ORDER BY conversation_id, step_index",
        "turns": "SELECT conversation_id, turn_index, user_message, final_response, "
        "model_call_count, tool_call_count, handoff_count FROM turns "
        "ORDER BY conversation_id, turn_index",
        "summary": "SELECT conversation_id, span_count, tool_call_count, turn_count "
        "FROM conversations",
        # what a run chooses its conversations by: the same as `conversations` says
        "chosen_by": "SELECT conversation_id, conversation_source, agent_name, service_name, "
        "start_time, end_time FROM conversations",
        "summaries": "SELECT conversation_id, conversation_source, agent_name, service_name, "
        f"start_time, end_time FROM {CONVERSATION_SUMMARIES}",
    }.items():
        rows = con.execute(
            f"SELECT * FROM ({sql}) WHERE conversation_id IN (SELECT id FROM wanted)"
        ).fetchall()
        grouped: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            grouped.setdefault(row[0], []).append(row[1:])
        views[view] = grouped
    for cid in conversation_ids:
        t = built[cid]
        calls = [
            (r[0], r[1], parse_value(r[2]), parse_value(r[3]), r[4], r[5], r[6])
            for r in views["calls"].get(cid, [])
        ]
        assert calls == [
            (turn.index, c.name, c.arguments, c.result, c.error, c.call_id, c.parallel_group)
            for turn in t.turns
            for c in turn.tool_calls
        ], cid
        assert views["turns"].get(cid, []) == [
            (
                turn.index,
                turn.user_message,
                turn.final_response,
                sum(isinstance(s, ModelCall) for s in turn.steps),
                len(turn.tool_calls),
                sum(isinstance(s, Handoff) for s in turn.steps),
            )
            for turn in t.turns
        ], cid
        assert views["summary"].get(cid) == [(t.span_count, len(t.tool_calls), len(t.turns))], cid
        assert views["summaries"].get(cid) == views["chosen_by"].get(cid), cid
    return [built[cid] for cid in conversation_ids]
