"""Trajectories rebuilt from the lake: the example agent's plans, out-of-order arrival,
producers without tool spans or call ids, and malformed data."""

from __future__ import annotations

import json
import logging
import random
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.evaluation import Trajectory, load_trajectories, load_trajectory, open_lake
from spanscore.evaluation.trajectory import rows as trajectory_rows
from spanscore.evaluation.trajectory import spread as spreading
from spanscore.examples.customer_service import Store
from spanscore.examples.customer_service.scripted import ScriptedAgent, conversations
from spanscore.examples.synthetic import build_lake

from ..support import otlp_factory as f
from ..support.conversation_spans import log_record
from ..support.otlp_http import post, post_logs


def _view_agrees(lake: Path, trajectory: Any) -> None:
    """The SQL view `tool_calls` lists the same calls, turns and order as the builder."""
    con = open_lake(lake)
    rows = con.execute(
        "SELECT turn_index, tool_name, arguments, error FROM tool_calls "
        "WHERE conversation_id = ? ORDER BY step_index",
        [trajectory.conversation_id],
    ).fetchall()
    assert [(r[0], r[1], json.loads(r[2]), r[3]) for r in rows] == [
        (turn.index, c.name, c.arguments, c.error)
        for turn in trajectory.turns
        for c in turn.tool_calls
    ]
    count = con.execute(
        "SELECT tool_call_count FROM conversations WHERE conversation_id = ?",
        [trajectory.conversation_id],
    ).fetchone()
    assert count == (len(trajectory.tool_calls),)


def test_every_example_plan_rebuilds_exactly(collector: Collector, lake_dir: Path) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "cs"}))
    provider.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
        )
    )
    store = Store()
    agent = ScriptedAgent(store, provider.get_tracer("t"))
    plans = conversations()
    for plan in plans:
        agent.run(plan)
    provider.shutdown()
    con = open_lake(lake_dir)
    rebuilt = {t.conversation_id: t for t in load_trajectories(con)}
    assert set(rebuilt) == {p.conversation_id for p in plans}
    for plan in plans:
        t = rebuilt[plan.conversation_id]
        # Built without validation on the hot path: it must still be a valid model.
        assert Trajectory.model_validate(t.model_dump()) == t
        assert t.warnings == []
        _view_agrees(lake_dir, t)
        assert [turn.user_message for turn in t.turns] == [turn.user for turn in plan.turns]
        assert [turn.final_response for turn in t.turns] == [turn.reply for turn in plan.turns]
        for turn, planned in zip(t.turns, plan.turns, strict=True):
            got = [
                [(c.name, c.arguments) for c in turn.tool_calls if c.parallel_group == g]
                for g in sorted({c.parallel_group for c in turn.tool_calls})
            ]
            want = [[(name, agent._fill(args)) for name, args in step] for step in planned.steps]
            assert got == want
            assert all(c.source == "span+messages" for c in turn.tool_calls)


