"""LLM-judged metrics: rubrics a suite writes, and the built-in judgements.

A rubric is ArkSim's custom metric in a suite: quantitative (a scale, 0-5 by default, with a
description per level and a pass threshold) or qualitative (labels with descriptions, some of
which pass). The judge sees the metric's instructions first (the static part: every
conversation shares it, so providers cache it) and then the scenario and a compact transcript
(`judging.render_trajectory`). Its answer is structured (`reasoning` first, then the verdict);
the score keeps the reasoning as `explanation` and the raw verdict in `details`.

Prompts are package files (`prompts/*.txt`, `string.Template` syntax); each has a version that
is part of the judge cache key, so editing a prompt never reuses an old answer.
"""

from __future__ import annotations

import hashlib
import math
from functools import cache, cached_property
from importlib import resources
from string import Template
from typing import Any, Literal

from pydantic import Field, model_validator

from spanscore.evaluation.judged.render import render_trajectory
from spanscore.evaluation.llm.types import JudgeRequest
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.deferral import JudgePending, current_session
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory


@cache
def prompt(name: str) -> tuple[Template, str]:
    """A prompt file of this package and its version (a hash of its text)."""
    text = resources.files(__package__).joinpath("prompts", f"{name}.txt").read_text("utf-8")
    return Template(text), hashlib.sha256(text.encode()).hexdigest()[:12]


def conversation_message(trajectory: Trajectory, max_value_chars: int, extra: str = "") -> str:
    """The dynamic part of every judged prompt: scenario context and the transcript (built
    once per trajectory, scenario and settings)."""
    session = current_session()
    scenario_id = session.scenario.get("id") if session is not None and session.scenario else None
    key = ("message", scenario_id, max_value_chars, extra)
    known = trajectory.memo.get(key)
    if known is not None:
        return str(known)
    context = ""
    if session is not None and session.scenario:
        scenario = session.scenario
        context = f"# Scenario: {scenario.get('id')}\n"
        if scenario.get("description"):
            context += f"{scenario['description']}\n"
        context += "\n"
    if extra:
        context += extra.rstrip() + "\n\n"
    template, _ = prompt("conversation")
    message = template.substitute(
        context=context, transcript=render_trajectory(trajectory, max_value_chars=max_value_chars)
    )
    trajectory.memo[key] = message
    return message


class JudgedAssertion(AssertionBase):
    """Shared by every judged metric: how much of the conversation the judge sees."""

    max_value_chars: int = Field(
        600, ge=50, description="longest argument, result or error shown to the judge"
    )

    def may_judge(self, registry: MetricRegistry) -> bool:
        return True

    def ask(
        self,
        purpose: str,
        instructions: str,
        message: str,
        schema: dict[str, Any],
        version: str,
    ) -> dict[str, Any]:
        """The judge's verdict (a JSON object valid against `schema`); raises `JudgePending`
        while it is not known and `JudgeFailed` when the judge could not give it."""
        session = current_session()
        if session is None:
            raise RuntimeError("a judged metric is scored outside a judge session")
        # The same question is built once per conversation: its digest (a hash of the whole
        # prompt) is then computed once, however many rounds score the assertion.
        key = ("request", purpose, version, instructions, message)
        request = session.memo.get(key)
        if request is None:
            request = session.memo[key] = JudgeRequest(
                kind="chat",
                purpose=purpose,
                messages=(("system", instructions), ("user", message)),
                schema_name=purpose.replace("-", "_")[:60] or "verdict",
                schema=schema,
                prompt_version=version,
            )
        value = session.require(request).value
        if not isinstance(value, dict):
            raise JudgePending()  # cannot happen: the client checks the schema
        return value


