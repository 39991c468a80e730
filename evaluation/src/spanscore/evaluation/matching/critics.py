"""Arcade-style critics: weighted per-argument judgements for the `tool_call_rubric` metric.

A critic compares the expected and the actual value of one argument (`field`) and returns
`CriticResult(match, score)`, the score being a part of its weight. They reproduce
`arcade_evals.critic` (BinaryCritic, NumericCritic, SimilarityCritic, DatetimeCritic) and
`arcade_evals.weights` (FuzzyWeight names, normalised when any critic uses one), with these
differences, each chosen so that no extra dependency is needed or a known trap is closed:

- binary: the actual value is read as the expected value's type as Arcade does (`"5"` matches
  `5`, `5` matches `"5"`, the text `"None"` is None), through `arguments.values_equal(...,
  cast=True)`: a text becomes a boolean only from "true"/"false" (Python's `bool("false")`,
  which Arcade uses, is True), a number with a fraction never equals an integer (Arcade's
  `int(1.5) == 1` passes a wrong value), nested values compare tolerantly (1 == 1.0, any key
  order) and a boolean never equals a number.
- similarity: TF-IDF cosine computed here exactly as scikit-learn's `TfidfVectorizer()` does
  with its defaults on the two texts (lower-cased words of two or more word characters, raw
  counts, smoothed idf `ln((1 + 2) / (1 + df)) + 1`, L2 norm), with Arcade's fallbacks (both
  empty: match; one empty: no match; no word at all: exact text equality).
- datetime: values are read as ISO 8601 (`datetime.fromisoformat`, which takes `Z`, offsets,
  a space or `T`, and bare dates); Arcade's dateutil also reads free-form dates such as
  "Jan 5 2024", which here score 0 like any value that cannot be read.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from abc import abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from spanscore.evaluation.matching.arguments import values_equal

# Arcade's FuzzyWeight buckets (a linear scale).
FUZZY_WEIGHTS: dict[str, int] = {
    "minimal": 1,
    "very_low": 2,
    "low": 3,
    "medium": 4,
    "high": 5,
    "very_high": 6,
    "critical": 7,
}


FuzzyWeightName = Literal["minimal", "very_low", "low", "medium", "high", "very_high", "critical"]


@dataclass(frozen=True)
class CriticResult:
    match: bool
    score: float


class _Critic(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    field: str = Field(
        validation_alias=AliasChoices("field", "critic_field"),
        description="argument the critic judges (Arcade's critic_field)",
    )
    weight: float | FuzzyWeightName = Field(
        1.0,
        description="a non-negative number, or a FuzzyWeight name (minimal=1 ... critical=7); "
        "when any critic of the rubric uses a name, all weights are divided by their sum",
    )

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, value: Any) -> Any:
        if isinstance(value, str):
            name = value.strip().lower().removeprefix("fuzzyweight.")
            if name not in FUZZY_WEIGHTS:
                raise ValueError(
                    f"a weight is a non-negative number or one of {', '.join(FUZZY_WEIGHTS)}"
                )
            return name
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"a critic weight must be non-negative, got {value}")
        return value

    @property
    def is_fuzzy(self) -> bool:
        return isinstance(self.weight, str)

    @property
    def raw_weight(self) -> float:
        return float(FUZZY_WEIGHTS[self.weight] if isinstance(self.weight, str) else self.weight)

    @abstractmethod
    def judge(self, expected: Any, actual: Any, weight: float) -> CriticResult:
        """Score `actual` against `expected` for this critic, out of `weight`."""


class BinaryCritic(_Critic):
    """Full weight when the actual value, cast to the expected value's type, equals it."""

    type: Literal["binary"]

    def judge(self, expected: Any, actual: Any, weight: float) -> CriticResult:
        # Arcade reads the text "None" as None on either side, then casts the actual value
        # to the expected value's type.
        expected = None if expected == "None" else expected
        actual = None if actual == "None" else actual
        match = values_equal(expected, actual, cast=True)
        return CriticResult(match, weight if match else 0.0)


class NumericCritic(_Critic):
    """`1 - |e - a| / (max - min)` of the weight (both normalised to `value_range`)."""

    type: Literal["numeric"]
    value_range: tuple[float, float] = Field(
        description="[min, max] the values are normalised over; a difference of the whole "
        "range scores 0"
    )
    match_threshold: float = Field(0.8, description="similarity from which it is a match")

    @field_validator("value_range")
    @classmethod
    def _range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if value[0] >= value[1]:
            raise ValueError("value_range: the minimum must be less than the maximum")
        return value

    def judge(self, expected: Any, actual: Any, weight: float) -> CriticResult:
        low, high = self.value_range
        # float() as Arcade: None or an unreadable value raises, which scores 0.
        similarity = 1 - abs((float(expected) - float(actual)) / (high - low))
        # Arcade lets a value outside the range score below 0; here a critic never scores
        # less than nothing.
        return CriticResult(similarity >= self.match_threshold, max(0.0, similarity) * weight)