def _conversation_spans(
    conversation: str, root_carries_id_only: bool = False
) -> list[trace_pb2.Span]:
    """Two turns (two traces): chat -> two parallel tools -> chat answer; then chat -> a failing
    tool -> chat answer. Tool spans have no call id (joined by name and order)."""
    spans: list[trace_pb2.Span] = []
    clock = [1_700_000_000_000_000_000]

    def make(
        name: str, trace: bytes, parent: bytes | None, attrs: dict[str, Any], error: bool = False
    ) -> trace_pb2.Span:
        clock[0] += 1_000_000
        span = f.span(name, trace_id=trace, attributes=attrs)
        span.start_time_unix_nano = clock[0]
        span.end_time_unix_nano = clock[0] + 500_000
        if parent:
            span.parent_span_id = parent
        if error:
            span.status.code = 2
        spans.append(span)
        return span

    conv = {} if root_carries_id_only else {"gen_ai.conversation.id": conversation}
    for turn, (user, calls, answer) in enumerate(
        [
            (
                "Find a mouse and a keyboard",
                [("search", {"q": "mouse"}), ("search", {"q": "keyboard"})],
                "Found both.",
            ),
            ("Cancel ORD-9", [("cancel", {"order": "ORD-9"})], "Sorry, it failed."),
        ]
    ):
        trace = random.randbytes(16)
        root = make(
            "invoke_agent shop",
            trace,
            None,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": conversation},
        )
        requested = [
            {"id": f"c{turn}{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls)
        ]
        make(
            "chat m",
            trace,
            root.span_id,
            {
                **conv,
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": user}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "tool_call", **c} for c in requested],
                        }
                    ]
                ),
            },
        )
        for name, args in calls:
            failing = name == "cancel"
            attrs = {
                **conv,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.arguments": json.dumps(args),
            }
            if not failing:
                attrs["gen_ai.tool.call.result"] = json.dumps({"ok": name})
            else:
                attrs["error.type"] = "ToolError"
            make(f"execute_tool {name}", trace, root.span_id, attrs, error=failing)
        make(
            "chat m",
            trace,
            root.span_id,
            {
                **conv,
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": user}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                ),
            },
        )
    return spans


def _shape(t: Any) -> list[Any]:
    return [
        (
            turn.user_message,
            turn.final_response,
            [(c.name, c.arguments, c.result, c.error, c.parallel_group) for c in turn.tool_calls],
        )
        for turn in t.turns
    ]


EXPECTED = [
    (
        "Find a mouse and a keyboard",
        "Found both.",
        [
            ("search", {"q": "mouse"}, {"ok": "search"}, None, 1),
            ("search", {"q": "keyboard"}, {"ok": "search"}, None, 1),
        ],
    ),
    ("Cancel ORD-9", "Sorry, it failed.", [("cancel", {"order": "ORD-9"}, None, "ToolError", 2)]),
]


@pytest.mark.parametrize(
    "arrival",
    ["in-order", "shuffled-one-batch", "shuffled-many-batches", "children-before-root"],
)
def test_arrival_order_does_not_change_the_trajectory(
    make_collector: Callable[..., Collector], tmp_path: Path, arrival: str
) -> None:
    collector = make_collector(lake=str(tmp_path / arrival))
    # children-before-root: only the root spans carry the conversation id, and arrive last.
    spans = _conversation_spans("conv-x", root_carries_id_only=arrival == "children-before-root")
    rng = random.Random(7)
    if arrival == "in-order":
        post(collector, spans)
    elif arrival == "shuffled-one-batch":
        post(collector, rng.sample(spans, len(spans)))
    elif arrival == "shuffled-many-batches":
        shuffled = rng.sample(spans, len(spans))
        for i in range(0, len(shuffled), 3):
            post(collector, shuffled[i : i + 3])
    else:
        roots = [s for s in spans if not s.parent_span_id]
        post(collector, [s for s in spans if s.parent_span_id])
        post(collector, roots)
    t = load_trajectory(open_lake(tmp_path / arrival), "conv-x")
    assert t is not None
    assert _shape(t) == EXPECTED
    assert t.warnings == []
    _view_agrees(tmp_path / arrival, t)


def test_client_level_producer_without_tool_spans(collector: Collector, lake_dir: Path) -> None:
    # openai-v2 style: only chat spans, each its own trace; the tool calls live in the messages.
    user = {"role": "user", "parts": [{"type": "text", "content": "Where is ORD-1?"}]}
    ask = {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_a",
                "name": "get_order",
                "arguments": {"order_id": "ORD-1"},
            },
            {
                "type": "tool_call",
                "id": "call_b",
                "name": "track",
                "arguments": {"order_id": "ORD-1"},
            },
        ],
    }
    results = {
        "role": "tool",
        "parts": [
            {"type": "tool_call_response", "id": "call_a", "response": {"status": "shipped"}},
            {"type": "tool_call_response", "id": "call_b", "result": "in transit"},
        ],
    }
    first = f.span(
        "chat gpt",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "cl-1",
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps([ask]),
        },
    )
    second = f.span(
        "chat gpt",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "cl-1",
            "gen_ai.input.messages": json.dumps([user, ask, results]),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Shipped."}]}]
            ),
        },
    )
    second.start_time_unix_nano = first.end_time_unix_nano + 10
    second.end_time_unix_nano = second.start_time_unix_nano + 10
    post(collector, [second, first])
    t = load_trajectory(open_lake(lake_dir), "cl-1")
    assert t is not None
    assert len(t.turns) == 1
    calls = t.turns[0].tool_calls
    assert [(c.name, c.call_id, c.result, c.source, c.parallel_group) for c in calls] == [
        ("get_order", "call_a", {"status": "shipped"}, "messages", 1),
        ("track", "call_b", "in transit", "messages", 1),
    ]
    assert t.turns[0].final_response == "Shipped."
    _view_agrees(lake_dir, t)