@assertion
class JudgedRubric(JudgedAssertion):
    """An LLM-judged metric written in the suite (ArkSim custom metrics): `criteria` says what
    to judge; `scale` + `levels` make it quantitative, `labels` qualitative."""

    type: Literal["judged"]
    name: str = Field(description="metric name in the scores")
    criteria: str = Field(description="what the judge checks, in plain words")
    scale: tuple[int, int] | None = Field(
        None, description="quantitative: lowest and highest score (default 0-5 without labels)"
    )
    levels: dict[int, str] = Field(
        default_factory=dict, description="quantitative: what each score means"
    )
    labels: dict[str, str] | list[str] | None = Field(
        None, description="qualitative: the labels (and what each means)"
    )
    pass_labels: list[str] | None = Field(
        None, description="qualitative: labels that pass (default: the first)"
    )
    threshold: float | None = Field(
        None, description="quantitative: pass at this score or above (default: the scale's middle)"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> JudgedRubric:
        if self.labels is not None:
            if self.scale is not None or self.levels:
                raise ValueError("a rubric has either labels (qualitative) or a scale, not both")
            names = self.label_names()
            if len(names) < 2:
                raise ValueError("a qualitative rubric needs at least two labels")
            unknown = [x for x in self.pass_labels or [] if x not in names]
            if unknown:
                raise ValueError(f"pass_labels {unknown} are not among the labels {names}")
            if self.threshold is not None:
                raise ValueError("a qualitative rubric passes by pass_labels, not threshold")
        else:
            low, high = self.bounds()
            if low >= high:
                raise ValueError(f"scale ({low}, {high}): the lowest must be below the highest")
            outside = [k for k in self.levels if not low <= k <= high]
            if outside:
                raise ValueError(f"levels {outside} are outside the scale {low}-{high}")
            if self.threshold is not None and not low <= self.threshold <= high:
                raise ValueError(f"threshold {self.threshold} is outside the scale {low}-{high}")
        return self

    def label_names(self) -> list[str]:
        if self.labels is None:
            return []
        return list(self.labels)  # a mapping's keys, or the list

    def bounds(self) -> tuple[int, int]:
        return self.scale or (0, 5)

    def effective_threshold(self) -> float:
        if self.threshold is not None:
            return self.threshold
        low, high = self.bounds()
        return float(math.ceil((low + high) / 2))

    def instructions(self) -> tuple[str, dict[str, Any], str]:
        """The static part of the prompt, its schema and version (built once per metric: a
        rubric does not change while a run scores with it)."""
        return self._instructions

    @cached_property
    def _instructions(self) -> tuple[str, dict[str, Any], str]:
        template, version = prompt("rubric")
        if self.labels is not None:
            names = self.label_names()
            described = self.labels if isinstance(self.labels, dict) else {}
            scale = "Choose exactly one label:\n" + "\n".join(
                f"- {n}: {described[n]}" if described.get(n) else f"- {n}" for n in names
            )
            verdict: dict[str, Any] = {"type": "string", "enum": names}
            key = "label"
        else:
            low, high = self.bounds()
            scale = f"Give an integer score from {low} (worst) to {high} (best)."
            if self.levels:
                scale += "\n" + "\n".join(f"- {k}: {self.levels[k]}" for k in sorted(self.levels))
            verdict = {"type": "integer", "enum": list(range(low, high + 1))}
            key = "score"
        schema = {
            "type": "object",
            "properties": {"reasoning": {"type": "string"}, key: verdict},
            "required": ["reasoning", key],
            "additionalProperties": False,
        }
        text = template.substitute(name=self.metric_name, criteria=self.criteria, scale=scale)
        return text, schema, version

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        instructions, schema, version = self.instructions()
        verdict = self.ask(
            self.metric_name,
            instructions,
            conversation_message(trajectory, self.max_value_chars),
            schema,
            version,
        )
        reasoning = str(verdict.get("reasoning") or "")
        if self.labels is not None:
            label = str(verdict["label"])
            passing = self.pass_labels or self.label_names()[:1]
            return Score(
                label=label,
                passed=label in passing,
                explanation=reasoning,
                details={"verdict": verdict, "pass_labels": passing},
            )
        value = float(verdict["score"])
        threshold = self.effective_threshold()
        return Score(
            value=value,
            passed=value >= threshold,
            threshold=threshold,
            explanation=reasoning,
            details={"verdict": verdict, "scale": list(self.bounds())},
        )
