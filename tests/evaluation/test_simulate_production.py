"""A simulation looks like production: the agent's own set-up, the user model that played the
users, the lake's running collector, and what `simulate` and `show` say about it.

Real parts: `spanscore simulate` (in a process of its own where the process matters), the
collector and the lake, the agent of `tests.support.rate_agent` with its own `instrument()`,
its model and the users' model on the local OpenAI-compatible server, and the key-free user
model as documented (`python -m spanscore.examples.llm_server --users N`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.evaluation.trajectory.load import load_trajectory
from spanscore.examples.llm_server import LLMRequest, Reply, ScriptedLLM
from spanscore.examples.user_policy import ScenarioUsers
from spanscore.lake import LakeLocation, connect, single_writer

from ..support.collector import start_collector
from ..support.evaluation_runs import write_suite
from ..support.lake import query

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.support.rate_agent:answer"

RATES_SUITE = """\
name: rates
policies:
  - id: looks_the_rate_up
    select: {service: rate-agent}
    assertions:
      - {type: tool_calls, mode: contains, expected: [get_rate]}
metrics:
  - {type: tool_errors, missing_result_is_error: false}
scenarios:
  - {id: eur, user: {goal: Learn the EUR rate., opening: "What is the EUR rate?"}}
  - {id: xxx, user: {goal: Learn the XXX rate., opening: "What is the XXX rate?"}}
"""

# The user names the currency only in the second message: the goal comes first.
ASKS_SUITE = """\
name: asks
scenarios:
  - id: gbp
    user:
      goal: Ask for the exchange rate of your currency.
      knowledge: [My currency is GBP.]
    assertions:
      - type: tool_calls
        mode: strict
        expected: [{name: get_rate, arguments: {currency: GBP}}]
"""


def rate_model(request: LLMRequest) -> Reply:
    """The rate agent's model: asks for the rate of the currency the user names, says what the
    tool answered, or asks which currency."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"The rate service says: {last.text}"
    named = re.search(r"\b[A-Z]{3}\b", last.text)
    if named is None:
        return "Which currency?"
    return [("get_rate", {"currency": named.group(0)})]


@pytest.fixture(scope="module")
def agent_model() -> Iterator[str]:
    """The rate agent's model; its URL is where the agent (here or in a child) finds it."""
    with ScriptedLLM(rate_model) as model, pytest.MonkeyPatch.context() as env:
        env.setenv("RATE_AGENT_MODEL_URL", model.base_url)
        yield model.base_url


def simulate(lake: Path, suite: Path, *args: str) -> Any:
    return CliRunner().invoke(
        main,
        ["simulate", "--lake", str(lake), "--suite", str(suite), "--format", "json", *args],
        catch_exceptions=False,
    )


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Any:
    """A child process in the repository, as a user runs one, with the tests importable."""
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def comparable(trajectory: Any) -> dict[str, Any]:
    """A trajectory without what tells one recording from another: ids, times and the
    simulation's marks."""
    document = json.loads(trajectory.model_dump_json())
    document["attributes"] = {
        k: v
        for k, v in document["attributes"].items()
        if k != "scenario.id" and not k.startswith("simulation.")
    }

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in IDS_AND_TIMES}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return dict(strip(document))