def test_malformed_data_warns_and_rebuilds_the_rest(collector: Collector, lake_dir: Path) -> None:
    orphan = f.span(
        "execute_tool lookup",
        attributes={
            "gen_ai.tool.name": "lookup",
            "gen_ai.conversation.id": "bad-1",
            "gen_ai.tool.call.arguments": "{'email': 'a@b.c', 'n': 1}",
        },
    )
    orphan.parent_span_id = b"\x01" * 8  # its parent never arrives
    broken = f.span(
        "chat m",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "bad-1",
            "gen_ai.input.messages": "[{not json",
            "gen_ai.output.messages": "also not json",
        },
    )
    good = f.span(
        "execute_tool ok", attributes={"gen_ai.tool.name": "ok", "gen_ai.conversation.id": "good-1"}
    )
    post(collector, [orphan, broken, good])
    rebuilt = {t.conversation_id: t for t in load_trajectories(open_lake(lake_dir))}
    bad = rebuilt["bad-1"]
    assert any("no root span" in w for w in bad.warnings)
    assert [(c.name, c.arguments) for c in bad.tool_calls] == [
        ("lookup", {"email": "a@b.c", "n": 1})
    ]
    assert rebuilt["good-1"].warnings == []
    assert [c.name for c in rebuilt["good-1"].tool_calls] == ["ok"]


def test_show_prints_the_tree(collector: Collector, lake_dir: Path) -> None:
    from click.testing import CliRunner

    post(collector, _conversation_spans("conv-show"))
    result = CliRunner().invoke(main, ["show", "conv-show", "--lake", str(lake_dir)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "turn 1  user: Find a mouse and a keyboard" in out  # from 1, as in the report
    assert "[parallel group 1]" in out
    assert "ERROR  ToolError" in out
    assert "answer: Sorry, it failed." in out
    as_json = CliRunner().invoke(main, ["show", "conv-show", "--lake", str(lake_dir), "--json"])
    assert json.loads(as_json.output)["conversation_id"] == "conv-show"
    missing = CliRunner().invoke(main, ["show", "nope", "--lake", str(lake_dir)])
    assert missing.exit_code == 2
    assert "no conversation 'nope'" in missing.output


@pytest.mark.parametrize("form", ["deprecated-events", "operation-details"])
def test_messages_sent_as_log_records_rebuild_like_attributes(
    collector: Collector, lake_dir: Path, form: str
) -> None:
    # Producers in event mode put the messages in log records linked to the model call's span.
    chat = f.span(
        "chat gpt",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.conversation.id": f"ev-{form}"},
    )
    answer = f.span(
        "chat gpt",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.conversation.id": f"ev-{form}"},
    )
    answer.start_time_unix_nano = chat.end_time_unix_nano + 10
    answer.end_time_unix_nano = answer.start_time_unix_nano + 10
    post(collector, [chat, answer])
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_order", "arguments": '{"order_id": "ORD-1"}'},
    }
    if form == "deprecated-events":
        records = [
            log_record(chat, "gen_ai.user.message", {"content": "Where is ORD-1?"}),
            log_record(chat, "gen_ai.choice", {"message": {"tool_calls": [call]}}),
            log_record(answer, "gen_ai.user.message", {"content": "Where is ORD-1?"}),
            log_record(
                answer, "gen_ai.tool.message", {"id": "call_1", "content": '{"status": "shipped"}'}
            ),
            log_record(answer, "gen_ai.choice", {"message": {"content": "It has shipped."}}),
        ]
    else:
        user = {"role": "user", "parts": [{"type": "text", "content": "Where is ORD-1?"}]}
        ask = {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_1",
                    "name": "get_order",
                    "arguments": {"order_id": "ORD-1"},
                }
            ],
        }
        tool = {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": "call_1", "response": '{"status": "shipped"}'}
            ],
        }
        text = {"role": "assistant", "parts": [{"type": "text", "content": "It has shipped."}]}
        details = "gen_ai.client.inference.operation.details"
        records = [
            log_record(
                chat,
                details,
                None,
                **{
                    "gen_ai.input.messages": json.dumps([user]),
                    "gen_ai.output.messages": json.dumps([ask]),
                },
            ),
            log_record(
                answer,
                details,
                None,
                **{
                    "gen_ai.input.messages": json.dumps([user, ask, tool]),
                    "gen_ai.output.messages": json.dumps([text]),
                },
            ),
        ]
    post_logs(collector, records)
    t = load_trajectory(open_lake(lake_dir), f"ev-{form}")
    assert t is not None
    assert [(turn.user_message, turn.final_response) for turn in t.turns] == [
        ("Where is ORD-1?", "It has shipped.")
    ]
    assert [(c.name, c.arguments, c.result, c.source) for c in t.tool_calls] == [
        ("get_order", {"order_id": "ORD-1"}, {"status": "shipped"}, "messages")
    ]
    _view_agrees(lake_dir, t)


