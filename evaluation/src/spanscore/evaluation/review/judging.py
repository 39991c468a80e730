"""What the judge was asked about a conversation, and what it answered.

The answer is in the score (its `details`: the judge's verdict and usage). The question is not
stored: it is rebuilt exactly as the run built it, from the run's suite file (recorded in the
run) and the conversation's trajectory, without asking the judge anything. When the file is
gone, or changed since the run, the result says so.
"""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from spanscore.evaluation.calibration.judge_check import JudgeCheckError, judged_metric_position
from spanscore.evaluation.review.labels import NotInLake
from spanscore.evaluation.runs import store
from spanscore.evaluation.suites.load import SuiteError, load_suite
from spanscore.evaluation.trajectory.load import load_trajectory
from spanscore.lake import ALIAS


def judge_exchange(
    con: duckdb.DuckDBPyConnection, run_id: str, conversation_id: str, metric: str
) -> dict[str, Any]:
    """The judge's prompt (its messages) and answer for the run's score of `metric`."""
    run = store.run_row(con, run_id)
    if run is None:
        raise NotInLake(f"no evaluation run {run_id!r} in this lake")
    score = con.execute(
        f"SELECT details, explanation FROM {ALIAS}.scores "
        "WHERE run_id = ? AND conversation_id = ? AND metric = ? LIMIT 1",
        [run_id, conversation_id, metric],
    ).fetchone()
    if score is None:
        raise NotInLake(f"run {run_id!r} has no score {metric!r} for {conversation_id!r}")
    details = orjson.loads(score[0]) if score[0] else {}
    result: dict[str, Any] = {
        "run_id": run_id,
        "conversation_id": conversation_id,
        "metric": metric,
        "answer": details.get("verdict"),
        "usage": details.get("judge"),
        "explanation": score[1],
        "messages": None,
        "note": None,
    }
    suite_path = run.facts.get("suite_path")
    if not isinstance(suite_path, str):
        result["note"] = "the run did not record its suite file: its prompt cannot be rebuilt"
        return result
    try:
        suite = load_suite(suite_path)
        scenario_id, position = judged_metric_position(suite, metric)
    except (SuiteError, JudgeCheckError, OSError) as exc:
        result["note"] = f"the prompt cannot be rebuilt from {suite_path}: {exc}"
        return result
    trajectory = load_trajectory(con, conversation_id, attributes=suite.attribute_keys())
    if trajectory is None:
        result["note"] = "the conversation's spans are no longer in the lake"
        return result
    _, _, requests = suite.evaluate_items(trajectory, [(scenario_id, position)], {})
    result["messages"] = [
        {"role": role, "content": content}
        for request in requests.values()
        for role, content in request.messages
    ]
    if suite.content_hash != run.suite_hash:
        result["note"] = (
            f"{suite_path} changed since the run: the prompt is rebuilt from today's file"
        )
    return result
