"""`strategy: judged` for one argument, as watsonx Orchestrate's fuzzy match.

Three steps, each used only when the one before is unavailable (the judge failed or is not
configured), all against the same `threshold` (default 0.8):
1. the LLM judge decides whether expected and actual mean the same (`semantic_match` prompt);
2. the cosine similarity of both values' embeddings from the same endpoint (`/v1/embeddings`);
3. the token similarity of the two texts (`matching.arguments.token_match`).
The step that decided is recorded with the score (details.judge.arguments).
"""

from __future__ import annotations

import math
from typing import Any

from spanscore.evaluation.judged.rubrics import prompt
from spanscore.evaluation.llm.types import JudgeRequest
from spanscore.evaluation.matching.arguments import token_match
from spanscore.evaluation.scoring.deferral import current_session

_VERDICT = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "equivalent": {"type": "boolean"}},
    "required": ["reasoning", "equivalent"],
    "additionalProperties": False,
}


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def judged_match(
    expected: str, actual: str, threshold: float, rubric: str | None, path: str
) -> tuple[bool, float, str | None]:
    """(passed, score, why not) of one judged argument. While an answer is still unknown it
    returns a provisional failure and the session holds the question: the assertion is scored
    again once it is answered."""
    session = current_session()
    note: dict[str, Any] = {"argument": path}
    if session is not None:
        template, version = prompt("semantic_match")
        question = f"Argument: {path}\nExpected: {expected}\nActual: {actual}"
        if rubric:
            question += f"\nWhat matters for this argument: {rubric}"
        llm = session.lookup(
            JudgeRequest(
                kind="chat",
                purpose="semantic_match",
                messages=(("system", template.template), ("user", question)),
                schema_name="semantic_match",
                schema=_VERDICT,
                prompt_version=version,
            )
        )
        if llm is None:
            return False, 0.0, "waiting for the judge"
        if llm.ok:
            equivalent = bool(llm.value.get("equivalent"))
            reasoning = str(llm.value.get("reasoning") or "")
            session.note({**note, "decided_by": "llm", "equivalent": equivalent})
            return equivalent, float(equivalent), None if equivalent else f"judge: {reasoning}"
        note["llm_unavailable"] = llm.problem
        vectors = [
            session.lookup(JudgeRequest(kind="embedding", purpose="semantic_match", text=t))
            for t in (expected, actual)
        ]
        if any(v is None for v in vectors):
            return False, 0.0, "waiting for the embeddings"
        if all(v is not None and v.ok for v in vectors):
            similarity = max(0.0, cosine(*(v.value for v in vectors if v is not None)))
            passed = similarity >= threshold
            session.note({**note, "decided_by": "embeddings", "similarity": similarity})
            why = None if passed else f"embedding similarity {similarity:.2f} below {threshold:g}"
            return passed, similarity, why
        note["embeddings_unavailable"] = next(v.problem for v in vectors if v and not v.ok)
    else:
        note["llm_unavailable"] = "no judge session"
    passed, similarity, why = token_match(expected, actual, threshold)
    if session is not None:
        session.note({**note, "decided_by": "token_similarity", "similarity": similarity})
    return passed, similarity, why
