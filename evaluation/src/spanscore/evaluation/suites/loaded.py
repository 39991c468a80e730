"""A suite ready to score (`LoadedSuite`): its assertions in order, its custom metrics loaded,
its content hash; scoring one trajectory gives one `ScoreRow` per (scenario, metric), and the
assertions that asked the judge wait as `Deferred` until the answers are known."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from spanscore.evaluation.judged.arguments import judged_match
from spanscore.evaluation.llm.types import JudgeAnswer, JudgeConfig, JudgeRequest
from spanscore.evaluation.matching.arguments import judged_matcher
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.deferral import JudgeFailed, JudgePending, JudgeSession, judging
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score, judge_failed
from spanscore.evaluation.scoring.watchdog import TimeLimitExceeded, Watchdog
from spanscore.evaluation.suites.model import (
    SIMULATION_ATTRIBUTE,
    Policy,
    Scenario,
    Suite,
    located_assertions,
)
from spanscore.evaluation.trajectory.model import Trajectory

# A group's (scenario id, position) items: for a production conversation (metrics about the
# simulated user left out), and for a simulated one.
_Items = tuple[list[tuple[str | None, int]], list[tuple[str | None, int]]]


class ScoreRow(NamedTuple):
    scenario_id: str | None
    metric: str
    score: Score


# How many times one assertion may be scored again with new answers (LLM, then embeddings...).
MAX_JUDGE_ROUNDS = 4


@dataclass
class Deferred:
    """A conversation's assertions that wait for the judge, and the questions they asked."""

    trajectory: Trajectory
    items: list[tuple[str | None, int]]  # (scenario id, position in LoadedSuite.assertions)
    requests: dict[str, JudgeRequest]
    rounds: int = 0

    def __post_init__(self) -> None:
        # Each question marked with the conversation asking it: the judge cache keeps it, and
        # erasing the conversation erases the answer (which may quote it).
        conversation = self.trajectory.conversation_id
        self.requests = {
            digest: r if r.asked_for == conversation else replace(r, asked_for=conversation)
            for digest, r in self.requests.items()
        }