IDS_AND_TIMES = {"conversation_id", "span_id", "trace_id", "start_time", "end_time", "latency_ms"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_simulated_conversation_is_recorded_as_production_records_it(
    tmp_path: Path, agent_model: str
) -> None:
    lake = tmp_path / "lake"
    suite = write_suite(tmp_path, RATES_SUITE)
    # Production: the agent's module imported by its own server loop, its spans to the
    # collector the standard OTLP variables name.
    collector = start_collector(lake)
    try:
        production = run(
            "-c",
            "import tests.support.rate_agent as agent; agent.serve()",
            stdin="prod-eur\tWhat is the EUR rate?\nprod-xxx\tWhat is the XXX rate?\n",
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}"},
        )
    finally:
        collector.stop()
    assert production.returncode == 0, production.stderr
    # Simulated: the same module, named by its file, with the same first messages.
    with ScriptedLLM(ScenarioUsers(2)) as users:
        simulated = run(
            "-m", "spanscore.cli", "simulate", "--lake", str(lake), "--suite", str(suite),
            "--agent", "tests/support/rate_agent.py:answer", "--user-base-url", users.base_url,
            "--format", "json",
        )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    sid = json.loads(simulated.stdout)["simulation"]["simulation_id"]
    pairs = {"eur": ("prod-eur", f"{sid}/eur/t1"), "xxx": ("prod-xxx", f"{sid}/xxx/t1")}

    con = connect(lake)
    try:
        for name, (real, simulation) in pairs.items():
            recorded = load_trajectory(con, real)
            replayed = load_trajectory(con, simulation)
            assert recorded is not None, name
            assert replayed is not None, name
            assert comparable(replayed) == comparable(recorded), name
            resources = con.execute(
                "SELECT DISTINCT conversation_id, resource FROM spans "
                "WHERE conversation_id IN (?, ?)",
                [real, simulation],
            ).fetchall()
            assert {r for _, r in resources} == {
                '{"service.name":"rate-agent","service.version":"1.4.0"}'
            }, resources
        # The agent's own exception type, named after its module as production names it.
        [(error,)] = con.execute(
            "SELECT DISTINCT error FROM tool_calls WHERE conversation_id = ?", [pairs["xxx"][1]]
        ).fetchall()
        assert error == "tests.support.rate_agent.RateServiceError"
    finally:
        con.close()

    # The same suite scores both alike, its policy selecting the service.
    def scores(args: list[str]) -> set[tuple[Any, ...]]:
        result = CliRunner().invoke(
            main,
            ["evaluate", "--lake", str(lake), "--suite", str(suite), "--format", "json", *args],
        )
        assert result.exit_code in (0, 1), result.output
        rows = query(
            lake,
            "SELECT conversation_id, scenario_id, metric, value, passed FROM scores "
            "WHERE run_id = ?",
            [json.loads(result.stdout)["run_id"]],
        )
        names = {cid: name for name, pair in pairs.items() for cid in pair}
        return {(names[c], *score) for c, *score in rows}

    nightly = scores(["--settle", "0"])
    selected = {
        (name, scenario) for name, scenario, metric, *_ in nightly if metric == "tool_calls"
    }
    assert selected == {("eur", "looks_the_rate_up"), ("xxx", "looks_the_rate_up")}
    assert scores(["--simulation", sid]) == nightly


