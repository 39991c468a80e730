"""tau-bench and tau2-bench tasks imported as suites, scored on trajectories built for the edge
cases of their rules (tau-bench's `calculate_reward`; tau2's `ActionEvaluator`,
`CommunicateEvaluator` and reward basis): each row names the rule and the verdict the benchmark
gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.evaluation import load_trajectories, open_lake
from spanscore.evaluation.suites.importers import ImporterError, detect_path, import_file
from spanscore.evaluation.suites.importers.tau2 import user_definition
from spanscore.evaluation.suites.load import load_suite
from spanscore.evaluation.trajectory.model import ModelCall, ToolCall, Trajectory, Turn
from spanscore.examples.customer_service.scripted import ScriptedAgent
from spanscore.examples.tau2 import TASKS
from spanscore.examples.tau2 import agent as retail

EXAMPLE = TASKS

FIND = ("find_user_id_by_email", {"email": "ada@example.com"})
ORDER = ("get_order_details", {"order_id": "#W1001"})
RETURN_ARGS = {"order_id": "#W1001", "item_ids": ["5001"], "payment_method_id": "credit_card_7"}
RETURN = ("return_delivered_order_items", RETURN_ARGS)


def tool(name: str, args: dict[str, Any], error: str | None = None) -> ToolCall:
    return ToolCall(name=name, arguments=args, error=error)


def said(text: str) -> ModelCall:
    return ModelCall(span_id="m", trace_id="t", name="chat", response_text=text)


def conversation(sid: str, steps: list[Any], answer: str) -> Trajectory:
    return Trajectory(
        conversation_id="c",
        attributes={"scenario.id": sid},
        turns=[Turn(index=0, user_message="hi", steps=steps, final_response=answer)],
    )


def verdicts(suite_source: Any, trajectory: Trajectory) -> dict[str, bool]:
    suite = load_suite(suite_source)
    rows = suite.score(trajectory)
    assert all(r.score.error is None for r in rows), rows
    return {r.metric: bool(r.score.passed) for r in rows}


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


# --- tau-bench -----------------------------------------------------------------------------------

TAU_TASK = {
    "user_id": "ada_byron_1",
    "instruction": "You are Ada Byron. Return the keyboard of order #W1001 to your Visa card.",
    "actions": [{"name": n, "kwargs": a} for n, a in (FIND, ORDER, RETURN)],
    "outputs": ["1093.34", "visa"],
}
ANSWER = "Done: $1,093.34 goes back to your VISA card."

TAU_BENCH = [
    # (id, steps, final answer, tau-bench's reward)
    ("gold-path", [tool(*FIND), tool(*ORDER), tool(*RETURN)], ANSWER, True),
    # a failed write changed nothing in the database; its retry is the gold write
    ("failed-and-retried-write",
     [tool(*FIND), tool("return_delivered_order_items", {**RETURN_ARGS, "item_ids": ["9"]},
                        error="ValueError"), tool(*RETURN)], ANSWER, True),
    # read-only tools leave the database alone: extra lookups, or none, are free
    ("read-only-extra-call",
     [tool(*FIND), tool(*ORDER), tool(*ORDER), tool("get_product_details", {"product_id": "1"}),
      tool(*RETURN)], ANSWER, True),
    ("no-reads", [tool(*RETURN)], ANSWER, True),
    # a write with other arguments leaves another database
    ("write-differs",
     [tool("return_delivered_order_items", {**RETURN_ARGS, "payment_method_id": "gift_card_1"})],
     ANSWER, False),
    ("extra-nested-key",
     [tool("return_delivered_order_items", {**RETURN_ARGS, "item_ids": ["5001"],
                                            "options": {"restock": True}})], ANSWER, False),
    ("write-missing", [tool(*FIND), tool(*ORDER)], ANSWER, False),
    ("write-twice", [tool(*RETURN), tool(*RETURN)], ANSWER, False),
    # outputs: lower-cased, the message's commas removed
    ("output-case-and-commas", [tool(*RETURN)], "Refund: 1,093.34 to your visa.", True),
    ("output-missing", [tool(*RETURN)], "Refund issued to your Visa card.", False),
    # tau-bench reads only the messages sent to the user, not text beside a tool call
    ("output-only-beside-a-tool-call",
     [said("The refund will be $1,093.34."), tool(*RETURN)], "Sent to your Visa.", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "answer", "reward"), [r[1:] for r in TAU_BENCH], ids=[r[0] for r in TAU_BENCH]
)
def test_tau_bench_reward(tmp_path: Path, steps: list[Any], answer: str, reward: bool) -> None:
    path = write(tmp_path, "retail.json", [TAU_TASK])
    assert detect_path(path) == "tau_bench"
    rows = verdicts(path, conversation("0", steps, answer))  # the native file as a suite
    assert set(rows) == {"db_writes", "outputs"}
    assert all(rows.values()) is reward, rows


def test_tau_bench_user_and_description(tmp_path: Path) -> None:
    result = import_file("tau_bench", write(tmp_path, "t.json", TAU_TASK))
    (scenario,) = result.suite["scenarios"]
    assert scenario["id"] == "0"
    assert scenario["description"] == TAU_TASK["instruction"]
    assert result.users["0"] == {
        "persona": None,
        "instructions": TAU_TASK["instruction"],
        "user_id": "ada_byron_1",
    }


def test_unknown_tools_are_a_suite_error_naming_them(tmp_path: Path) -> None:
    task = {**TAU_TASK, "actions": [{"name": "lookup_fleet", "kwargs": {}},
                                    {"name": "book_truck", "kwargs": {"id": 1}}]}  # fmt: skip
    path = write(tmp_path, "t.json", [task])
    with pytest.raises(ImporterError, match="change state: book_truck, lookup_fleet"):
        import_file("tau_bench", path)
    result = import_file(
        "tau_bench", path, {"read_only_tools": ["lookup_fleet"], "write_tools": ["book_truck"]}
    )
    db = result.suite["scenarios"][0]["assertions"][0]
    assert db["ignore_tools"] == ["lookup_fleet"]
    assert db["expected"] == [{"name": "book_truck", "arguments": {"id": 1}, "match": "exact"}]
    # the same from the command line
    out = CliRunner().invoke(
        main,
        ["import", "tau_bench", str(path), "--read-only-tool", "lookup_fleet",
         "--write-tool", "book_truck"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "- lookup_fleet" in out.output
    refused = CliRunner().invoke(main, ["import", "tau_bench", str(path)])
    assert refused.exit_code == 2
    assert "book_truck, lookup_fleet" in refused.output


# --- tau2-bench ----------------------------------------------------------------------------------


def tau2_task(criteria: dict[str, Any], sid: str = "t1") -> dict[str, Any]:
    return {
        "id": sid,
        "description": {"purpose": "p", "relevant_policies": None, "notes": None},
        "user_scenario": {"persona": None, "instructions": "Return the keyboard."},
        "initial_state": None,
        "evaluation_criteria": criteria,
    }


def action(aid: str, call: tuple[str, dict[str, Any]], compare: list[str] | None = None):
    return {"action_id": aid, "name": call[0], "arguments": call[1], "compare_args": compare}


ACTIONS = [action("a1", ORDER, []), action("a2", RETURN, ["order_id", "item_ids"])]

TAU2 = [
    # (id, evaluation_criteria, steps, final answer, tau2's reward)
    # DB: the successful writes are the gold writes; a failed attempt changed nothing
    ("db-failed-and-retried-write", {"actions": [action("a", RETURN)], "reward_basis": ["DB"]},
     [tool("return_delivered_order_items", RETURN_ARGS, error="RuntimeError"), tool(*RETURN)],
     "ok", True),
    ("db-read-only-extra-call", {"actions": [action("a", RETURN)], "reward_basis": ["DB"]},
     [tool(*FIND), tool(*ORDER), tool(*RETURN)], "ok", True),
    # DB replays every argument: compare_args does not apply to it
    ("db-argument-compare-args-leaves-out",
     {"actions": ACTIONS, "reward_basis": ["DB"]},
     [tool("return_delivered_order_items", {**RETURN_ARGS, "payment_method_id": "gift_card_1"})],
     "ok", False),
    # ACTION: each gold action is found among the calls, by compare_args
    ("action-argument-compare-args-leaves-out",
     {"actions": ACTIONS, "reward_basis": ["ACTION"]},
     [tool(*ORDER), tool("return_delivered_order_items",
                         {**RETURN_ARGS, "payment_method_id": "gift_card_1"})], "ok", True),
    ("action-compared-argument-differs",
     {"actions": ACTIONS, "reward_basis": ["ACTION"]},
     [tool(*ORDER), tool("return_delivered_order_items", {**RETURN_ARGS, "item_ids": ["9"]})],
     "ok", False),
    # compare_args [] compares the name only
    ("action-name-only", {"actions": ACTIONS, "reward_basis": ["ACTION"]},
     [tool("get_order_details", {"order_id": "#W9"}), tool(*RETURN)], "ok", True),
    # tau2 does not look at errors: a failed call that matches is found
    ("action-failed-call-counts", {"actions": [action("a", RETURN)], "reward_basis": ["ACTION"]},
     [tool("return_delivered_order_items", RETURN_ARGS, error="RuntimeError")], "ok", True),
    ("action-read-only-extra-call", {"actions": [action("a", RETURN)], "reward_basis": ["ACTION"]},
     [tool(*FIND), tool(*ORDER), tool(*RETURN)], "ok", True),
    # compare_args null: the call's own arguments are compared with ==, nested objects exactly
    ("action-extra-nested-key",
     {"actions": [action("a", ("update", {"order": {"id": 1}}))], "reward_basis": ["ACTION"]},
     [tool("update", {"order": {"id": 1, "note": "x"}})], "ok", False),
    ("action-same-nested", {"actions": [action("a", ("update", {"order": {"id": 1}}))],
                            "reward_basis": ["ACTION"]},
     [tool("update", {"order": {"id": 1}})], "ok", True),
    ("action-call-leaves-an-argument-out",
     {"actions": [action("a", ("update", {"order": {"id": 1}, "note": "n"}))],
      "reward_basis": ["ACTION"]}, [tool("update", {"order": {"id": 1}})], "ok", True),
    ("action-call-adds-an-argument",
     {"actions": [action("a", ("update", {"order": {"id": 1}}))], "reward_basis": ["ACTION"]},
     [tool("update", {"order": {"id": 1}, "note": "n"})], "ok", False),
    # one call satisfies two gold actions: each action is looked for on its own
    ("action-one-call-two-actions",
     {"actions": [action("a", ORDER, []), action("b", ORDER)], "reward_basis": ["ACTION"]},
     [tool(*ORDER)], "ok", True),
    # COMMUNICATE: in some agent message, intermediate ones too, case and commas aside
    ("communicate-case-and-commas",
     {"communicate_info": ["1093.34", "visa"], "reward_basis": ["COMMUNICATE"]},
     [said("The refund is $1,093.34."), tool(*RETURN)], "Sent to your VISA.", True),
    ("communicate-missing", {"communicate_info": ["1093.34"], "reward_basis": ["COMMUNICATE"]},
     [tool(*RETURN)], "Sent to your Visa.", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("criteria", "steps", "answer", "reward"), [r[1:] for r in TAU2], ids=[r[0] for r in TAU2]
)
def test_tau2_reward(
    tmp_path: Path, criteria: dict[str, Any], steps: list[Any], answer: str, reward: bool
) -> None:
    path = write(tmp_path, "tasks.json", [tau2_task(criteria)])
    assert detect_path(path) == "tau2"
    rows = verdicts(path, conversation("t1", steps, answer))
    assert rows
    assert all(rows.values()) is reward, rows


def test_tau2_reward_basis_picks_the_rows(tmp_path: Path) -> None:
    criteria = {
        "actions": ACTIONS,
        "communicate_info": ["1093.34"],
        "nl_assertions": ["The agent confirms before returning.", "The agent is polite."],
        "env_assertions": [{"env_type": "assistant", "func_name": "f", "arguments": {}}],
        "reward_basis": ["DB", "COMMUNICATE", "NL_ASSERTION", "ACTION", "ENV_ASSERTION"],
    }
    result = import_file("tau2", write(tmp_path, "tasks.json", [tau2_task(criteria)]))
    names = [a["name"] for a in result.suite["scenarios"][0]["assertions"]]
    assert names == ["db_writes", "communicate_info", "nl_assertion_1", "nl_assertion_2",
                     "action_a1", "action_a2"]  # fmt: skip
    assert any("ENV_ASSERTION" in d for d in result.dropped)  # said, and a run warns about it
    assert load_suite(result.suite).uses_judge
    # the default basis is DB and COMMUNICATE; components outside it are not imported
    del criteria["reward_basis"]
    result = import_file("tau2", write(tmp_path, "tasks.json", [tau2_task(criteria)]))
    names = [a["name"] for a in result.suite["scenarios"][0]["assertions"]]
    assert names == ["db_writes", "communicate_info"]


def test_tau2_bad_reward_basis_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "tasks.json", [tau2_task({"reward_basis": ["DB", "VIBES"]})])
    with pytest.raises(ImporterError, match=r"reward_basis: unknown reward types \['VIBES'\]"):
        import_file("tau2", path)


def test_tau2_user_scenario_is_kept_for_the_simulation() -> None:
    result = import_file("tau2", EXAMPLE)
    structured = result.users["refund_keyboard"]
    assert structured["persona"] == "Calm, brief, a little impatient."
    assert structured["instructions"]["reason_for_call"].startswith("You received order #W1001")
    assert structured["text"].startswith("Domain: retail\nReason for call:\n\t")
    plain = result.users["refund_keyboard_checked_calls"]
    assert plain["persona"] is None
    assert plain["text"] == plain["instructions"]
    task = json.loads(EXAMPLE.read_text())[0]
    assert user_definition(task, EXAMPLE) == structured


# --- the worked example: a tau2-style task file scoring real spans through the collector ------


def test_the_tau2_example_scores_the_retail_agent(collector: Collector, lake_dir: Path) -> None:
    suite = load_suite(TASKS)  # the native tasks.json, used directly as a suite
    plans = retail.conversations()
    provider = TracerProvider(resource=Resource.create({"service.name": "tau2-example"}))
    provider.add_span_processor(
        SimpleSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")
        )
    )
    agent = ScriptedAgent(
        retail.RetailStore(),
        provider.get_tracer("t"),
        agent=retail.AGENT,
        tool_definitions=retail.TOOL_DEFINITIONS,
    )
    for plan in plans:
        agent.run(plan)
    provider.shutdown()
    rebuilt = {
        t.conversation_id: t
        for t in load_trajectories(open_lake(lake_dir), attributes=suite.attribute_keys())
    }
    assert set(rebuilt) == {p.conversation_id for p in plans}
    rows = {cid: {r.metric: r.score for r in suite.score(t)} for cid, t in rebuilt.items()}
    for cid, scored in rows.items():
        assert all(s.error is None for s in scored.values()), (cid, scored)
    # the task's reward: every row of its scenario passes
    reward = {cid: all(s.passed for s in scored.values()) for cid, scored in rows.items()}
    assert reward == {p.conversation_id: not p.breaks_policy for p in plans}
    # the retried write failed as a span, and so was left out as not made
    retried = rows["tau2-refund-retried"]["db_writes"].details or {}
    assert [c["why"] for c in retried["left_out"]].count("failed") == 1
    assert rows["tau2-refund-gift-card"]["db_writes"].passed is False
    assert rows["tau2-refund-silent"]["communicate_info"].passed is False
    assert rows["tau2-actions-no-lookup"]["action_lookup"].passed is False
    assert set(rows["tau2-actions-gift-card"]) == {"action_lookup", "action_return"}