@dataclass
class LoadedSuite:
    """A validated suite, ready to score: its custom metrics loaded, its hash computed."""

    suite: Suite
    path: Path | None
    content_hash: str
    registry: MetricRegistry
    base_dir: Path = field(default_factory=Path.cwd)  # custom metric paths are relative to it
    dropped: list[str] = field(default_factory=list)  # what an imported native file lost
    allow_outside_metrics: bool = False  # custom metric files outside base_dir were allowed
    # Where each scenario is written (file label, line): for problems found after loading, such
    # as a scenario `spanscore simulate` cannot play because it has no `user:` block.
    label: str = ""
    scenario_lines: dict[str, int | None] = field(default_factory=dict)
    context: EvalContext = field(init=False)
    watchdog: Watchdog | None = field(default=None, init=False, repr=False)
    _selecting: list[Policy | Scenario] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.context = EvalContext(
            tools={t.name: t for t in self.suite.tools},
            registry=self.registry,
            users={
                s.id: s.user.model_dump(exclude_none=True)
                for s in self.suite.scenarios
                if s.user is not None
            },
        )
        self._selecting = self.suite.groups()
        self._scenarios: dict[str | None, dict[str, Any]] = {
            g.id: {"id": g.id, "description": g.description} for g in self._selecting
        }
        # Positions name assertions across processes (a worker's copies are other objects).
        self.assertions = [a for _, a in located_assertions(self.suite)]
        self._position = {id(a): i for i, a in enumerate(self.assertions)}
        self._judged = {i for i, a in enumerate(self.assertions) if a.may_judge(self.registry)}
        # What `score_deterministic` scores, worked out once (not per conversation): the
        # (scenario id, position) items of the suite's metrics and of each selecting group,
        # for a production conversation and for a simulated one.
        position = self._position

        def items(sid: str | None, group: Sequence[AssertionBase]) -> _Items:
            every = [(sid, position[id(a)]) for a in group]
            real = [(sid, position[id(a)]) for a in group if not a.simulated_only]
            return real, every

        self._metric_items = items(None, self.suite.metrics) if self.suite.metrics else None
        self._group_items = [(g, items(g.id, g.assertions)) for g in self._selecting]

    @property
    def uses_judge(self) -> bool:
        """Whether scoring may ask the LLM judge."""
        return bool(self._judged)

    @property
    def judged_metrics(self) -> set[str]:
        """Names of the metrics that may ask the LLM judge."""
        return {self.assertions[i].metric_name for i in self._judged}

    def judge_config(self) -> JudgeConfig:
        return self.suite.judge or JudgeConfig()

    @property
    def name(self) -> str:
        return self.suite.name

    def document(self) -> dict[str, Any]:
        """The validated suite as a document `load_suite(doc, base_dir=...)` reads back the
        same (fields left at their defaults stay out, so their meaning is kept)."""
        return self.suite.model_dump(mode="json", exclude_unset=True)

    def attribute_keys(self) -> list[str]:
        return self.suite.attribute_keys()

    def groups(self, trajectory: Trajectory) -> Iterator[tuple[str | None, list[Any]]]:
        """(scenario id, assertions) for every group that applies to the trajectory; metrics
        about the simulated user only on a simulated conversation."""
        simulated = SIMULATION_ATTRIBUTE in trajectory.attributes

        def kept(assertions: list[Any]) -> list[Any]:
            return [a for a in assertions if simulated or not a.simulated_only]

        if self.suite.metrics:
            yield None, kept(list(self.suite.metrics))
        for item in self.suite.groups():
            if item.applies_to(trajectory):
                yield item.id, kept(list(item.assertions))

    def score(self, trajectory: Trajectory, judge: Any = None) -> list[ScoreRow]:
        """Every score the suite gives this conversation. Never raises for one assertion's
        failure: that assertion gets an `error` score.

        Judged metrics ask `judge` (a `judge_pool.JudgeRunner`; default: one made from the
        suite's `judge` block for this call, without the lake's cache)."""
        rows, deferred = self.score_deterministic(trajectory)
        if deferred is None:
            return rows
        if judge is not None:
            return rows + self.finish(deferred, judge.answer)
        from spanscore.evaluation.llm.pool import JudgeRunner

        with JudgeRunner(self.judge_config()) as runner:
            return rows + self.finish(deferred, runner.answer)

    def score_deterministic(self, trajectory: Trajectory) -> tuple[list[ScoreRow], Deferred | None]:
        """The scores that need no judge, and what waits for it (None: nothing)."""
        simulated = SIMULATION_ATTRIBUTE in trajectory.attributes  # as `groups` decides
        items: list[tuple[str | None, int]] = []
        if self._metric_items is not None:
            items += self._metric_items[simulated]
        for group, group_items in self._group_items:
            if group.applies_to(trajectory):
                items += group_items[simulated]
        rows, waiting, requests = self.evaluate_items(trajectory, items, {})
        if not waiting:
            return rows, None
        return rows, Deferred(trajectory, waiting, requests)

    def finish(
        self,
        deferred: Deferred,
        answer: Callable[[dict[str, JudgeRequest]], Mapping[str, JudgeAnswer]],
    ) -> list[ScoreRow]:
        """Score deferred assertions with the judge's answers, asking again while they have
        new questions (at most MAX_JUDGE_ROUNDS times)."""
        answers: dict[str, JudgeAnswer] = {}
        rows: list[ScoreRow] = []
        while deferred.items:
            answers.update(answer(deferred.requests))
            more, deferred = self.resume(deferred, answers)
            rows += more
        return rows

    def resume(
        self, deferred: Deferred, answers: Mapping[str, JudgeAnswer]
    ) -> tuple[list[ScoreRow], Deferred]:
        """One more round: the rows now complete, and what still waits (empty items: done)."""
        rows, waiting, requests = self.evaluate_items(deferred.trajectory, deferred.items, answers)
        rounds = deferred.rounds + 1
        if waiting and rounds >= MAX_JUDGE_ROUNDS:
            message = f"the judge was asked {rounds} rounds of questions; giving up"
            rows += [
                ScoreRow(sid, self.assertions[i].metric_name, Score.failed_with(message))
                for sid, i in waiting
            ]
            waiting, requests = [], {}
        return rows, Deferred(deferred.trajectory, waiting, requests, rounds)

    def evaluate_items(
        self,
        trajectory: Trajectory,
        items: Sequence[tuple[str | None, int]],
        answers: Mapping[str, JudgeAnswer],
    ) -> tuple[list[ScoreRow], list[tuple[str | None, int]], dict[str, JudgeRequest]]:
        """Score `items` (scenario id, assertion position) with the answers known so far:
        (rows, items still waiting, their questions)."""
        rows: list[ScoreRow] = []
        waiting: list[tuple[str | None, int]] = []
        requests: dict[str, JudgeRequest] = {}
        judged = self._judged
        for scenario_id, position in items:
            assertion = self.assertions[position]
            if position not in judged:
                rows.append(
                    ScoreRow(scenario_id, assertion.metric_name, self._one(assertion, trajectory))
                )
                continue
            session = JudgeSession(
                answers, scenario=self._scenarios.get(scenario_id), memo=trajectory.memo
            )
            with judging(session), judged_matcher(judged_match):
                score = self._one(assertion, trajectory)
            if session.pending:
                waiting.append((scenario_id, position))
                requests.update(session.pending)
                continue
            usage = session.usage_details()
            if usage is not None:
                score = replace(score, details={**(score.details or {}), "judge": usage})
            rows.append(ScoreRow(scenario_id, assertion.metric_name, score))
        return rows, waiting, requests

    def _one(self, assertion: AssertionBase, trajectory: Trajectory) -> Score:
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.begin()
        try:
            return assertion.evaluate(trajectory, self.context)
        except TimeLimitExceeded as exc:
            return Score.failed_with(str(exc), time_limit_s=self.suite.time_limit_s)
        except JudgePending:
            return Score.failed_with("waiting for the judge")  # the session holds the question
        except JudgeFailed as exc:
            return judge_failed(exc.answer)
        except Exception as exc:  # one bad assertion, not the run
            return Score.failed_with(f"{type(exc).__name__}: {exc}")
        finally:
            if watchdog is not None:
                watchdog.end()

    def start_watchdog(self) -> Watchdog | None:
        """Time-limit each assertion from now on, in this thread (the main thread of its
        process; elsewhere, assertions run without a limit)."""
        if self.suite.time_limit_s > 0 and self.watchdog is None:
            self.watchdog = Watchdog(self.suite.time_limit_s).start()
        return self.watchdog

    def stop_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