class SimilarityCritic(_Critic):
    """TF-IDF cosine similarity of the two texts (lists are joined with spaces)."""

    type: Literal["similarity"]
    similarity_threshold: float = Field(0.8, description="similarity from which it is a match")
    metric: Literal["cosine"] = "cosine"

    def judge(self, expected: Any, actual: Any, weight: float) -> CriticResult:
        e, a = _as_text(expected), _as_text(actual)
        if not e.strip() or not a.strip():
            match = e.strip() == a.strip()
            return CriticResult(match, weight if match else 0.0)
        similarity = tfidf_cosine(e, a)
        if similarity is None:  # no word of two characters in either text
            return CriticResult(e == a, weight if e == a else 0.0)
        return CriticResult(similarity >= self.similarity_threshold, min(similarity, 1.0) * weight)


class DatetimeCritic(_Critic):
    """Full weight within `tolerance`, nothing from `max_difference`, linear in between."""

    type: Literal["datetime"]
    tolerance: dt.timedelta = Field(
        dt.timedelta(seconds=500),
        description="full score up to this difference (seconds, or an ISO 8601 duration)",
    )
    max_difference: dt.timedelta = Field(
        dt.timedelta(hours=2), description="score 0 from this difference; partial score below"
    )

    def judge(self, expected: Any, actual: Any, weight: float) -> CriticResult:
        e, a = parse_datetime(expected), parse_datetime(actual)
        if e is None or a is None:
            return CriticResult(False, 0.0)
        if (e.tzinfo is None) != (a.tzinfo is None):  # Arcade: compare the wall clocks
            e, a = e.replace(tzinfo=None), a.replace(tzinfo=None)
        difference = abs((e - a).total_seconds())
        if difference <= self.tolerance.total_seconds():
            return CriticResult(True, weight)
        limit = self.max_difference.total_seconds()
        if difference >= limit:
            return CriticResult(False, 0.0)
        return CriticResult(False, weight * max(0.0, 1 - difference / limit))


Critic = BinaryCritic | NumericCritic | SimilarityCritic | DatetimeCritic


def critic_weights(critics: list[Any]) -> list[float]:
    """The weights the rubric uses: as given, or, when any critic uses a FuzzyWeight name,
    every weight divided by their sum (equal weights when the sum is 0), as Arcade does."""
    if not any(c.is_fuzzy for c in critics):
        return [c.raw_weight for c in critics]
    raw = [c.raw_weight for c in critics]
    total = sum(raw)
    if total <= 0:
        return [1.0 / len(critics)] * len(critics)
    return [w / total for w in raw]


# --- the comparisons ---------------------------------------------------------------------------


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(str(item) for item in value)
    return str(value)


_WORD = re.compile(r"(?u)\b\w\w+\b")


@lru_cache(maxsize=8192)  # pure: the same texts come back across calls and conversations
def tfidf_cosine(first: str, second: str) -> float | None:
    """Cosine similarity of the TF-IDF vectors of two texts, fitted on those two texts with
    scikit-learn's `TfidfVectorizer()` defaults; None when neither has a word."""
    counts = [Counter(_WORD.findall(text.lower())) for text in (first, second)]
    vocabulary = set(counts[0]) | set(counts[1])
    if not vocabulary:
        return None
    df = {term: sum(1 for c in counts if term in c) for term in vocabulary}
    idf = {term: math.log(3 / (1 + df[term])) + 1 for term in vocabulary}
    vectors = [{term: c[term] * idf[term] for term in c} for c in counts]
    norms = [math.sqrt(sum(v * v for v in vec.values())) for vec in vectors]
    if not norms[0] or not norms[1]:
        return 0.0
    dot = sum(weight * vectors[1].get(term, 0.0) for term, weight in vectors[0].items())
    return dot / (norms[0] * norms[1])


def parse_datetime(value: Any) -> dt.datetime | None:
    """An ISO 8601 date or datetime (a `Z` suffix is UTC), or None."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def argument(arguments: Mapping[str, Any], field: str) -> Any:
    """The value of `field` (a name, or a dot path into nested objects), None when absent."""
    if field in arguments:
        return arguments[field]
    value: Any = arguments
    for part in field.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value
