"""`spanscore promote`: a conversation of the lake becomes a scenario of a suite file.

On a real lake: the example agent (the `openai` tool loop, instrumented) talks to the local
scripted model, its spans go over OTLP to a real collector. A promoted scenario passes on the
conversation it came from (`spanscore evaluate`), its `user:` block drives a simulation
(`spanscore simulate`, the scripted user model), the suite file's existing text stays byte for
byte, and a conversation full of YAML-breaking text comes back as data.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.evaluation import load_suite
from spanscore.evaluation.suites.promote import PromoteError, preview_promotion, promote
from spanscore.examples.customer_service.scripted import Conversation, Turn, conversations
from spanscore.examples.llm_server import ScriptedLLM, ScriptedPolicy
from spanscore.examples.user_policy import ScriptedUsers
from spanscore.lake import connect

from ..support import simulated_agents
from ..support.example_lake import record_example_lake
from ..support.lake import query

# Text that breaks YAML written by hand: a comment, list items, quotes, anchors, tags, a
# document marker, a template, a tab; and JSON: quotes and backslashes.
HOSTILE_FIRST = (
    "key: value # not a comment\n- not: [a, list]\n\"double\" 'single' {{ template }} "
    "&anchor *alias !!python/object:os.system |\n--- ... \\ end"
)
HOSTILE_LATER = "? complex key\n%YAML 1.1\n\t- tab: {{x}}"
HOSTILE_QUERY = 'stand: # {{x}} - "q"\n- y'
HOSTILE_REPLY = 'Nothing found for "stand: #" - {{x}}\n- try again: #1'
HOSTILE_ID = "cs-hostile: #1 {{x}}"

SUITE = """\
# The team's suite: written by hand, with comments that must survive.
name: support  # the suite's name

policies:
  # every cancellation is verified first
  - id: verify_before_cancel
    assertions:
      - {type: order, before: verify_customer, after: cancel_order}

scenarios:
  - id: order_status_check   # stamped on the spans
    description: >-
      where is my order,
      answered
    assertions:
      - type: tool_calls
        mode: contains
        expected: [get_order]
  # promoted scenarios go below

gates:  # after the scenarios, on purpose
  - {scenario: order_status_check, min_pass_rate: 1.0}
min_conversations: 1
"""


def _hostile_plan() -> Conversation:
    return Conversation(
        HOSTILE_ID,
        "hostile",
        [
            Turn(
                HOSTILE_FIRST,
                [[("search_products", {"query": HOSTILE_QUERY, "max_price": 10.5})]],
                "Let me look.",
            ),
            Turn(HOSTILE_LATER, [], HOSTILE_REPLY),
        ],
    )


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's conversations and the hostile one, recorded for real."""
    path = tmp_path_factory.mktemp("promote") / "lake"
    record_example_lake(path, [*conversations(), _hostile_plan()])
    return path


@pytest.fixture
def con(lake: Path) -> Iterator[Any]:
    connection = connect(lake)
    try:
        yield connection
    finally:
        connection.close()


def _promote_cli(lake: Path, suite: Path, conversation: str, *args: str) -> Any:
    return CliRunner().invoke(
        main, ["promote", conversation, "--lake", str(lake), "--suite", str(suite), *args]
    )


def _scenario(suite: Path, scenario_id: str) -> Any:
    loaded = load_suite(suite)
    return next(s for s in loaded.suite.scenarios if s.id == scenario_id)


# --- (a) a promoted scenario passes on the conversation it came from -------------------------