@pytest.mark.parametrize("listed", [1_000, 0], ids=["ids-as-a-list", "ids-as-an-arrow-table"])
def test_chunked_loading_rebuilds_what_one_query_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: int
) -> None:
    """`load_trajectories` reads many conversations in chunks, each queried by a background
    thread while the one before is assembled: the same trajectories, in the same order, as one
    query over all of them, whichever way the conversations are chosen, and whether the ids a
    query chooses go to it as a list parameter or a registered Arrow table."""
    monkeypatch.setattr(trajectory_rows, "_LISTED_IDS", listed)
    lake = tmp_path / "lake"
    build_lake(lake, 240, per_commit=100)
    con = open_lake(lake)

    def dumped(**how: Any) -> list[dict[str, Any]]:
        return [t.model_dump() for t in load_trajectories(con, **how)]

    whole = dumped(chunk_spans=10_000)
    assert len(whole) == 240
    assert [t["conversation_id"] for t in whole] == sorted(t["conversation_id"] for t in whole)
    assert dumped(chunk_spans=70) == whole
    ids = [t["conversation_id"] for t in whole]
    chosen = [*ids[::-3], ids[5], "no-such-conversation"]  # any order, a repeat, an unknown
    assert dumped(conversation_ids=chosen) == [t for t in whole if t["conversation_id"] in chosen]
    monkeypatch.setattr(trajectory_rows, "_UNCOUNTED_IDS", 10)  # so that these are chunked too
    expected = [t for t in whole if t["conversation_id"] in set(chosen)]
    assert dumped(conversation_ids=chosen, chunk_spans=40) == expected
    middle = sorted(t["start_time"] for t in whole)[120]
    later = [t for t in whole if t["start_time"] >= middle]
    assert dumped(since=middle, chunk_spans=90) == later
    assert dumped(until=middle, chunk_spans=90) == [t for t in whole if t not in later]
    assert dumped(conversation_ids=[], chunk_spans=70) == []


