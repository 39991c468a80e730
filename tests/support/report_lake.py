"""A real evaluated lake for the report tests: the example customer-service agent (openai
client, instrumented) talks to the local scripted model over HTTP, its spans go over OTLP to a
real collector, and the example suite scores them twice, its judged rubrics answered by the
local scripted judge (two versions of the suite, so that the second run has conversations that
regressed and ones that were fixed; the second finds the judge's answers in the lake's cache).

One extra conversation plants markup where the lake's strings show up in the report: in a tool
result (a product name) and in the user's message; it ends with a hand-off to another agent.
"""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .example_lake import recording, run_plans

PLANTED = (
    '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    '</textarea><a href="javascript:window.__pwned = 5">deal</a>'
)
PLANTED_MESSAGE = (
    "I'm alan@example.com, any <b>laptop stand</b> deals? "
    "</script><script>window.__pwned = 3</script>"
    '</textarea><a href="javascript:window.__pwned = 4">see</a>'
)
AGENT = "customer-service"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "customer_service"


@dataclass
class EvaluatedLake:
    lake: Path
    baseline_run: str
    run: str


def _plans() -> list[Any]:
    from spanscore.examples.customer_service.scripted import Conversation, Turn, conversations

    alan = "alan@example.com"
    planted = Conversation(
        "cs-planted-1",
        "auth_product_search",
        [
            Turn(
                PLANTED_MESSAGE,
                [
                    [("send_verification_code", {"email": alan})],
                    [("verify_customer", {"email": alan, "code": "{code}"})],
                    [("search_products", {"query": "laptop stand"})],
                ],
                "Two laptop stands are in stock.",
            )
        ],
        user_id="C-102",
    )
    return [*conversations(), planted]


def _store() -> Any:
    from spanscore.examples.customer_service import Store

    store = Store()
    store.db.execute(
        "INSERT INTO products VALUES (?, ?, ?, ?)", ("SKU-666", PLANTED + " laptop stand", 45, 3)
    )
    return store


def _suites(directory: Path) -> tuple[Path, Path]:
    """The example suite as it is, and an earlier version of it: lenient where the current
    one catches cs-budget-search-2 (a regression), strict where cs-order-status-1 now passes
    (a fix)."""
    directory.mkdir(parents=True, exist_ok=True)
    for extra in EXAMPLE.glob("*.py"):  # custom metrics, if the suite names any
        shutil.copy(extra, directory / extra.name)
    current = yaml.safe_load((EXAMPLE / "suite.yaml").read_text())
    earlier = yaml.safe_load((EXAMPLE / "suite.yaml").read_text())
    for scenario in earlier["scenarios"]:
        if scenario["id"] == "product_search_with_budget":
            scenario["assertions"] = [
                {"type": "tool_calls", "mode": "contains", "expected": ["search_products"]}
            ]
        if scenario["id"] == "order_status_check":
            for assertion in scenario["assertions"]:
                if assertion["type"] == "response":
                    assertion["keywords"] = ["delivered"]
    paths = directory / "suite-earlier.yaml", directory / "suite.yaml"
    paths[0].write_text(yaml.safe_dump(earlier, sort_keys=False))
    paths[1].write_text(yaml.safe_dump(current, sort_keys=False))
    return paths


def build_evaluated_lake(directory: Path) -> EvaluatedLake:
    import spanscore.instrumentation
    from spanscore.evaluation import load_suite
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate
    from spanscore.examples.judge_policy import ScriptedJudge
    from spanscore.examples.llm_server import ScriptedLLM

    lake = directory / "lake"
    plans = _plans()
    with recording(lake) as provider:
        run_plans(plans, _store)
        # The planted conversation ends handing over to another agent.
        with spanscore.instrumentation.conversation("cs-planted-1"):
            tracer = provider.get_tracer("tests.report")
            attributes = {"gen_ai.operation.name": "handoff", "gen_ai.agent.name": AGENT}
            with tracer.start_as_current_span("handoff billing", attributes=attributes):
                pass
    earlier, current = _suites(directory / "suites")
    since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    # The suite's judged rubrics are answered by the local scripted judge, over HTTP.
    with ScriptedLLM(ScriptedJudge()) as judge:
        options = RunOptions(settle_s=0, workers=1, since=since, judge={"base_url": judge.base_url})
        first = evaluate(lake, load_suite(earlier), options)
        second = evaluate(lake, load_suite(current), options)
    assert first.scored == second.scored == len(plans), (first, second)
    return EvaluatedLake(lake, first.run_id, second.run_id)
