"""The built-in LLM-judged metrics: the judgements of ArkSim, Dokimos, the tool-selection
tester and agentevals, with those systems' documented semantics (`docs/judged-metrics.md`
gives every rule, formula, edge case and deliberate difference).

- per turn (one judge request per judged turn, all asked in the same round): `helpfulness`,
  `agent_behavior_failure`, `tool_call_behavior_failure` (ArkSim);
- per conversation: `task_completion`, `tool_argument_hallucination` (Dokimos),
  `tool_selection` (the tool-selection tester's semantic judge, after its exact check),
  `trajectory_judge` (agentevals' trajectory judge, scored 1-5);
- per tool offered: `tool_name_semantics`, `tool_description_semantics` (Dokimos' LLM checks,
  combined with the rule-based checks of `tool_name_reliability` /
  `tool_description_reliability`).

Every prompt is a package file (`prompts/*.txt`): its static part (the instructions) is the
system message, the conversation the user message. A metric that asks several questions fails
as a whole when one of them fails: its error names the turn, call or tool whose answer is
missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from spanscore.evaluation.judged.rubrics import JudgedAssertion
from spanscore.evaluation.llm.types import JudgeAnswer, JudgeRequest
from spanscore.evaluation.scoring.deferral import JudgePending, current_session
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

K = TypeVar("K")


# --- shared machinery ------------------------------------------------------------------------


def closed_schema(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A closed object schema whose every property is required (in the given order)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


REASONING = {"type": "string"}


EQUIVALENT = closed_schema({"reasoning": REASONING, "equivalent": {"type": "boolean"}})


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f"... [{len(text) - limit} more]"


def upto(trajectory: Trajectory, index: int) -> Trajectory:
    """The conversation up to and including turn `index` (the judge's chat history)."""
    return Trajectory(
        conversation_id=trajectory.conversation_id,
        agent_name=trajectory.agent_name,
        turns=trajectory.turns[: index + 1],
    )


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def unanswered_score(what: str, answer: JudgeAnswer, **details: Any) -> Score:
    """The score of a metric one of whose questions the judge could not answer."""
    if answer.skipped is not None:
        return Score(
            error=f"{what}: {answer.skipped}", details={"skipped": answer.skipped, **details}
        )
    return Score.failed_with(f"the judge failed on {what}: {answer.error}", **details)


class Judged(JudgedAssertion):
    """A judged metric that may ask several questions in one evaluation."""

    def request(
        self,
        purpose: str,
        instructions: str,
        message: str,
        schema: Mapping[str, Any],
        version: str,
    ) -> JudgeRequest:
        """The question `JudgedAssertion.ask` would send (the same digest, so the same cache
        entry)."""
        return JudgeRequest(
            kind="chat",
            purpose=purpose,
            messages=(("system", instructions), ("user", message)),
            schema_name=purpose.replace("-", "_")[:60] or "verdict",
            schema=schema,
            prompt_version=version,
        )

    def ask_each(self, requests: Mapping[K, JudgeRequest]) -> dict[K, JudgeAnswer]:
        """The answers (failed ones included) of every question. Each question the session
        cannot answer yet is recorded before `JudgePending` is raised, so that all of them are
        asked in the same round."""
        session = current_session()
        if session is None:
            raise RuntimeError("a judged metric is scored outside a judge session")
        answers = {key: session.lookup(request) for key, request in requests.items()}
        if any(answer is None for answer in answers.values()):
            raise JudgePending()
        return {key: answer for key, answer in answers.items() if answer is not None}


def verdict_details(answer: JudgeAnswer) -> dict[str, Any]:
    value = answer.value
    return value if isinstance(value, dict) else {}