def _exited_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_load_of_many_chunks_reads_the_lake_once_and_leaves_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """From three chunks on, the chunks after the first are copied out of the lake a few at a
    time, a file per chunk, and each read from its own (on a lake not sorted by conversation,
    each chunk's query read the ids of the whole window again). The same trajectories; at most
    a few chunks' files on disk, none left. A copy that cannot be written leaves its chunks
    read from the lake; a copy that vanished before it was read fails the load."""
    lake = tmp_path / "lake"
    build_lake(lake, 120, per_commit=50)
    con = open_lake(lake)
    whole = [t.model_dump() for t in load_trajectories(con, chunk_spans=10_000)]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(spreading, "SPREAD_CHUNKS", 3)
    # what a load killed with kill -9 left: removed by the next that spreads
    stale = scratch / f"{spreading.SPREAD_PREFIX}{_exited_pid()}@{socket.gethostname()}-x"
    (stale / "window").mkdir(parents=True)
    on_disk: list[int] = []
    real_drop, real_init, real_source = (
        spreading.Spread.drop,
        spreading.Spread.__init__,
        spreading.Spread.source,
    )

    def counting_drop(self: spreading.Spread, k: int) -> None:
        on_disk.append(len(list(scratch.rglob("*.parquet"))))
        real_drop(self, k)

    monkeypatch.setattr(spreading.Spread, "drop", counting_drop)
    assert [t.model_dump() for t in load_trajectories(con, chunk_spans=90)] == whole
    assert len(on_disk) >= 6, on_disk  # chunks read from their files, in two copies or more
    assert 1 <= max(on_disk) <= 2 * 3  # at most a copy's chunks (spans, log records) at a time
    assert list(scratch.iterdir()) == []  # each dropped once read, the directory at the end

    # A copy that cannot be written (here: a file where its directory goes) is read from the
    # lake, with a warning.
    def blocked(self: spreading.Spread, *args: Any) -> None:
        real_init(self, *args)
        (self._directory / "from-4").write_text("in the way")

    monkeypatch.setattr(spreading.Spread, "__init__", blocked)
    on_disk.clear()
    with caplog.at_level(logging.WARNING, logger="spanscore.trajectory"):
        assert [t.model_dump() for t in load_trajectories(con, chunk_spans=90)] == whole
    assert "reading 3 chunks from the lake: could not copy them" in caplog.text
    assert on_disk
    assert len(on_disk) < len(whole)
    assert list(scratch.iterdir()) == []
    monkeypatch.setattr(spreading.Spread, "__init__", real_init)

    # A copy removed before it was read (a cleaner of temporary files) fails the load, rather
    # than leave its conversations out.
    def vanishing(self: spreading.Spread, k: int) -> Any:
        if k == 2:
            real_source(self, k)
            shutil.rmtree(self._partition("spans", k))
        return real_source(self, k)

    monkeypatch.setattr(spreading.Spread, "source", vanishing)
    with pytest.raises(FileNotFoundError, match="the copy of a chunk's spans is gone"):
        list(load_trajectories(con, chunk_spans=90))
    assert list(scratch.iterdir()) == []
    con.close()


def _query_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spanscore-trajectory-rows"]


def test_chunked_loading_stops_its_thread_when_closed_or_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    build_lake(lake, 60)
    con = open_lake(lake)
    loading = load_trajectories(con, chunk_spans=50)
    assert next(loading).conversation_id
    assert _query_threads()
    loading.close()  # the caller stopped reading: the thread and its query stop
    assert not _query_threads()
    assert con.execute("SELECT count(*) FROM spans").fetchone() == (600,)

    # A query that fails in the thread fails the caller's iteration with its error, after the
    # chunks before it were delivered.
    real = trajectory_rows.rows_of
    calls = 0

    def failing_on_the_third(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise duckdb.IOException("the lake went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(trajectory_rows, "rows_of", failing_on_the_third)
    loading = load_trajectories(con, chunk_spans=50)
    # the first two chunks (the last conversation of a chunk is complete when the next begins)
    rebuilt = [next(loading).conversation_id for _ in range(9)]
    assert len(set(rebuilt)) == 9
    with pytest.raises(duckdb.IOException, match="the lake went away"):
        next(loading)
    assert not _query_threads()