def test_the_user_model_s_turns_are_replayed_only_for_its_endpoint_and_model(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    suite = write_suite(tmp_path, ASKS_SUITE)
    collector = start_collector(lake)
    try:
        agent = ["--agent", "tests.support.simulated_agents:async_echo"]
        agent += ["--endpoint", f"http://127.0.0.1:{collector.http_port}"]

        def user_model(*args: str) -> dict[str, Any]:
            result = simulate(lake, suite, *agent, *args)
            assert result.exit_code == 0, result.output
            return dict(json.loads(result.stdout)["simulation"]["user_model"])

        with ScriptedLLM(ScenarioUsers(2)) as first, ScriptedLLM(ScenarioUsers(2)) as other:
            asked = user_model("--user-base-url", first.base_url)
            assert (asked["calls"], asked["cache_hits"]) == (3, 0)
            replayed = user_model("--user-base-url", first.base_url)
            assert (replayed["calls"], replayed["cache_hits"]) == (0, 3)
            # Another server on the same host, or another model: asked again, not replayed.
            elsewhere = user_model("--user-base-url", other.base_url)
            assert (elsewhere["calls"], elsewhere["cache_hits"]) == (3, 0)
            another = user_model("--user-base-url", first.base_url, "--user-model", "gpt-4o")
            assert (another["calls"], another["cache_hits"]) == (3, 0)
        # Its server gone, the user model is refused, though the cache has every turn.
        gone = simulate(lake, suite, *agent, "--user-base-url", first.base_url)
    finally:
        collector.stop()
    assert gone.exit_code == 2, gone.output
    assert f"the user model at {first.base_url} is unreachable" in gone.stderr
    assert query(lake, "SELECT count(*) FROM simulations") == [(4,)]


@pytest.fixture(scope="module")
def scripted_users() -> Iterator[str]:
    """The key-free user model as docs/simulation.md runs it, two messages at most."""
    process = subprocess.Popen(
        [sys.executable, "-m", "spanscore.examples.llm_server", "--users", "2", "--port", "0",
         "--quiet"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()  # "Scripted OpenAI-compatible API on URL (...)"
        assert " on http://" in banner, banner
        yield banner.split(" on ", 1)[1].split()[0]
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.fixture(scope="module")
def asked_gbp(
    tmp_path_factory: pytest.TempPathFactory, scripted_users: str, agent_model: str
) -> tuple[Path, Any]:
    """A simulation of the rate agent by the scripted user model, scored: (lake, result)."""
    directory = tmp_path_factory.mktemp("asks")
    lake = directory / "lake"
    suite = write_suite(directory, ASKS_SUITE)
    result = simulate(
        lake, suite, "--agent", AGENT, "--user-base-url", scripted_users, "--evaluate"
    )
    return lake, result


def test_the_scripted_user_model_says_its_goal_then_what_it_knows(
    asked_gbp: tuple[Path, Any],
) -> None:
    lake, result = asked_gbp
    assert result.exit_code == 0, result.output
    said = query(lake, "SELECT user_message, agent_reply FROM simulated_turns ORDER BY turn_index")
    assert said == [
        ("Ask for the exchange rate of your currency.", "Which currency?"),
        ("My currency is GBP.", 'The rate service says: {"currency": "GBP", "rate": 1.27}'),
    ]
    # So an agent that does what it is asked passes.
    [scenario] = json.loads(result.stdout)["evaluation"]["trials"]["scenarios"]
    assert (scenario["scenario"], scenario["pass_hat_k"]) == ("gbp", {"1": 1.0})


def test_show_json_of_a_simulated_conversation_is_its_trajectory_and_the_simulation(
    asked_gbp: tuple[Path, Any],
) -> None:
    lake, result = asked_gbp
    [trial] = json.loads(result.stdout)["simulation"]["conversations"]
    shown = CliRunner().invoke(
        main, ["show", trial["conversation_id"], "--lake", str(lake), "--json"]
    )
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["conversation_id"] == trial["conversation_id"]
    assert [t["user_message"] for t in document["turns"]] == [
        "Ask for the exchange rate of your currency.",
        "My currency is GBP.",
    ]
    simulation = document["simulation"]
    assert (simulation["scenario_id"], simulation["stop_reason"]) == ("gbp", "goal_reached")
    assert [t["user_message"] for t in simulation["turns"]] == [
        "Ask for the exchange rate of your currency.",
        "My currency is GBP.",
    ]


def test_a_simulation_sends_to_the_collector_running_on_its_lake(
    tmp_path: Path, agent_model: str
) -> None:
    lake = tmp_path / "lake"
    suite = write_suite(tmp_path, RATES_SUITE)
    collector = start_collector(lake)
    with ScriptedLLM(ScenarioUsers(2)) as users:
        try:
            result = simulate(
                lake, suite, "--agent", AGENT, "--scenario", "eur", "--user-base-url",
                users.base_url,
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            url = f"http://127.0.0.1:{collector.http_port}"
            assert f"is already running on the lake: the agent's spans go to it, at {url}" in (
                result.stderr
            )
            sid = json.loads(result.stdout)["simulation"]["simulation_id"]
            spans = query(
                lake, "SELECT count(*) FROM spans WHERE conversation_id = ?", [f"{sid}/eur/t1"]
            )
            assert spans[0][0] > 0
        finally:
            collector.stop()
        # A holder that does not say where it listens: the way out is --endpoint, said.
        held = tmp_path / "held"
        with single_writer(LakeLocation.parse(str(held))):
            refused = simulate(held, suite, "--agent", AGENT, "--user-base-url", users.base_url)
    assert refused.exit_code == 2, refused.output
    assert f"a collector (pid {os.getpid()}) is already running on the lake {held}" in (
        refused.stderr
    )
    assert "pass --endpoint with its OTLP/HTTP URL" in refused.stderr
