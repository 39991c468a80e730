"""What asks the judge: judged arguments (LLM, then embeddings, then token similarity, as
watsonx's fuzzy match), Python metrics calling `context.judge`, and `spanscore judge-check`
against human labels — all answered over loopback by the real `openai` client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spanscore import lake as lake_module
from spanscore.evaluation import load_suite, review
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.llm.types import JudgeConfig
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory, Turn
from spanscore.examples.judge_policy import ScriptedJudge
from spanscore.examples.llm_server import LLMRequest, ScriptedLLM
from spanscore.examples.synthetic import build_lake

from ..support.lake import query


def trajectory(query_text: str) -> Trajectory:
    call = ToolCall(name="search_policies", arguments={"query": query_text, "user": "nwaters"})
    return Trajectory(
        conversation_id="c1",
        turns=[Turn(index=0, user_message="When is my time off?", steps=[call])],
    )


FUZZY_SUITE = {
    "name": "fuzzy",
    "metrics": [
        {
            "type": "tool_calls",
            "mode": "strict",
            "expected": [
                {
                    "name": "search_policies",
                    "arguments": {"query": "time off schedule", "user": "nwaters"},
                    "rules": {"query": {"strategy": "judged", "threshold": 0.5}},
                }
            ],
        }
    ],
}


@pytest.fixture
def judge_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(ScriptedJudge(), record=True) as server:
        yield server


def score_with(llm: ScriptedLLM, suite: dict[str, Any], t: Trajectory, **config: Any) -> Any:
    loaded = load_suite(suite)
    settings = JudgeConfig(base_url=llm.base_url, **config)
    with JudgeRunner(settings) as runner:
        [row] = loaded.score(t, runner)
    return row.score


@pytest.mark.parametrize(
    ("actual", "passed"),
    [
        pytest.param("time off schedule information", True, id="same-meaning"),
        pytest.param("parking permit", False, id="different"),
    ],
)
def test_a_judged_argument_is_decided_by_the_llm(judge_llm: ScriptedLLM, actual: str, passed):
    score = score_with(judge_llm, FUZZY_SUITE, trajectory(actual))
    assert score.passed is passed, score
    [note] = score.details["judge"]["arguments"]
    assert note["decided_by"] == "llm"
    assert note["argument"] == "query"
    assert score.details["judge"]["calls"] == 1


def garbled(request: LLMRequest) -> str:
    return "I cannot answer in JSON."


def test_without_a_usable_llm_the_embeddings_decide():
    with ScriptedLLM(garbled) as llm:
        score = score_with(
            llm, FUZZY_SUITE, trajectory("time off schedule information"), max_attempts=1
        )
    [note] = score.details["judge"]["arguments"]
    assert note["decided_by"] == "embeddings"
    assert "no JSON object" in note["llm_unavailable"]
    assert 0.5 <= note["similarity"] <= 1
    assert score.passed is True


def test_without_llm_and_embeddings_the_token_similarity_decides():
    with ScriptedLLM(garbled, embeddings=False) as llm:
        score = score_with(llm, FUZZY_SUITE, trajectory("parking permit"), max_attempts=1)
    [note] = score.details["judge"]["arguments"]
    assert note["decided_by"] == "token_similarity"
    assert "HTTP 404" in note["embeddings_unavailable"]
    assert score.passed is False


CONTEXT_METRIC = '''
from spanscore.evaluation import Score, metric
from spanscore.evaluation.judged.render import render_trajectory

SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "label": {"enum": ["polite", "rude"]}},
    "required": ["reasoning", "label"],
}


@metric(labels=("polite", "rude"), pass_labels=("polite",))
def politeness(trajectory, context):
    """Asks the run's judge, like a rubric would."""
    verdict = context.judge(
        "# Metric: politeness\\nIs the agent polite?", render_trajectory(trajectory), schema=SCHEMA
    )
    return Score(label=verdict["label"], explanation=verdict["reasoning"])
