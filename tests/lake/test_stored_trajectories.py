"""Stored trajectories (`spanscore.lake.stored`): maintenance keeps each settled conversation's
rebuilt rows, and a reader uses them only while they are what the rules would give now."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from spanscore import lake
from spanscore.collector import Collector
from spanscore.evaluation import load_suite, load_trajectories, open_lake
from spanscore.evaluation.trajectory import rows as trajectory_rows
from spanscore.evaluation.trajectory.rows import stored_current
from spanscore.examples.synthetic import build_lake
from spanscore.lake import schema, stored
from spanscore.lake.stored import by_spans, store_trajectories

from ..support import otlp_factory as f
from ..support.conversation_spans import T0, chat_span, log_record, tool_span
from ..support.evaluation_runs import SUITE, SYNTHETIC_START, run, score_rows
from ..support.otlp_http import post, post_logs
from ..support.polling import wait_for


@pytest.fixture
def con(lake_dir: Path, collector: Collector) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = open_lake(lake_dir)
    yield connection
    connection.close()


def _conversation(collector: Collector, conversation: str, at: int = T0) -> None:
    call = {"id": f"{conversation}-1", "name": "lookup", "arguments": {"q": conversation}}
    post(
        collector,
        [
            chat_span(conversation, user="find it", calls=[call], at=at),
            tool_span(
                conversation,
                "lookup",
                call_id=call["id"],
                arguments={"q": 1},
                result="ok",
                at=at + 10,
            ),
            chat_span(
                conversation,
                user="find it",
                results=[(call["id"], "ok")],
                answer="done",
                at=at + 20,
            ),
        ],
    )


def _same_either_way(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list[dict[str, object]]:
    """The trajectories as the rules give them now, which the store-reading load must equal."""
    rules = [t.model_dump() for t in load_trajectories(con, conversation_ids=ids, stored=False)]
    assert [t.model_dump() for t in load_trajectories(con, conversation_ids=ids)] == rules
    return rules


def test_a_settled_conversation_is_stored_once_and_read_from_the_store(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    for name in ("s-1", "s-2", "s-3"):
        _conversation(collector, name)
    # Nothing has settled for an hour: nothing is stored yet.
    assert store_trajectories(con, settled_after_s=3600)["conversations_stored"] == 0
    assert stored_current(con, ["s-1", "s-2", "s-3"]) == []
    done = store_trajectories(con, settled_after_s=0)
    assert (done["conversations_stored"], done["conversations_left"]) == (3, 0)
    assert stored_current(con, ["s-3", "s-1", "nope"]) == ["s-1", "s-3"]
    # Stored once: a second run finds nothing to do.
    assert store_trajectories(con, settled_after_s=0)["store_steps"] == 0
    trajectories = _same_either_way(con, ["s-1", "s-2", "s-3", "nope"])
    assert [t["conversation_id"] for t in trajectories] == ["s-1", "s-2", "s-3"]
    assert [len(t["turns"][0]["steps"]) for t in trajectories] == [3, 3, 3]


def test_a_span_added_after_storing_makes_the_rules_apply_until_stored_again(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    _conversation(collector, "late")
    _conversation(collector, "quiet")
    store_trajectories(con, settled_after_s=0)
    post(collector, [tool_span("late", "audit", arguments={"x": 1}, result="logged", at=T0 + 30)])
    assert stored_current(con, ["late", "quiet"]) == ["quiet"]
    (late, _) = _same_either_way(con, ["late", "quiet"])
    assert [c["name"] for c in late["turns"][0]["steps"] if c["kind"] == "tool_call"] == [
        "lookup",
        "audit",
    ]
    # Not settled yet (the span just arrived): left as it is; settled: stored again.
    assert store_trajectories(con, settled_after_s=3600)["conversations_stored"] == 0
    assert store_trajectories(con, settled_after_s=0)["conversations_stored"] == 1
    assert stored_current(con, ["late", "quiet"]) == ["late", "quiet"]
    assert _same_either_way(con, ["late"]) == [late]


def test_a_log_record_added_after_storing_makes_the_rules_apply(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    chat = f.span(
        "chat gpt", attributes={"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "ev"}
    )
    post(collector, [chat])
    store_trajectories(con, settled_after_s=0)
    assert stored_current(con, ["ev"]) == ["ev"]
    post_logs(collector, [log_record(chat, "gen_ai.user.message", {"content": "Where is it?"})])
    assert stored_current(con, ["ev"]) == []
    (ev,) = _same_either_way(con, ["ev"])
    assert ev["turns"][0]["user_message"] == "Where is it?"


def test_a_span_that_moves_to_its_traces_conversation_unstores_the_old_one(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    trace = bytes.fromhex("ab" * 16)
    # A child exported before its root: alone, its trace id stands in for the conversation.
    post(
        collector,
        [tool_span(None, "lookup", arguments={"q": 1}, result="ok", at=T0, trace_id=trace)],
    )
    assert store_trajectories(con, settled_after_s=0)["conversations_stored"] == 1
    root = f.span("agent", trace_id=trace, attributes={"session.id": "moved"})
    root.start_time_unix_nano, root.end_time_unix_nano = T0 - 10, T0 + 100
    post(collector, [root])
    assert stored_current(con, ["ab" * 16, "moved"]) == []
    done = store_trajectories(con, settled_after_s=0)
    assert (done["conversations_unstored"], done["conversations_stored"]) == (1, 1)
    assert stored_current(con, ["ab" * 16, "moved"]) == ["moved"]
    assert [t["span_count"] for t in _same_either_way(con, ["ab" * 16, "moved"])] == [2]


def test_rows_another_version_of_the_rules_stored_are_not_read(
    collector: Collector, con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _conversation(collector, "v")
    store_trajectories(con, settled_after_s=0)
    before = _same_either_way(con, ["v"])
    monkeypatch.setattr(schema.trajectory, "STORED_RULES", "another-version")
    assert stored_current(con, ["v"]) == []
    assert store_trajectories(con, settled_after_s=0)["conversations_stored"] == 1
    assert stored_current(con, ["v"]) == ["v"]
    assert _same_either_way(con, ["v"]) == before
    rules = con.execute(
        "SELECT DISTINCT rules FROM trajectory_steps WHERE kind = 'conversation'"
    ).fetchall()
    assert rules == [("another-version",)]


def test_attributes_past_the_stored_ones_are_read_from_the_spans_as_the_rules_read_them(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    # The first value in the spans' order wins: at the same start time a tool span comes after
    # the model call, whatever order they arrive in; a span without the attribute is skipped.
    chat = chat_span("attrs", user="hi", calls=[{"id": "a-1", "name": "t", "arguments": {}}], at=T0)
    tool = tool_span("attrs", "t", call_id="a-1", arguments={}, result="ok", at=T0)
    tool.attributes.append(f.attr("customer.tier", "silver"))
    chat.attributes.append(f.attr("customer.tier", "gold"))
    late = chat_span("attrs", user="hi", results=[("a-1", "ok")], answer="done", at=T0 + 20)
    late.attributes.append(f.attr("region", "eu"))
    post(collector, [tool, late, chat])
    _conversation(collector, "plain")
    store_trajectories(con, settled_after_s=0)
    assert stored_current(con, ["attrs", "plain"]) == ["attrs", "plain"]
    keys = ["customer.tier", "region", "absent"]
    rules = [
        t.model_dump()
        for t in load_trajectories(con, conversation_ids=["attrs", "plain"], attributes=keys)
    ]
    assert rules[0]["attributes"] == {"customer.tier": "gold", "region": "eu"}
    assert rules[1]["attributes"] == {}
    # From the store alone, and from the store and the rules in one query.
    for stored_too in ([], ["plain"]):
        post(collector, [tool_span(c, "audit", result="x", at=T0 + 99) for c in stored_too])
        loaded = load_trajectories(
            con, conversation_ids=["attrs", "plain"], attributes=keys, stored=True
        )
        expected = load_trajectories(
            con, conversation_ids=["attrs", "plain"], attributes=keys, stored=False
        )
        assert [t.model_dump() for t in loaded] == [t.model_dump() for t in expected]
    assert stored_current(con, ["attrs", "plain"]) == ["attrs"]


def test_a_run_cut_short_leaves_the_rest_for_the_next(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    for i in range(4):
        _conversation(collector, f"cut-{i}", at=T0 + i * 1000)
    done = store_trajectories(con, settled_after_s=0, step_spans=3, deadline_s=0)
    assert (done["store_steps"], done["conversations_left"]) == (1, 3)
    assert stored_current(con, [f"cut-{i}" for i in range(4)]) == ["cut-0"]
    done = store_trajectories(con, settled_after_s=0, step_spans=3)
    assert (done["store_steps"], done["conversations_stored"]) == (3, 3)


def test_maintenance_stores_them_and_compacts_what_it_wrote(
    collector: Collector, con: duckdb.DuckDBPyConnection
) -> None:
    for i in range(3):
        _conversation(collector, f"m-{i}", at=T0 + i * 1000)
    done = lake.maintain(
        con.cursor(), expire_older_than_s=0, delete_older_than_s=0, store_settled_after_s=0
    )
    assert done["conversations_stored"] == 3
    assert stored_current(con, ["m-0", "m-1", "m-2"]) == ["m-0", "m-1", "m-2"]
    # Without the setting, maintenance stores nothing.
    _conversation(collector, "m-3", at=T0 + 5000)
    assert "conversations_stored" not in lake.maintain(con.cursor())


def test_parts_by_spans_start_small_and_double() -> None:
    counts = [(str(i), 10) for i in range(20)]
    parts = by_spans(counts, 80, first_spans=20)
    assert [len(p) for p in parts] == [2, 4, 8, 6]
    assert [c for p in parts for c, _ in p] == [c for c, _ in counts]
    assert [len(p) for p in by_spans(counts, 80)] == [8, 8, 4]
    assert by_spans([], 80) == []
    assert json.dumps(by_spans([("a", 500)], 80, first_spans=20)) == '[[["a", 500]]]'


def test_an_evaluation_of_stored_rows_gives_the_scores_the_rules_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake_dir = tmp_path / "lake"
    build_lake(lake_dir, 300)
    suite = load_suite(SUITE)
    first = run(lake_dir, suite, batch_size=64)
    assert first.scored == 300
    connection = lake.connect(lake_dir)
    try:
        assert store_trajectories(connection, settled_after_s=0)["conversations_stored"] == 300
        ids = [
            r[0] for r in connection.sql("SELECT DISTINCT conversation_id FROM spans").fetchall()
        ]
        assert len(stored_current(connection, ids)) == 300
    finally:
        connection.close()
    read_stored: list[int] = []

    current = trajectory_rows._current

    def spied(con: duckdb.DuckDBPyConnection, stored: dict[str, int]) -> list[str]:
        found = current(con, stored)
        read_stored.append(len(found))
        return found

    monkeypatch.setattr(trajectory_rows, "_current", spied)
    again = run(
        lake_dir,
        suite,
        rescore=True,
        workers=2,
        batch_size=50,
        since=SYNTHETIC_START - dt.timedelta(days=1),
    )
    assert again.scored == 300
    assert sum(read_stored) == 300  # every conversation was read from the store
    assert score_rows(lake_dir, first.run_id) == score_rows(lake_dir, again.run_id)


def test_maintenance_goes_on_when_storing_fails(
    collector: Collector, con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _conversation(collector, "f-0")

    def failing(*args: object, **kwargs: object) -> dict[str, int]:
        raise duckdb.IOException("No space left on device")

    monkeypatch.setattr(stored, "store_trajectories", failing)
    done = lake.maintain(con.cursor(), store_settled_after_s=0)
    assert done["store_failed"] == 1
    assert "merge_steps" in done  # compaction ran after it
    assert stored_current(con, ["f-0"]) == []


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collectors_maintenance_stores_settled_conversations(
    make_collector: Callable[..., Collector],
    lake_dir: Path,
    enabled: bool,
) -> None:
    collector = make_collector(
        maintenance_interval_s=0.5, store_trajectories=enabled, store_settled_after_s=0
    )
    for i in range(3):
        _conversation(collector, f"c-{i}", at=T0 + i * 1000)
    ids = ["c-0", "c-1", "c-2"]
    runs = collector.stats.get
    connection = open_lake(lake_dir)
    try:
        if enabled:
            wait_for(lambda: stored_current(connection, ids) == ids, timeout=120, interval=0.2)
        else:
            start = runs("maintenance_runs")
            wait_for(lambda: runs("maintenance_runs") >= start + 3, timeout=120, interval=0.2)
            assert stored_current(connection, ids) == []
        assert runs("maintenance_failed") == 0
        _same_either_way(connection, ids)
    finally:
        connection.close()


@pytest.mark.slow
def test_readers_see_every_conversation_while_maintenance_runs(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    """A conversation the collector committed is in every read that follows, however often
    maintenance runs meanwhile: a nightly run must not leave conversations out. With DuckLake's
    data inlining (schema version 9 and before), about one read in 70 missed the newest
    conversation while maintenance flushed inlined rows to files."""
    collector = make_collector(maintenance_interval_s=0.3)
    connection = open_lake(lake_dir)
    runs = collector.stats.get
    misses: list[tuple[str, int]] = []
    try:
        names: list[str] = []
        for i in range(20):
            name = f"r-{i}"
            _conversation(collector, name, at=T0 + i * 1000)
            names.append(name)
            recent = names[-3:]
            for attempt in range(5):
                got = [
                    t.conversation_id
                    for t in load_trajectories(connection, conversation_ids=recent, stored=False)
                ]
                if sorted(got) != sorted(recent):
                    misses.append((name, attempt))
        assert runs("maintenance_runs") > 0, "maintenance never ran: the test measured nothing"
        # Compaction rewrites an embedded lake's spans in order of conversation (new row ids).
        assert runs("span_files_sorted") > 0, "no run sorted spans: the test measured nothing"
        assert runs("maintenance_failed") == 0
        assert misses == []
    finally:
        connection.close()
