"""How scoring asks the judge: questions recorded while scoring, answered later, scored again.

Scoring stays synchronous and deterministic. An assertion that needs the judge asks its
`JudgeSession` (reached through `current_session()`); an answer the session does not have yet
is recorded as pending and the assertion is *deferred* (`JudgePending`). The run answers every
pending question at once (concurrently, from the cache, or through the Batch API) and scores
the deferred assertions again with the answers; since scoring is a pure function of the
trajectory and the answers, the second pass gives the final score. An assertion may need
several rounds (an argument judged by the LLM, then by embeddings when the LLM failed).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from spanscore.evaluation.llm.types import JudgeAnswer, JudgeRequest, Usage


class JudgePending(Exception):
    """The assertion asked a question its session has no answer for yet."""


class JudgeFailed(Exception):
    """The judge could not answer (after its retries), or the budget left it unasked."""

    def __init__(self, answer: JudgeAnswer) -> None:
        self.answer = answer
        super().__init__(answer.problem)


@dataclass
class JudgeSession:
    """The answers one conversation's scoring may use, and the questions it still has."""

    answers: Mapping[str, JudgeAnswer] = field(default_factory=dict)
    scenario: Mapping[str, Any] | None = None  # id and description of the asking scenario
    pending: dict[str, JudgeRequest] = field(default_factory=dict)
    used: dict[str, JudgeAnswer] = field(default_factory=dict)  # by digest: counted once
    notes: list[dict[str, Any]] = field(default_factory=list)  # e.g. which step decided
    memo: dict[Any, Any] = field(default_factory=dict)  # the trajectory's (see Trajectory.memo)

    def lookup(self, request: JudgeRequest) -> JudgeAnswer | None:
        """The answer, or None (the question is then pending)."""
        answer = self.answers.get(request.digest)
        if answer is None:
            self.pending[request.digest] = request
            return None
        self.used[request.digest] = answer
        return answer

    def note(self, note: dict[str, Any]) -> None:
        """Record how a judgement was made (once, however often matching re-checks it)."""
        if note not in self.notes:
            self.notes.append(note)

    def require(self, request: JudgeRequest) -> JudgeAnswer:
        """The successful answer; raises `JudgePending` or `JudgeFailed`."""
        answer = self.lookup(request)
        if answer is None:
            raise JudgePending()
        if not answer.ok:
            raise JudgeFailed(answer)
        return answer

    def usage_details(self) -> dict[str, Any] | None:
        """What the judge cost this score (stored in the score's details)."""
        if not self.used and not self.notes:
            return None
        total = Usage()
        used = list(self.used.values())
        for answer in used:
            total = total + answer.usage if not answer.cached else total
        return {
            "calls": sum(1 for a in used if not a.cached and a.ok),
            "cache_hits": sum(1 for a in used if a.cached),
            "model": next((a.model for a in used if a.model), None),
            "prompt_tokens": total.prompt_tokens,
            "cached_tokens": total.cached_tokens,
            "completion_tokens": total.completion_tokens,
            "cost_usd": total.cost_usd,
            **({"arguments": self.notes} if self.notes else {}),
        }


_SESSION: contextvars.ContextVar[JudgeSession | None] = contextvars.ContextVar(
    "spanscore_judge_session", default=None
)


def current_session() -> JudgeSession | None:
    return _SESSION.get()


@contextlib.contextmanager
def judging(session: JudgeSession) -> Iterator[JudgeSession]:
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        _SESSION.reset(token)
