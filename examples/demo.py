"""The demo: the whole product on a fresh machine, no API key.

1. a collector on an embedded lake;
2. the example customer-service agent (a plain `openai` tool loop, instrumented with
   `spanscore.instrumentation`) talking to a local deterministic OpenAI-compatible server, over
   the seven scenarios, some conversations breaking policy on purpose; its spans go over OTLP;
   then, before deployment, simulated users (a local scripted user model) drive the same agent
   over the scenarios, two trials each (`spanscore simulate`);
3. an evaluation run with the example suite over production traffic: deterministic assertions,
   and ArkSim's four custom metrics as LLM-judged rubrics answered by a local scripted judge
   (`judge_policy`); the summary, the judge's calls and cost, and the gates;
4. the same suite judging the simulation: per scenario, its trials and pass^k;
5. SQL over the spans and the scores.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUITE = Path(__file__).parent / "customer_service" / "suite.yaml"

DEMO_QUERIES = [
    (
        "Conversations",
        """SELECT conversation_id, span_count, tool_call_count AS tools, error_count AS errors,
                  first_user_message
           FROM conversations ORDER BY start_time""",
    ),
    (
        "Tool calls by tool",
        """SELECT tool_name, count(*) AS calls, count(error) AS errors,
                  round(avg(latency_ms), 3) AS avg_ms
           FROM tool_calls GROUP BY tool_name ORDER BY calls DESC, tool_name""",
    ),
    (
        "Failed scores of the run, with why (SQL over the scores table)",
        """SELECT s.conversation_id, coalesce(s.scenario_id, '(all)') AS scenario, s.metric,
                  coalesce(s.label, CAST(round(s.value, 2) AS VARCHAR)) AS score,
                  s.explanation
           FROM scores s JOIN eval_runs r USING (run_id)
           WHERE r.run_id = (SELECT max_by(run_id, started_at) FROM eval_runs)
             AND NOT s.passed
           ORDER BY s.conversation_id, scenario, s.metric""",
    ),
]


def _reset(lake: Path) -> None:
    if not lake.exists():
        return
    if not (lake / "catalog.sqlite").exists() and any(lake.iterdir()):
        raise RuntimeError(f"{lake} exists and is not a spanscore lake; pass another --lake")
    shutil.rmtree(lake)


def run_demo(lake: Path, echo: Callable[[str], object] = print, command: str = "spanscore") -> None:
    """The demo, printed through `echo`; `command` is how the reader types `spanscore` (the
    commands shown are printed so that they run as printed)."""
    import io

    import openai
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    import spanscore.instrumentation
    from spanscore import lake as lakes
    from spanscore.cli.query import write_rows
    from spanscore.cli.summaries import print_summary
    from spanscore.collector import Collector, load_config
    from spanscore.evaluation import load_suite
    from spanscore.evaluation.report import write_report
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate

    from .customer_service import Store
    from .customer_service.openai_loop import run_conversation
    from .customer_service.scripted import conversations
    from .judge_policy import ScriptedJudge
    from .llm_server import ScriptedLLM, ScriptedPolicy

    started = time.monotonic()
    _reset(lake)
    # The commands shown name the lake by its absolute path: they run from any folder.
    shown = shlex.quote(str(lake.absolute()))
    config = load_config(
        overrides={"lake": str(lake), "grpc_port": 0, "http_port": 0, "maintenance_interval_s": 0}
    )
    echo(f"1. Collector on an embedded lake at {lake}/")
    with Collector(config) as collector:
        ports = f"OTLP/gRPC 127.0.0.1:{collector.grpc_port}, OTLP/HTTP :{collector.http_port}"
        echo("   " + ports)
        plans = conversations()
        provider = TracerProvider(resource=Resource.create({"service.name": "customer-service"}))
        spanscore.instrumentation.instrument(
            tracer_provider=provider,
            endpoint=f"http://127.0.0.1:{collector.http_port}",
            protocol="http/protobuf",
        )
        suite = load_suite(SUITE)
        try:
            with ScriptedLLM(ScriptedPolicy()) as llm:
                echo(
                    f"2. The example customer-service agent (openai client + tools, instrumented)"
                    f" talks to a local OpenAI-compatible model at {llm.base_url}"
                )
                client = openai.OpenAI(base_url=llm.base_url, api_key="demo", max_retries=0)
                for plan in plans:
                    run_conversation(client, Store(), plan)
                    flag = "  (breaks policy: " + plan.note + ")" if plan.breaks_policy else ""
                    echo(f"   {plan.conversation_id:<22} {plan.scenario_id}{flag}")
                simulation = _simulate(lake, suite, client, echo, command, shown)
        finally:
            spanscore.instrumentation.uninstrument()  # flushes the spans
            provider.shutdown()
        stored = collector.stats.get("spans_stored")
        echo(f"   {stored} spans exported over OTLP/HTTP and committed to the lake")
        with ScriptedLLM(ScriptedJudge()) as judge:
            echo(
                f"\n3. Evaluate: {command} evaluate --lake {shown} --suite {SUITE} --settle 0 "
                f"--judge-base-url {judge.base_url}"
            )
            echo(
                "   (the judged rubrics are answered by a local scripted judge, running during "
                "the demo only: no API key)"
            )
            options = RunOptions(settle_s=0, judge={"base_url": judge.base_url})
            result = evaluate(lake, suite, options)
            print_summary(result, echo=lambda line: echo("   " + line))
            if not result.passed:
                echo(
                    "   (the agent breaks policy on purpose: a failed gate makes `evaluate` exit 1)"
                )
            echo(
                f"\n4. Before deployment, the same suite judges the simulation: {command} "
                f"evaluate --lake {shown} --suite {SUITE} --simulation {simulation} "
                f"--judge-base-url {judge.base_url}"
            )
            simulated = evaluate(
                lake,
                suite,
                RunOptions(simulation=simulation, settle_s=0, judge={"base_url": judge.base_url}),
            )
        print_summary(simulated, echo=lambda line: echo("   " + line))
    con = lakes.connect(lake)
    try:
        for n, (title, sql) in enumerate(DEMO_QUERIES, start=5):
            echo(f"\n{n}. {title}")
            echo(f"   $ {command} sql --lake {shown} " + '"' + " ".join(sql.split()) + '"')
            rows = list(lakes.query(con, sql))
            out = io.StringIO()
            names = list(rows[0]) if rows else [d[0] for d in (con.description or [])]
            write_rows(iter(rows), names, "table", out)
            echo("   " + out.getvalue().rstrip("\n").replace("\n", "\n   "))
    finally:
        con.close()
    report = write_report(lake, lake.absolute() / "report.html", result.run_id).path
    echo(f"\n{len(DEMO_QUERIES) + 5}. The run's report (open it in a browser): {report}")
    echo(
        f"\nDone in {time.monotonic() - started:.1f}s. The lake stays at {lake}/ for your own SQL."
    )
    echo("\nNext, try:")
    for line, why in next_commands(shown, command):
        echo(f"  $ {line}\n      {why}")
    echo(
        "\nThen review what failed in your browser: runs, conversations, review queues, labels "
        f"and the judge against them (docs/review.md):\n  $ {command} ui --lake {shown}\n"
        "      then open the URL it prints (http://127.0.0.1:8765/); Ctrl-C stops it"
    )


def _simulate(
    lake: Path,
    suite: Any,
    client: Any,
    echo: Callable[[str], object],
    command: str,
    shown: str,
) -> str:
    """Simulated users (played by a local scripted model) drive the same agent over the
    scenarios, two trials each; returns the simulation id."""
    from spanscore.evaluation.simulation.simulate import SimulationOptions, simulate
    from spanscore.evaluation.simulation.targets import CallableTarget

    from .customer_service.openai_loop import simulated_agent
    from .llm_server import ScriptedLLM
    from .user_policy import ScriptedUsers

    goals = {s.id: s.user.goal for s in suite.suite.scenarios if s.user is not None}
    with ScriptedLLM(ScriptedUsers(goals)) as users:
        echo(
            f"\n   Before deployment: simulated users (a local scripted user model at "
            f"{users.base_url}) drive the same agent, 2 trials per scenario:"
        )
        echo(
            # What runs here, whole (the agent's model is named by the variables its OpenAI
            # client reads); both local models live as long as the demo does.
            f"   as OPENAI_BASE_URL={client.base_url} OPENAI_API_KEY=demo {command} simulate "
            f"--lake {shown} --suite {SUITE} --trials 2 "
            "--agent spanscore.examples.customer_service.openai_loop:agent_turn "
            f"--user-base-url {users.base_url} (the two local models live as long as the demo)"
        )
        target = CallableTarget(simulated_agent(client), "the customer-service agent")
        options = SimulationOptions(
            trials=2, concurrency=4, user_model={"base_url": users.base_url}
        )
        result = simulate(str(lake), suite, target, options)
    reasons = ", ".join(f"{k} {v}" for k, v in result.by_reason().items())
    echo(
        f"   simulation {result.simulation_id}: {len(result.outcomes)} conversations ({reasons}),"
        f" {result.user.get('calls', 0)} user-model calls"
    )
    return result.simulation_id


def next_commands(lake: Path | str, command: str = "spanscore") -> list[tuple[str, str]]:
    """Three commands to type after the demo, each working as printed (a test runs them)."""
    return [
        (
            f"{command} show cs-cancel-2 --lake {lake}",
            "the conversation that broke the policy, turn by turn, as rebuilt from its spans",
        ),
        (
            f'{command} sql --lake {lake} "SELECT tool_name, arguments, error FROM tool_calls '
            "WHERE conversation_id = 'cs-missing-order-1'\"",
            "any SQL over the spans, the tool_calls and conversations views, and the scores",
        ),
        (
            f"{command} report latest --lake {lake} -o {lake}/report.html",
            "the run's report again (or --baseline RUN to compare with another run)",
        ),
    ]