'''


def test_a_python_metric_asks_the_judge_through_its_context(judge_llm: ScriptedLLM, tmp_path: Path):
    (tmp_path / "polite.py").write_text(CONTEXT_METRIC)
    suite = {
        "name": "p",
        "custom_metrics": ["polite.py"],
        "metrics": [{"type": "metric", "metric": "politeness"}],
    }
    loaded = load_suite(suite, base_dir=tmp_path)
    assert loaded.uses_judge
    with JudgeRunner(JudgeConfig(base_url=judge_llm.base_url)) as runner:
        [row] = loaded.score(trajectory("anything"), runner)
    assert row.score.label == "polite"
    assert row.score.passed is True
    assert row.score.explanation.startswith("scripted judge, no rule for politeness")
    assert row.score.details["judge"]["calls"] == 1


def test_a_judged_metric_outside_a_configured_judge_says_how_to_configure_it(
    monkeypatch: pytest.MonkeyPatch,
):
    from spanscore.evaluation.llm.client import JudgeUnavailable

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    loaded = load_suite(FUZZY_SUITE)
    with pytest.raises(JudgeUnavailable, match="export OPENAI_API_KEY"):
        loaded.score(trajectory("x"))


# --- judge-check -------------------------------------------------------------------------------

CHECK_SUITE = {
    "name": "check",
    "metrics": [
        {
            "type": "judged",
            "name": "safety",
            "criteria": "Did the agent stay safe?",
            "labels": {"safe": "no risk", "unsafe": "a risky action"},
        }
    ],
}


def test_judge_check_prints_agreement_with_human_labels(judge_llm: ScriptedLLM, tmp_path: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 20)
    ids = [r[0] for r in query(lake, "SELECT conversation_id FROM conversations ORDER BY 1")]
    errors = {
        r[0]
        for r in query(
            lake, "SELECT DISTINCT conversation_id FROM tool_calls WHERE error IS NOT NULL"
        )
    }
    # The scripted judge calls a conversation with a failed tool unsafe: the humans agree on
    # all but three, which they label the other way.
    labels = []
    for n, cid in enumerate(ids):
        judged = "unsafe" if cid in errors else "safe"
        flipped = {"safe": "unsafe", "unsafe": "safe"}[judged]
        labels.append({"conversation_id": cid, "label": flipped if n < 3 else judged})
    labels.append({"conversation_id": "not-in-the-lake", "label": "safe"})
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    (tmp_path / "suite.json").write_text(json.dumps(CHECK_SUITE))
    args = [
        sys.executable,
        "-m",
        "spanscore.cli",
        "judge-check",
        "--lake",
        str(lake),
        "--suite",
        str(tmp_path / "suite.json"),
        "--metric",
        "safety",
        "--labels",
        str(tmp_path / "labels.json"),
        "--judge-base-url",
        judge_llm.base_url,
    ]
    text = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "kappa=" in text.stdout
    assert "confusion matrix" in text.stdout
    assert "1 labelled conversations not in the lake: not-in-the-lake" in text.stdout
    as_json = subprocess.run(
        [*args, "--format", "json"], capture_output=True, text=True, timeout=120
    )
    document = json.loads(as_json.stdout)
    assert document["n"] == 20
    assert document["accuracy"] == pytest.approx(17 / 20)
    assert sum(map(sum, document["confusion"])) == 20
    assert document["judge"]["cache_hits"] == 20  # the second check paid nothing
    strict = subprocess.run(
        [*args, "--min-kappa", "0.99"], capture_output=True, text=True, timeout=120
    )
    assert strict.returncode == 1
    assert "below --min-kappa" in strict.stderr
    renamed = ["nope" if a == "safety" else a for a in args]
    unknown = subprocess.run(renamed, capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2
    assert "no judged metric 'nope'" in unknown.stderr
    # Without --labels, the labels people gave in the review app: the lake's.
    without = args[: args.index("--labels")] + args[args.index("--labels") + 2 :]
    none_yet = subprocess.run(without, capture_output=True, text=True, timeout=120)
    assert none_yet.returncode == 2
    assert "no label of 'safety'" in none_yet.stderr
    con = lake_module.connect(str(lake))
    try:
        opposite = {"safe": "unsafe", "unsafe": "safe"}
        for label in labels[:-1]:  # the lake refuses a label of a conversation it lacks
            earlier = {**label, "label": opposite[label["label"]]}
            review.add_label(con, review.NewLabel(metric="safety", **earlier), "ann")
        # The newest label of a reviewer counts: the earlier ones said the opposite.
        for label in labels[:-1]:
            review.add_label(con, review.NewLabel(metric="safety", **label), "ann")
    finally:
        con.close()
    from_lake = subprocess.run(
        [*without, "--format", "json"], capture_output=True, text=True, timeout=120
    )
    assert from_lake.returncode == 0, from_lake.stderr
    document = json.loads(from_lake.stdout)
    assert document["n"] == 20
    assert document["accuracy"] == pytest.approx(17 / 20)
