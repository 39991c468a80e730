"""`spanscore simulate`: simulated users drive an agent before deployment, and the same suite
judges the conversations.

Real parts throughout: the `spanscore` command, the collector and the lake, the `openai`
client against the local OpenAI-compatible server (which plays the agent's model, the users and
the judge), an agent in this process, an ArkSim agent from the `arksim` package, and an HTTP
agent in its own process. Each fault a simulation must survive is played by an agent or a
user model that misbehaves on purpose.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.gates import parse_gate
from spanscore.examples.judge_policy import ScriptedJudge
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM, ScriptedPolicy
from spanscore.examples.user_policy import ScriptedUsers
from spanscore.lake import LakeError, connect

from ..support import arksim_agent, simulated_agents
from ..support.collector import start_collector
from ..support.evaluation_runs import write_suite
from ..support.lake import query
from ..support.polling import wait_for
from ..support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "customer_service" / "suite.yaml"
AGENT = "tests.support.simulated_agents"


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, ScriptedLLM]]:
    """The agent's model, the users' model and the judge, each a local server."""
    suite = load_suite(SUITE)
    goals = {s.id: s.user.goal for s in suite.suite.scenarios if s.user is not None}
    with (
        ScriptedLLM(ScriptedPolicy()) as agent,
        ScriptedLLM(ScriptedUsers(goals)) as users,
        ScriptedLLM(ScriptedJudge()) as judge,
    ):
        simulated_agents.MODEL_URL = arksim_agent.MODEL_URL = agent.base_url
        yield {"agent": agent, "users": users, "judge": judge}


def simulate(lake: Path, *args: str, suite: Path = SUITE) -> Any:
    return CliRunner().invoke(
        main,
        ["simulate", "--lake", str(lake), "--suite", str(suite), "--format", "json", *args],
        catch_exceptions=False,
    )


def document(result: Any) -> dict[str, Any]:
    return json.loads(result.stdout)


def test_in_process_agent_simulated_scored_marked_and_replayed(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    lake = tmp_path / "lake"
    users, judge = models["users"].base_url, models["judge"].base_url
    args = ["--agent", f"{AGENT}:customer_service", "--trials", "2", "--user-base-url", users]
    written_by_simulate = tmp_path / "simulate-report.html"
    result = simulate(
        lake, *args, "--evaluate", "--judge-base-url", judge, "--fail-under", "pass^2=0.9",
        "--report", str(written_by_simulate),
    )  # fmt: skip
    # The pushy user of two scenarios (odd trials) leads the agent to break policy: the run's
    # pass^2 gate fails, and the exit code says so.
    assert result.exit_code == 1, result.output
    out = document(result)
    simulation = out["simulation"]
    assert simulation["status"] == "completed"
    assert simulation["stop_reasons"] == {"goal_reached": 14}
    assert simulation["user_model"]["calls"] == 30
    trials = out["evaluation"]["trials"]
    by_scenario = {s["scenario"]: s for s in trials["scenarios"]}
    assert by_scenario["auth_cancel_order"]["passed"] == 1
    assert by_scenario["auth_cancel_order"]["pass_hat_k"] == {"1": 0.5, "2": 0.0}
    assert by_scenario["order_status_check"]["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert trials["mean_pass_hat_k"]["2"] == pytest.approx(5 / 7)
    # The simulated users are judged too, apart: faithful, and no part of any trial.
    fidelity = [r for r in out["evaluation"]["summary"] if r["metric"] == "simulator.fidelity"]
    assert [(r["conversations"], r["pass_rate"]) for r in fidelity] == [(14, 1.0)]
    report = tmp_path / "report.html"
    written = CliRunner().invoke(
        main, ["report", out["evaluation"]["run_id"], "--lake", str(lake), "-o", str(report)]
    )
    assert written.exit_code == 0, written.output
    page = report.read_text()
    assert '<section id="trials">' in page
    assert "pass^1 0.857, pass^2 0.714" in page
    assert "The simulated users" in page
    # The gate is named for what it measured, pass^2, not a pass rate.
    assert "pass^2 0.714 (needs &ge; 0.900)" in page
    assert "pass^2 0.714 below 0.9" in page  # why the run failed
    summary = CliRunner().invoke(
        main, ["report", out["evaluation"]["run_id"], "--lake", str(lake), "--format", "markdown"]
    )
    assert "| pass^2 0.714 | ≥ 0.900 |" in summary.stdout, summary.stdout
    assert "pass rate 0.714" not in summary.stdout
    # `simulate --report` writes the same report, its line on stderr beside the JSON document.
    assert "pass^1 0.857, pass^2 0.714" in written_by_simulate.read_text()
    assert f"written to {written_by_simulate}" in result.stderr
    gate = out["evaluation"]["gates"][-1]
    assert gate["pass_k"] == 2
    assert not gate["passed"]
    assert gate["description"] == "all scenarios: pass^2 0.714 (needs >= 0.9)"

    sid = simulation["simulation_id"]
    # Marked: every span of a simulated conversation carries the simulation and its trial.
    marks = query(
        lake,
        """SELECT count(*), count(DISTINCT conversation_id),
                  count(*) FILTER (WHERE json_extract_string(attributes, '$."simulation.id"') = ?
                      AND json_extract_string(attributes, '$."simulation.trial"') IN ('1', '2'))
           FROM spans""",
        [sid],
    )[0]
    assert marks[0] == marks[2]
    assert marks[1] == 14
    # The users' turns are recorded with the conversation: two for the account lookup.
    turns = query(
        lake,
        "SELECT user_message, agent_reply IS NOT NULL FROM simulated_turns "
        "WHERE conversation_id = ? ORDER BY turn_index",
        [f"{sid}/auth_account_lookup/t1"],
    )
    assert turns == [
        ("What name is on the account for ada@example.com?", True),
        ("Thanks, so what's the name?", True),
    ]
    # Not mixed: the nightly evaluation of production traffic leaves them out.
    nightly = CliRunner().invoke(
        main,
        [
            "evaluate",
            "--lake",
            str(lake),
            "--suite",
            str(SUITE),
            "--settle",
            "0",
            "--judge-base-url",
            judge,
            "--format",
            "json",
        ],
    )
    assert json.loads(nightly.stdout)["counts"]["candidates"] == 0
    listed = CliRunner().invoke(main, ["simulations", "--lake", str(lake), "--format", "json"])
    assert [s["simulation_id"] for s in json.loads(listed.stdout)] == [sid]

    # The same seed again: every user turn replayed from the lake's cache, no call.
    again = document(simulate(lake, *args))
    assert again["simulation"]["user_model"]["calls"] == 0
    assert again["simulation"]["user_model"]["cache_hits"] == 30
    assert again["simulation"]["stop_reasons"] == {"goal_reached": 14}


def test_arksim_custom_agent_runs_unchanged(tmp_path: Path, models: dict[str, ScriptedLLM]) -> None:
    from arksim.config import AgentConfig

    arksim_agent.CONFIGS.clear()
    arksim_agent.CALLS.clear()
    result = simulate(
        tmp_path / "lake",
        "--agent",
        "tests.support.arksim_agent",  # the module: its one BaseAgent subclass
        "--concurrency",
        "1",
        "--scenario",
        "auth_account_lookup",
        "--scenario",
        "order_status_check",
        "--user-base-url",
        models["users"].base_url,
    )
    assert result.exit_code == 0, result.output
    assert document(result)["simulation"]["stop_reasons"] == {"goal_reached": 2}
    # One instance per conversation, given ArkSim's own AgentConfig for a custom agent.
    assert len(arksim_agent.CONFIGS) == 2
    assert all(isinstance(c, AgentConfig) for c in arksim_agent.CONFIGS)
    assert {c.agent_type for c in arksim_agent.CONFIGS} == {"custom"}
    # Called as `arksim simulate` calls it: its chat id first, a turn at a time, then closed.
    assert arksim_agent.CALLS[0] == "get_chat_id"
    each: list[list[str]] = []
    for call in arksim_agent.CALLS:
        if call == "get_chat_id":
            each.append([])
        each[-1].append(call)
    assert sorted(each) == [
        ["get_chat_id", "execute", "close"],  # order_status_check: one user message
        ["get_chat_id", "execute", "execute", "close"],  # auth_account_lookup: two
    ]
    spans = query(
        tmp_path / "lake",
        "SELECT count(DISTINCT conversation_id) FROM spans WHERE conversation_id LIKE 'sim-%'",
    )
    assert spans == [(2,)]


@pytest.fixture(params=["spanscore", "otel"])
def http_agent(
    request: pytest.FixtureRequest, tmp_path: Path, models: dict[str, ScriptedLLM]
) -> Iterator[tuple[str, Path, Any]]:
    """An agent behind HTTP in its own process, sending its spans to a collector on the test's
    lake: the example agent instrumented with `spanscore.instrumentation`, or an agent traced
    by the OpenTelemetry SDK alone plus the one documented line."""
    lake = tmp_path / "lake"
    collector = start_collector(lake)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.http_agent",
            "--model-url",
            models["agent"].base_url,
            "--otlp",
            f"http://127.0.0.1:{collector.http_port}",
            "--instrumentation",
            request.param,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/", lake, collector
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        collector.stop()


def test_http_agent_in_its_own_process_tags_its_spans_from_baggage(
    http_agent: tuple[str, Path, Any], models: dict[str, ScriptedLLM]
) -> None:
    url, lake, collector = http_agent
    result = simulate(
        lake,
        "--agent",
        url,
        "--endpoint",
        f"http://127.0.0.1:{collector.http_port}",
        "--reply-path",
        "output.text",
        "--scenario",
        "auth_account_lookup",
        "--trials",
        "2",
        "--user-base-url",
        models["users"].base_url,
    )
    assert result.exit_code == 0, result.output
    sid = document(result)["simulation"]["simulation_id"]
    expected = {(f"{sid}/auth_account_lookup/t{n}", str(n)) for n in (1, 2)}

    def tagged() -> set[tuple[str, str]]:
        rows = query(
            lake,
            """SELECT DISTINCT conversation_id,
                      json_extract_string(attributes, '$."simulation.trial"')
               FROM spans WHERE json_extract_string(attributes, '$."simulation.id"') = ?""",
            [sid],
        )
        return {(str(c), str(t)) for c, t in rows}

    assert wait_for(lambda: tagged() == expected, timeout=60)
    services = query(
        lake,
        "SELECT DISTINCT service_name FROM conversations WHERE conversation_id LIKE ?",
        [f"{sid}/%"],
    )
    assert services == [("http-agent",)]


def test_unreachable_agent_is_refused_before_anything_runs(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    result = simulate(tmp_path / "lake", "--agent", url)
    assert result.exit_code == 2
    assert url in result.stderr
    assert "unreachable" in result.stderr
    assert query(tmp_path / "lake", "SELECT count(*) FROM simulations") == [(0,)]


def test_unreachable_collector_is_refused_before_anything_runs(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    connect(lake, create=True).close()
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = simulate(
        lake, "--agent", f"{AGENT}:async_echo", "--endpoint", endpoint,
        "--user-base-url", "http://127.0.0.1:9/v1",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"the collector at {endpoint} is unreachable" in result.stderr
    assert query(lake, "SELECT count(*) FROM simulations") == [(0,)]


def test_a_user_model_that_cannot_be_used_is_refused_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    no_key = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None, "AZURE_OPENAI_ENDPOINT": None}
    args = ["simulate", "--lake", str(lake), "--suite", str(SUITE)]
    args += ["--agent", f"{AGENT}:async_echo"]
    result = CliRunner().invoke(main, args, env=no_key)
    assert result.exit_code == 2, result.output
    assert "the user model has no key and no endpoint" in result.stderr
    assert "--user-base-url" in result.stderr
    unpriced = CliRunner().invoke(
        main,
        [*args, "--user-base-url", "http://127.0.0.1:9/v1", "--user-model", "my-model",
         "--max-user-cost", "1"],
    )  # fmt: skip
    assert unpriced.exit_code == 2, unpriced.output
    assert "--max-user-cost needs the price of the user model 'my-model'" in unpriced.stderr
    assert "simulator.prices" in unpriced.stderr
    # Refused before the simulation was recorded: no simulation is left running.
    assert query(lake, "SELECT count(*) FROM simulations") == [(0,)]


def test_scenario_without_a_user_is_a_located_suite_error(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path,
        "name: s\nscenarios:\n  - id: with_user\n    user: {goal: be helped}\n"
        "  - id: no_user\n    assertions: []\n",
    )
    result = simulate(tmp_path / "lake", "--agent", f"{AGENT}:async_echo", suite=suite)
    assert result.exit_code == 2
    assert f"{suite}:5: scenarios[1]: scenario 'no_user' has no `user:` block" in result.stderr
    typo = simulate(
        tmp_path / "lake", "--agent", f"{AGENT}:async_echo", "--scenario", "with_usr", suite=suite
    )
    assert typo.exit_code == 2
    assert "no scenario 'with_usr'" in typo.stderr


FAULTS_SUITE = """\
name: faults
scenarios:
  - {id: raises, user: {goal: g1, opening: hello}}
  - {id: garbage, user: {goal: g2, opening: hello}}
  - {id: hangs, user: {goal: g3, opening: hello}}
  - {id: fine, user: {goal: g4, opening: hello}}