def test_promoted_scenarios_pass_on_the_conversations_they_came_from(
    lake: Path, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    promoted = {
        "cs-account-1": [],  # two user turns
        "cs-budget-search-1": ["--arguments", "partial"],  # two calls in one model response
        "cs-cancel-2": ["--scenario-id", "cancel_before_verify"],  # the failure, as it was
        HOSTILE_ID: ["--no-response"],
    }
    for conversation, args in promoted.items():
        result = _promote_cli(lake, suite, conversation, *args)
        assert result.exit_code == 0, result.output
        assert "appended scenario" in result.output
        assert "score it: `spanscore evaluate --lake" in result.output
    ids = ["cs-account-1", "cs-budget-search-1", "cancel_before_verify", "cs-hostile-1-x"]
    assert [s.id for s in load_suite(suite).suite.scenarios] == ["order_status_check", *ids]

    account = _scenario(suite, "cs-account-1")
    assert account.select is not None
    assert account.select.conversation_id == "cs-account-1"
    calls = account.assertions[0]
    assert calls.mode == "strict"
    assert [c.name for c in calls.expected] == [
        "send_verification_code",
        "verify_customer",
        "lookup_customer",
    ]
    assert account.assertions[1].type == "response"
    assert account.assertions[1].expected == "The account belongs to Ada Lovelace."
    assert account.user is not None
    assert (
        account.user.goal
        == account.user.opening
        == "What name is on the account for ada@example.com?"
    )
    assert account.user.knowledge == ["Thanks, so what's the name?"]
    budget = _scenario(suite, "cs-budget-search-1")
    assert budget.assertions[0].arguments == "partial"
    step = budget.assertions[0].expected[0]
    assert isinstance(step, list)  # the parallel step, as the model requested it
    assert sorted(c.arguments["query"] for c in step) == ["keyboard", "mouse"]
    cancel = _scenario(suite, "cancel_before_verify")
    assert [c.name for c in cancel.assertions[0].expected] == [
        "cancel_order",
        "send_verification_code",
        "verify_customer",
    ]
    assert [a.type for a in _scenario(suite, "cs-hostile-1-x").assertions] == ["tool_calls"]

    run = CliRunner().invoke(
        main,
        [
            "evaluate", "--lake", str(lake), "--suite", str(suite), "--settle", "0",
            "--since", "2000-01-01T00:00:00Z", "--workers", "1", "--format", "json",
        ],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    document = json.loads(run.stdout)
    rows = {(r["scenario"], r["metric"]): r for r in document["summary"]}
    for scenario_id in ids:
        scored = {m: r for (s, m), r in rows.items() if s == scenario_id}
        assert scored, f"{scenario_id} scored nothing"
        for metric, row in scored.items():
            # Each selects exactly its own conversation, and passes on it.
            assert (row["conversations"], row["pass_rate"]) == (1, 1.0), (scenario_id, metric)
    # The policy still catches the failure the promoted scenario took as it was.
    assert rows[("verify_before_cancel", "order")]["pass_rate"] < 1


def test_a_scenario_id_clash_an_unknown_conversation_and_a_bad_suite_exit_2_and_change_nothing(
    lake: Path, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    clash = _promote_cli(lake, suite, "cs-account-1", "--scenario-id", "order_status_check")
    assert clash.exit_code == 2
    assert "already has a scenario or policy 'order_status_check'" in clash.output
    unknown = _promote_cli(lake, suite, "no-such-conversation")
    assert unknown.exit_code == 2
    assert "no conversation 'no-such-conversation' in the lake" in unknown.output
    assert suite.read_text() == SUITE

    broken = tmp_path / "broken.yaml"
    broken.write_text(SUITE.replace("mode: contains", "mode: containz"))
    bad = _promote_cli(lake, broken, "cs-account-1")
    assert bad.exit_code == 2
    assert "the suite cannot be used" in bad.output
    assert f"{broken}:17: scenarios[0].assertions[0].mode" in bad.output
    assert broken.read_text() == SUITE.replace("mode: contains", "mode: containz")

    native = tmp_path / "scenarios.json"
    shutil.copy(
        Path(__file__).parents[2] / "examples/customer_service/arksim_scenarios.json", native
    )
    before = native.read_bytes()
    imported = _promote_cli(lake, native, "cs-account-1")
    assert imported.exit_code == 2
    assert "is another tool's file (arksim), not a spanscore suite" in imported.output
    assert native.read_bytes() == before
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind

    # A second promotion of the same conversation gets an id of its own.
    assert _promote_cli(lake, suite, "cs-account-1").exit_code == 0
    again = _promote_cli(lake, suite, "cs-account-1")
    assert again.exit_code == 0, again.output
    assert "'cs-account-1-2'" in again.output


def test_a_preview_writes_nothing(con: Any, tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    preview = preview_promotion(con, "cs-order-status-1", suite)
    assert not preview.written
    assert suite.read_text() == SUITE
    written = promote(con, "cs-order-status-1", suite)
    assert written.written
    assert dataclasses.replace(written, written=False) == preview
    text = suite.read_text()
    assert text.replace(preview.text, "", 1) == SUITE
    # After the last scenario and the comment that closes the list, before the gates.
    assert written.line is not None
    lines = text.splitlines()
    assert lines[written.line - 2 : written.line] == [
        "  # promoted scenarios go below",
        "  - id: cs-order-status-1",
    ]


# --- (b) the user: block drives a simulation -------------------------------------------------


def test_a_promoted_user_block_drives_a_simulation_whose_trial_passes(
    lake: Path, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    # The simulation plays the promoted scenario alone: the other scenario's gate has nothing
    # to measure in it.
    suite.write_text(SUITE.replace("min_pass_rate: 1.0}", "min_pass_rate: 1.0, allow_empty: true}"))
    result = _promote_cli(lake, suite, "cs-account-1")
    assert result.exit_code == 0, result.output
    assert "replay it: `spanscore simulate --lake" in result.output
    user = _scenario(suite, "cs-account-1").user
    assert user is not None
    # The scripted user model knows the promoted scenario by its goal, and says what the user
    # said in the conversation, one message a turn.
    plan = next(p for p in conversations() if p.conversation_id == "cs-account-1")
    plans = [dataclasses.replace(plan, scenario_id="cs-account-1")]
    with (
        ScriptedLLM(ScriptedPolicy()) as agent,
        ScriptedLLM(ScriptedUsers({"cs-account-1": user.goal}, plans)) as users,
    ):
        simulated_agents.MODEL_URL = agent.base_url
        simulated = CliRunner().invoke(
            main,
            [
                "simulate", "--lake", str(lake), "--suite", str(suite),
                "--scenario", "cs-account-1", "--trials", "1",
                "--agent", "tests.support.simulated_agents:customer_service",
                "--user-base-url", users.base_url, "--evaluate", "--format", "json",
            ],
            catch_exceptions=False,
        )  # fmt: skip
    assert simulated.exit_code == 0, simulated.output
    out = json.loads(simulated.stdout)
    assert out["simulation"]["stop_reasons"] == {"goal_reached": 1}
    sid = out["simulation"]["simulation_id"]
    turns = query(
        lake,
        "SELECT user_message FROM simulated_turns WHERE conversation_id = ? ORDER BY turn_index",
        [f"{sid}/cs-account-1/t1"],
    )
    assert [t[0] for t in turns] == [user.opening, *user.knowledge]
    # The scenario selects its source conversation by id, and judges its replays too.
    trials = {s["scenario"]: s for s in out["evaluation"]["trials"]["scenarios"]}
    assert (trials["cs-account-1"]["trials"], trials["cs-account-1"]["passed"]) == (1, 1)
    scored = {
        (r["scenario"], r["metric"]): r["conversations"] for r in out["evaluation"]["summary"]
    }
    assert scored[("cs-account-1", "tool_calls")] == 1
    assert scored[("cs-account-1", "response")] == 1


# --- (c) comments and order are kept, byte for byte ------------------------------------------

FLOW = "# flow style\n{name: flow, scenarios: [{id: first}], strict: false}  # the end\n"
FLOW_LIST = "name: listed\nscenarios: [\n  {id: first},  # one\n  {id: second}\n]\n# end\n"
NO_SCENARIOS = "# nothing yet\nname: empty\nmetrics:\n  - {type: efficiency}\n# the end, no newline"
JSON_SUITE = (
    '{\n    "name": "json suite",\n    "scenarios": [\n        {"id": "first"}\n    ],\n'
    '    "gates": [],\n    "strict": false\n}\n'
)
CRLF = SUITE.replace("\n", "\r\n")


SHAPES = {
    "block.yaml": SUITE,  # block style, `scenarios` not the last key, comments
    "flow.yaml": FLOW,  # the whole suite in flow style
    "flow-list.yml": FLOW_LIST,  # `scenarios: [...]` over several lines
    "none.yaml": NO_SCENARIOS,  # no `scenarios` yet, no final line break
    "suite.json": JSON_SUITE,
    "crlf.yaml": CRLF,  # Windows line breaks
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_existing_text_is_kept_byte_for_byte(con: Any, tmp_path: Path, name: str) -> None:
    text = SHAPES[name]
    suite = tmp_path / name
    suite.write_bytes(text.encode())
    before = load_suite(suite).suite
    promoted = promote(con, "cs-check-order-1", suite)
    after_bytes = suite.read_bytes()
    after = after_bytes.decode()
    assert after.count(promoted.text) == 1
    assert after.replace(promoted.text, "", 1) == text  # nothing else changed, not one byte
    if name == "crlf.yaml":
        assert "\n" not in after.replace("\r\n", "")
    loaded = load_suite(suite).suite
    assert [s.id for s in loaded.scenarios] == [
        *(s.id for s in before.scenarios),
        "cs-check-order-1",
    ]
    assert loaded.model_dump(exclude={"scenarios"}) == before.model_dump(exclude={"scenarios"})
    parse = json.loads if name.endswith(".json") else yaml.safe_load
    keys_before, keys_after = list(parse(text)), list(parse(after))
    assert keys_after[: len(keys_before)] == keys_before  # the keys' order too
    assert promoted.line is not None
    starts = after.splitlines()[promoted.line - 1 : promoted.line + 1]  # JSON: `{` first
    assert "cs-check-order-1" in "\n".join(starts)


# --- (d) hostile content round-trips as data -------------------------------------------------


@pytest.mark.parametrize("name", ["suite.yaml", "suite.json", "flow.yaml"])
def test_yaml_breaking_text_comes_back_as_data(con: Any, tmp_path: Path, name: str) -> None:
    suite = tmp_path / name
    suite.write_text({"suite.json": JSON_SUITE, "flow.yaml": FLOW}.get(name, SUITE))
    promoted = promote(con, HOSTILE_ID, suite)
    scenario = _scenario(suite, promoted.scenario_id)
    assert scenario.select is not None
    assert scenario.select.conversation_id == HOSTILE_ID
    assert scenario.user is not None
    assert scenario.user.goal == scenario.user.opening == HOSTILE_FIRST
    assert scenario.user.knowledge == [HOSTILE_LATER]
    call = scenario.assertions[0].expected[0]
    assert (call.name, call.arguments) == (
        "search_products",
        {"query": HOSTILE_QUERY, "max_price": 10.5},
    )
    assert scenario.assertions[1].expected == HOSTILE_REPLY
    # What the file says is what the scenario document says, read by another parser too.
    parsed = (json.loads if name.endswith(".json") else yaml.safe_load)(suite.read_text())
    assert parsed["scenarios"][-1] == promoted.scenario


def test_the_library_refuses_an_unknown_conversation_without_writing(
    con: Any, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    with pytest.raises(PromoteError, match="no conversation 'nope' in the lake"):
        promote(con, "nope", suite)
    assert suite.read_text() == SUITE