"""


def test_agent_faults_end_their_own_trial_and_the_others_go_on(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    suite = write_suite(tmp_path, FAULTS_SUITE)
    try:
        result = simulate(
            tmp_path / "lake",
            "--agent",
            f"{AGENT}:by_scenario",
            "--turn-timeout",
            "1",
            "--user-base-url",
            models["users"].base_url,  # knows no goal here: gives up
            suite=suite,
        )
    finally:
        simulated_agents.RELEASE.set()
    assert result.exit_code == 0, result.output
    conversations = {
        c["scenario"]: (c["stop_reason"], c["turns"], c["error"])
        for c in document(result)["simulation"]["conversations"]
    }
    assert conversations["raises"] == (
        "agent_error",
        1,
        "RuntimeError: the agent crashed on purpose",
    )
    assert conversations["garbage"][:2] == ("agent_error", 1)
    assert conversations["garbage"][2] == "the agent returned int 42, not a reply text"
    assert conversations["hangs"] == ("timeout", 1, "the agent did not answer within 1 s")
    assert conversations["fine"] == ("user_gave_up", 1, None)
    # `show` tells how a simulated conversation ended, and its turns when no span was recorded.
    [raised] = [c for c in document(result)["simulation"]["conversations"]
                if c["scenario"] == "raises"]  # fmt: skip
    shown = CliRunner().invoke(
        main, ["show", raised["conversation_id"], "--lake", str(tmp_path / "lake")]
    )
    assert "ended: agent_error after 1 user message" in shown.output
    assert "ERROR  RuntimeError: the agent crashed on purpose" in shown.output
    assert "turn 0  user: hello" in shown.output
    # As JSON: the trajectory document (no span, no turn, and a warning that says so), with
    # the simulation's record as one more key.
    as_json = CliRunner().invoke(
        main, ["show", raised["conversation_id"], "--lake", str(tmp_path / "lake"), "--json"]
    )
    trajectory = json.loads(as_json.stdout)
    assert (trajectory["conversation_id"], trajectory["turns"]) == (raised["conversation_id"], [])
    assert trajectory["warnings"] == [
        "the agent recorded no spans: `simulation.turns` has the turns"
    ]
    assert trajectory["simulation"]["stop_reason"] == "agent_error"
    assert [t["user_message"] for t in trajectory["simulation"]["turns"]] == ["hello"]
    # None of these agents records a span. Those that failed on their first message say why;
    # only the one that answered asks whether the agent is instrumented.
    simulation = document(result)["simulation"]
    failed, silent = simulation["warnings"]
    assert failed.startswith(
        "3 of the 4 simulated conversations have no spans in the lake because the agent failed "
        "on their first message before any span of theirs was recorded: agent_error in 2 (e.g. "
    )
    assert "timeout in 1 (e.g. " in failed
    assert "the agent did not answer within 1 s" in failed
    assert "instrumented" not in failed
    assert silent.startswith(
        "1 of the 4 simulated conversations have no spans in the lake although the agent "
        f"answered (e.g. {simulation['simulation_id']}/fine/t1): is the agent instrumented"
    )
    recorded = query(
        tmp_path / "lake",
        "SELECT scenario_id, stop_reason, error IS NOT NULL FROM simulated_conversations "
        "ORDER BY scenario_id",
    )
    assert recorded == [
        ("fine", "user_gave_up", False),
        ("garbage", "agent_error", True),
        ("hangs", "timeout", True),
        ("raises", "agent_error", True),
    ]


def test_a_simulation_that_completed_nothing_never_passes(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    suite = write_suite(
        tmp_path, "name: s\nscenarios:\n  - {id: raises, user: {goal: g, opening: hi}}\n"
    )
    result = simulate(
        tmp_path / "lake",
        "--agent",
        f"{AGENT}:by_scenario",
        "--trials",
        "2",
        "--user-base-url",
        models["users"].base_url,
        suite=suite,
    )
    assert result.exit_code == 1
    assert document(result)["simulation"]["completed"] == 0
    # Scored later, with no gate, the simulation still measured nothing: the run fails.
    sid = document(result)["simulation"]["simulation_id"]
    scored = CliRunner().invoke(
        main,
        ["evaluate", "--lake", str(tmp_path / "lake"), "--suite", str(suite),
         "--simulation", sid, "--format", "json", "--report", str(tmp_path / "r.html")],
    )  # fmt: skip
    assert scored.exit_code == 1, scored.output
    run = json.loads(scored.stdout)
    assert not run["passed"]
    assert run["failures"] == [
        f"simulation {sid} completed no conversation (agent_error 2): it measured nothing, "
        "so it cannot pass"
    ]


def test_user_model_throttling_is_backed_off(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    suite = load_suite(SUITE)
    goals = {s.id: s.user.goal for s in suite.suite.scenarios if s.user is not None}
    with ScriptedLLM(ScriptedUsers(goals), capacity=2, delay_s=0.2, retry_after_ms=20) as users:
        result = simulate(
            tmp_path / "lake",
            "--agent",
            f"{AGENT}:customer_service",
            "--trials",
            "2",
            "--concurrency",
            "14",
            "--user-base-url",
            users.base_url,
        )
        assert result.exit_code == 0, result.output
        user_model = document(result)["simulation"]["user_model"]
        assert users.rate_limited > 0
        assert user_model["throttled"] > 0
        assert user_model["failed"] == 0
        assert document(result)["simulation"]["stop_reasons"] == {"goal_reached": 14}


def test_a_failing_user_model_marks_trials_incomplete_and_a_budget_not_run(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    with ScriptedLLM(lambda request: "{}", fail_first=10**6, fail_status=503) as broken:
        result = simulate(
            tmp_path / "a",
            "--agent",
            f"{AGENT}:async_echo",
            "--scenario",
            "order_status_check",
            "--user-base-url",
            broken.base_url,
            "--user-model",
            "gpt-4.1-mini",
        )
    assert result.exit_code == 1
    [trial] = document(result)["simulation"]["conversations"]
    assert trial["stop_reason"] == "user_model_error"
    assert "the user model failed after" in trial["error"]
    assert "HTTP 503" in trial["error"]

    budget = simulate(
        tmp_path / "b",
        "--agent",
        f"{AGENT}:customer_service",
        "--trials",
        "2",
        "--concurrency",
        "1",
        "--max-user-calls",
        "3",
        "--user-base-url",
        models["users"].base_url,
    )
    assert budget.exit_code == 1
    out = document(budget)["simulation"]
    assert out["status"] == "budget_spent"
    assert out["user_model"]["calls"] == 3
    assert out["stop_reasons"]["budget"] == out["not_run"] > 0
    skipped = [c["error"] for c in out["conversations"] if c["stop_reason"] == "budget"]
    assert set(skipped) == {"skipped: the user model's budget of 3 calls is spent"}
    assert sum(out["stop_reasons"].values()) == 14

    # A cost budget: the local model's usage priced as gpt-4.1-mini's; it stops at $0.0005.
    spent = simulate(
        tmp_path / "c",
        "--agent",
        f"{AGENT}:customer_service",
        "--concurrency",
        "1",
        "--max-user-cost",
        "0.0005",
        "--user-model",
        "gpt-4.1-mini",
        "--user-base-url",
        models["users"].base_url,
    )
    assert spent.exit_code == 1
    out = document(spent)["simulation"]
    assert out["status"] == "budget_spent"
    assert 0.0005 <= out["user_model"]["cost_usd"] < 0.001
    assert out["stop_reasons"]["budget"] == out["not_run"] > 0
    skipped = [c["error"] for c in out["conversations"] if c["stop_reason"] == "budget"]
    assert set(skipped) == {"skipped: the user model's budget of $0.0005 is spent"}


def test_pass_hat_k_is_tau_bench_s_and_counts_only_trials_that_ran(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    con = connect(lake, create=True)
    con.execute("INSERT INTO eval_runs (run_id, simulation_id) VALUES ('r', 's')")
    trials = [
        # (trial, stop reason, scores passed): 5 counted, of which 2 passed
        (1, "goal_reached", [True, True]),
        (2, "user_gave_up", [True]),
        (3, "max_turns", [True, False]),  # a failed score fails the trial
        (4, "agent_error", [True]),  # the agent failed: a failed trial whatever the scores
        (5, "goal_reached", []),  # measured nothing: not passed
        (6, "user_model_error", [True]),  # incomplete: not counted
        (7, "budget", []),  # not run: not counted
    ]
    for trial, reason, passed in trials:
        cid = f"c{trial}"
        con.execute(
            "INSERT INTO simulated_conversations (conversation_id, simulation_id, scenario_id, "
            "trial, attempt, status, stop_reason) VALUES (?, 's', 'a', ?, 1, 'finished', ?)",
            [cid, trial, reason],
        )
        for i, ok in enumerate(passed):
            con.execute(
                "INSERT INTO scores (run_id, conversation_id, metric, passed) "
                "VALUES ('r', ?, ?, ?)",
                [cid, f"m{i}", ok],
            )
    # Scores about the simulated user are not the agent's.
    con.execute(
        "INSERT INTO scores (run_id, conversation_id, metric, passed) "
        "VALUES ('r', 'c1', 'simulator.fidelity', false)"
    )
    rows = con.execute(
        "SELECT k, trials, passed, pass_hat_k FROM scenario_pass_k ORDER BY k"
    ).fetchall()
    con.close()
    # C(2, k) / C(5, k): 2/5, 1/10, then 0.
    assert [(k, n, c) for k, n, c, _ in rows] == [(k, 5, 2) for k in range(1, 6)]
    assert [v for *_, v in rows] == pytest.approx([0.4, 0.1, 0.0, 0.0, 0.0])
    assert parse_gate("pass^3=0.8").pass_k == 3
    scoped = parse_gate("refund/pass^2=1")
    assert (scoped.scenario, scoped.pass_k, scoped.min_pass_rate) == ("refund", 2, 1.0)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "sigint"])
def test_a_stopped_simulation_resumes_without_recording_a_trial_twice(
    tmp_path: Path, models: dict[str, ScriptedLLM], stop: signal.Signals
) -> None:
    lake = tmp_path / "lake"
    suite = write_suite(
        tmp_path,
        "name: s\nscenarios:\n"
        + "".join(f"  - {{id: s{i}, user: {{goal: g{i}, opening: hi}}}}\n" for i in range(3)),
    )
    users = ["--user-base-url", models["users"].base_url]
    command = [
        sys.executable, "-m", "spanscore.cli", "simulate", "--lake", str(lake),
        "--suite", str(suite), "--agent", "tests.support.slow_agent:answer",
        "--trials", "6", "--concurrency", "2", "--max-turns", "2", *users,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def finished() -> int:
        try:
            found = query(
                lake, "SELECT count(*) FROM simulated_conversations WHERE status = 'finished'"
            )
        except LakeError:  # not created yet
            return 0
        return int(found[0][0])

    log = (tmp_path / "simulate.log").open("w")
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    try:
        # Polled gently: each look opens the lake, which the simulation is writing.
        wait_for(lambda: finished() >= 2, timeout=300, interval=1.0)
        process.send_signal(stop)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    assert code == (-9 if stop == signal.SIGKILL else 130), (tmp_path / "simulate.log").read_text()
    [(sid, status)] = query(lake, "SELECT simulation_id, status FROM simulations")
    assert status == ("running" if stop == signal.SIGKILL else "interrupted")
    assert finished() < 18  # stopped mid-way

    resumed = subprocess.run(
        [*command, "--resume", sid, "--format", "json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["simulation"]["status"] == "completed"
    counted = query(
        lake,
        "SELECT scenario_id, trial, count(*) FROM simulated_conversations "
        "WHERE simulation_id = ? AND stop_reason IN ('goal_reached', 'user_gave_up', "
        "'max_turns', 'agent_error', 'timeout') GROUP BY ALL",
        [sid],
    )
    # Every trial once: those that ended before the stop are not run again, the others ran
    # as a new attempt in a conversation of their own.
    assert sorted((s, t) for s, t, _ in counted) == [
        (f"s{i}", t) for i in range(3) for t in range(1, 7)
    ]
    assert {n for *_, n in counted} == {1}
    assert query(
        lake,
        "SELECT count(*) FROM simulated_conversations WHERE simulation_id = ? "
        "AND status <> 'finished'",
        [sid],
    ) == [(0,)]
    attempts = query(
        lake, "SELECT max(attempt) FROM simulated_conversations WHERE simulation_id = ?", [sid]
    )
    assert attempts == [(2,)]


def test_importers_carry_the_users_of_native_formats(tmp_path: Path) -> None:
    arksim = load_suite(ROOT / "examples" / "customer_service" / "arksim_scenarios.json")
    user = arksim.suite.scenarios[0].user
    assert user is not None
    assert user.goal == "Find out where order ORD-1001 is."
    assert user.profile is not None
    assert user.profile.startswith("You are Ada Lovelace")
    assert user.knowledge == [
        "Order ORD-1001 (mechanical keyboard, $89) belongs to Ada and has shipped."
    ]
    assert user.agent_context is not None
    watsonx = tmp_path / "story.json"
    watsonx.write_text(
        json.dumps(
            {
                "agent": "hr",
                "story": "You want your time off schedule. Your username is nwaters.",
                "starting_sentence": "I want to know my time off schedule",
                "goals": {"get": []},
                "goal_details": [
                    {
                        "type": "tool_call",
                        "name": "get",
                        "tool_name": "get_schedule",
                        "args": {"username": "nwaters"},
                    }
                ],
            }
        )
    )
    [scenario] = load_suite(watsonx).suite.scenarios
    assert scenario.user is not None
    assert scenario.user.goal.startswith("You want your time off schedule")
    assert scenario.user.opening == "I want to know my time off schedule"
    adk = tmp_path / "plan.evalset.json"
    adk.write_text(
        json.dumps(
            {
                "eval_set_id": "plan",
                "eval_cases": [
                    {
                        "eval_id": "refund",
                        "conversation_scenario": {
                            "starting_prompt": "Hi, I need help with an order.",
                            "conversation_plan": "Ask for a refund of order 42; take credit.",
                        },
                    }
                ],
            }
        )
    )
    [case] = load_suite(adk).suite.scenarios
    assert case.user is not None
    assert case.user.opening == "Hi, I need help with an order."
    assert case.user.goal == "Ask for a refund of order 42; take credit."
    # tau2-bench: the user scenario's structured instructions, field by field.
    tau2 = load_suite(ROOT / "examples" / "tau2" / "retail_tasks.json").suite.scenarios[0].user
    assert tau2 is not None
    assert tau2.goal.startswith("You received order #W1001")
    assert tau2.persona == "Calm, brief, a little impatient."
    assert tau2.knowledge == ["You are Ada Byron, email ada@example.com."]
    assert tau2.unknown == ["You do not know your user id."]
    assert tau2.instructions is not None
    assert tau2.instructions.startswith("Ask how much will be refunded")
    # `spanscore import` writes the users into the suite it prints.
    for fmt, native, expected in [
        ("arksim", ROOT / "examples" / "customer_service" / "arksim_scenarios.json", user),
        ("tau2", ROOT / "examples" / "tau2" / "retail_tasks.json", tau2),
        ("watsonx", watsonx, scenario.user),
        ("adk", adk, case.user),
    ]:
        written = tmp_path / f"{fmt}.yaml"
        imported = CliRunner().invoke(main, ["import", fmt, str(native), "-o", str(written)])
        assert imported.exit_code == 0, imported.output
        assert load_suite(written).suite.scenarios[0].user == expected, fmt


def test_chat_completions_agent_and_an_agent_server_error(tmp_path: Path) -> None:
    def answer(request: LLMRequest) -> Any:
        if "cancel" in request.messages[-1].text.lower():
            raise RuntimeError("the agent's server failed")  # answered as HTTP 500
        return f"Agent heard {len(request.messages)} messages"

    suite = write_suite(
        tmp_path,
        "name: s\nscenarios:\n  - {id: ok, user: {goal: g1, opening: hello}}\n"
        "  - {id: bad, user: {goal: g2, opening: please cancel}}\n",
    )
    with ScriptedLLM(answer) as agent:
        result = simulate(
            tmp_path / "lake",
            "--agent",
            f"{agent.base_url}/chat/completions",
            "--agent-model",
            "gpt-4.1-mini",
            "--user-base-url",
            agent.base_url,  # as users it answers no JSON: the user model fails
            "--user-model",
            "gpt-4.1-mini",
            suite=suite,
        )
    conversations = {c["scenario"]: c for c in document(result)["simulation"]["conversations"]}
    assert conversations["bad"]["stop_reason"] == "agent_error"
    assert "the agent answered HTTP 500" in conversations["bad"]["error"]
    assert conversations["ok"]["turns"] == 1
    turns = query(
        tmp_path / "lake",
        "SELECT agent_reply FROM simulated_turns WHERE conversation_id LIKE '%/ok/t1'",
    )
    assert turns == [("Agent heard 1 messages",)]


def test_an_http_agent_that_hangs_times_out_its_turn(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path, "name: s\nscenarios:\n  - {id: slow, user: {goal: g, opening: hello}}\n"
    )
    with ScriptedLLM(lambda request: "too late", delay_s=5) as agent:
        result = simulate(
            tmp_path / "lake",
            "--agent",
            f"{agent.base_url}/chat/completions",
            "--turn-timeout",
            "0.5",
            "--user-base-url",
            agent.base_url,
            suite=suite,
        )
    [trial] = document(result)["simulation"]["conversations"]
    assert (trial["stop_reason"], trial["turns"]) == ("timeout", 1)
    assert trial["error"] == "the agent did not answer within 0.5 s"
    assert query(tmp_path / "lake", "SELECT agent_reply, error FROM simulated_turns") == [
        (None, "the agent did not answer within 0.5 s")
    ]


def test_the_trials_grid_shows_the_trials_that_did_not_count(tmp_path: Path) -> None:
    from spanscore.evaluation.report.html import trials_html
    from spanscore.evaluation.report.trials import trials_doc

    con = connect(tmp_path / "lake", create=True)
    con.execute("INSERT INTO eval_runs (run_id, simulation_id) VALUES ('r', 's')")
    rows = [
        # (scenario, trial, attempt, status, stop reason)
        ("a", 1, 1, "finished", "user_model_error"),
        ("a", 2, 1, "finished", "goal_reached"),
        ("a", 3, 1, "finished", "budget"),
        ("b", 1, 1, "finished", "interrupted"),
        ("b", 1, 2, "finished", "max_turns"),  # resumed: counted, the first attempt not shown
        ("b", 2, 1, "planned", None),  # killed before it ran
        ("c", 1, 1, "finished", "budget"),  # no trial of it counted
    ]
    for scenario, trial, attempt, status, reason in rows:
        con.execute(
            "INSERT INTO simulated_conversations (conversation_id, simulation_id, scenario_id, "
            "trial, attempt, status, stop_reason) VALUES (?, 's', ?, ?, ?, ?, ?)",
            [f"s/{scenario}/t{trial}/a{attempt}", scenario, trial, attempt, status, reason],
        )
    for cid in ("s/a/t2/a1", "s/b/t1/a2"):
        con.execute(
            "INSERT INTO scores (run_id, conversation_id, metric, passed) "
            "VALUES ('r', ?, 'm', true)",
            [cid],
        )
    doc = trials_doc(con, "r", "s")
    con.close()
    assert doc is not None
    shown = {
        s["scenario"]: (s["trials"], [(c["trial"], c["stop_reason"]) for c in s["not_counted"]])
        for s in doc["scenarios"]
    }
    assert shown == {
        "a": (1, [(1, "user_model_error"), (3, "budget")]),
        "b": (1, [(2, "not_run")]),
        "c": (0, [(1, "budget")]),
    }
    page = trials_html({"trials": doc, "summary": []})  # type: ignore[typeddict-item]
    assert "<th>trial 3</th>" in page  # a column per trial, though one trial counted
    assert "\u2013 budget (not counted)" in page
    assert "\u2713 goal_reached" in page
    assert "\u2013 user_model_error (not counted)" in page


def test_resuming_a_finished_simulation_runs_nothing_and_passes(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    suite = write_suite(
        tmp_path, "name: s\nscenarios:\n  - {id: fine, user: {goal: g, opening: hello}}\n"
    )
    args = ["--agent", f"{AGENT}:async_echo", "--user-base-url", models["users"].base_url]
    first = simulate(tmp_path / "lake", *args, suite=suite)
    assert first.exit_code == 0, first.output
    sid = document(first)["simulation"]["simulation_id"]
    again = simulate(tmp_path / "lake", *args, "--resume", sid, suite=suite)
    assert again.exit_code == 0, again.output
    assert document(again)["simulation"]["trials"] == 0
    assert "nothing to resume" in " ".join(document(again)["simulation"]["warnings"])
    trials = query(tmp_path / "lake", "SELECT count(*), max(status) FROM simulated_conversations")
    assert trials == [(1, "finished")]  # not run again
    assert query(tmp_path / "lake", "SELECT status FROM simulations") == [("completed",)]


def test_arksim_s_own_starter_agent_file_runs_unchanged(
    tmp_path: Path, models: dict[str, ScriptedLLM]
) -> None:
    import importlib.resources

    starter = importlib.resources.files("arksim") / "templates" / "my_agent.py"  # `arksim init`
    suite = write_suite(
        tmp_path, "name: s\nscenarios:\n  - {id: hello, user: {goal: g, opening: hello}}\n"
    )
    result = simulate(
        tmp_path / "lake",
        "--agent",
        str(starter),  # the file: its one BaseAgent subclass
        "--user-base-url",
        models["users"].base_url,  # knows no goal here: gives up after the opening
        suite=suite,
    )
    assert result.exit_code == 0, result.output
    [trial] = document(result)["simulation"]["conversations"]
    assert (trial["stop_reason"], trial["turns"]) == ("user_gave_up", 1)
    replies = query(tmp_path / "lake", "SELECT agent_reply FROM simulated_turns")
    assert replies == [("You said: hello",)]


@pytest.mark.parametrize(
    "narrowing",
    [["--sample", "0.5"], ["--max-conversations", "3"], ["--scenario", "refund"],
     ["--service", "shop"], ["--agent", "helper"]],
    ids=lambda n: n[0],
)  # fmt: skip
def test_a_simulation_is_scored_whole_or_not_at_all(tmp_path: Path, narrowing: list[str]) -> None:
    """A trial left unscored counts as failed in pass^k: narrowing a simulation's run would
    fail the trials it left out. Refused, naming the option, before anything runs."""
    lake = tmp_path / "lake"
    con = connect(lake, create=True)
    con.execute("INSERT INTO simulations (simulation_id, suite_name) VALUES ('s', 'x')")
    con.close()
    suite = write_suite(tmp_path, "name: x\nscenarios:\n  - {id: refund, user: {goal: g}}\n")
    result = CliRunner().invoke(
        main,
        ["evaluate", "--lake", str(lake), "--suite", str(suite), "--simulation", "s", *narrowing],
    )
    assert result.exit_code == 2, result.output
    assert f"{narrowing[0]} cannot narrow a simulation's run" in result.stderr
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(0,)]
