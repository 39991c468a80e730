"""Argument matching: is this actual tool-call argument what the expected one asked for?

Values compare structurally with deliberate tolerances (the Dokimos tolerant matcher's rules):
- numbers by value: 1 == 1.0 (exactly, never by a float epsilon); a bool is not a number;
- "1" and 1 differ unless `cast` is on (then the actual value is read as the expected type,
  as Arcade's BinaryCritic does);
- strings exactly; trimming and case-folding are opt-in;
- objects recursively, in any key order; lists element by element, in order.

The key sets of two objects compare by mode: `exact` (same keys), `partial` (expected keys
present, extra keys allowed), `superset` (actual keys all expected, omissions allowed), `ignore`
(not compared). Per-argument rules, by dot path, replace that comparison for one argument:
ignore, exact, optional (checked only when present), regex, numeric tolerance, datetime window,
text similarity, and `judged` (the LLM judge, then embeddings, then token similarity).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import difflib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, ClassVar, Literal, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

ArgMode = Literal["exact", "partial", "superset", "ignore"]


Strategy = Literal[
    "ignore", "exact", "optional", "regex", "tolerance", "datetime", "similarity", "judged"
]


_INFERRED: tuple[tuple[str, Strategy], ...] = (
    ("pattern", "regex"),
    ("regex", "regex"),
    ("tolerance", "tolerance"),
    ("relative_tolerance", "tolerance"),
    ("window_seconds", "datetime"),
    ("rubric", "judged"),
)


class ArgumentRule(BaseModel):
    """How one argument is compared. In a suite, a bare strategy name is enough
    (`order_id: ignore`); otherwise a mapping (`{strategy: regex, pattern: "ORD-\\d+"}`; the
    strategy may be left out when a field names it: `{pattern: ...}`, `{tolerance: 0.5}`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    string_shorthand: ClassVar[dict[str, Any]] = {
        "enum": list(get_args(Strategy)),
        "description": "a strategy with no settings",
    }

    strategy: Strategy = "exact"
    value: Any = Field(None, description="expected value (default: the one in `arguments`)")
    pattern: str | None = Field(
        None,
        validation_alias=AliasChoices("pattern", "regex"),
        description="regex: the whole value must match",
    )
    tolerance: float | None = Field(None, ge=0, description="tolerance: absolute difference")
    relative_tolerance: float | None = Field(
        None, ge=0, description="tolerance: difference relative to the expected value"
    )
    window_seconds: float | None = Field(None, ge=0, description="datetime: allowed difference")
    threshold: float = Field(0.8, ge=0, le=1, description="similarity: minimum similarity")
    trim: bool = Field(False, description="exact: ignore leading and trailing whitespace")
    case_insensitive: bool = Field(False, description="exact: compare strings case-folded")
    cast: bool = Field(False, description="exact: read the actual value as the expected type")
    weight: float = Field(1.0, gt=0, description="weight of this argument in the call's score")
    rubric: str | None = Field(None, description="judged: what the judge should check")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"strategy": data}
        if isinstance(data, Mapping) and "strategy" not in data:
            for key, strategy in _INFERRED:
                if key in data:
                    return {**data, "strategy": strategy}
        return data

    @model_validator(mode="after")
    def _complete(self) -> ArgumentRule:
        if self.strategy == "regex":
            if self.pattern is None:
                raise ValueError("a regex rule needs `pattern`")
            from spanscore.evaluation.matching.patterns import (
                check_pattern,  # limits imports nothing of this package
            )

            check_pattern(self.pattern)
        if self.strategy == "tolerance" and self.tolerance is self.relative_tolerance is None:
            raise ValueError("a tolerance rule needs `tolerance` or `relative_tolerance`")
        if self.strategy == "datetime" and self.window_seconds is None:
            raise ValueError("a datetime rule needs `window_seconds`")
        return self

    @property
    def has_value(self) -> bool:
        return "value" in self.model_fields_set


# --- values ----------------------------------------------------------------------------------


_NUMBERS = (int, float, Decimal)  # a tuple: `int | float | Decimal` is built on every call


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, bool)


def _as_decimal(value: Any) -> Decimal | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        return Decimal(value) if not isinstance(value, str) else Decimal(value.strip())
    except (InvalidOperation, ValueError):
        return None


def _cast_to(expected: Any, actual: Any) -> Any:
    """The actual value read as the expected value's type, where that is meaningful."""
    if isinstance(expected, bool):
        if isinstance(actual, str) and actual.strip().lower() in ("true", "false"):
            return actual.strip().lower() == "true"
        return actual
    if _is_number(expected) and isinstance(actual, str):
        number = _as_decimal(actual)
        return number if number is not None else actual
    if isinstance(expected, str) and (_is_number(actual) or isinstance(actual, bool)):
        if isinstance(actual, bool):
            return "true" if actual else "false"
        if isinstance(actual, float) and actual.is_integer():
            return str(int(actual))
        return str(actual)
    return actual


def normalize_text(text: str, trim: bool, case_insensitive: bool) -> str:
    if trim:
        text = text.strip()
    if case_insensitive:
        text = text.casefold()
    return text


def values_equal(
    expected: Any,
    actual: Any,
    *,
    mode: ArgMode = "exact",
    trim: bool = False,
    case_insensitive: bool = False,
    cast: bool = False,
) -> bool:
    """Tolerant structural equality (see the module docstring); `mode` applies to the key sets
    of nested objects too."""
    if mode == "ignore":
        return True
    if cast:
        actual = _cast_to(expected, actual)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if _is_number(expected) and _is_number(actual):
        if isinstance(expected, Decimal) or isinstance(actual, Decimal):
            left, right = _as_decimal(expected), _as_decimal(actual)
            return left is not None and left == right
        return bool(expected == actual)  # int/float comparison in Python is exact
    if isinstance(expected, str) and isinstance(actual, str):
        return normalize_text(expected, trim, case_insensitive) == normalize_text(
            actual, trim, case_insensitive
        )
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if not _keys_ok(set(expected), set(actual), mode):
            return False
        return all(
            values_equal(
                expected[k],
                actual[k],
                mode=mode,
                trim=trim,
                case_insensitive=case_insensitive,
                cast=cast,
            )
            for k in expected
            if k in actual
        )
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(expected) == len(actual) and all(
            values_equal(e, a, mode=mode, trim=trim, case_insensitive=case_insensitive, cast=cast)
            for e, a in zip(expected, actual, strict=True)
        )
    if expected is None or actual is None:
        return expected is None and actual is None
    return bool(type(expected) is type(actual) and expected == actual)


def _keys_ok(expected: set[Any], actual: set[Any], mode: ArgMode) -> bool:
    if mode == "exact":
        return expected == actual
    if mode == "partial":
        return expected <= actual
    if mode == "superset":
        return actual <= expected
    return True


# --- text similarity and times -----------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def text_similarity(left: str, right: str) -> float:
    """Cosine similarity of the two texts' word counts (case-folded), in [0, 1]; texts without
    words compare by character sequence (difflib ratio)."""
    a = Counter(_WORD.findall(left.casefold()))
    b = Counter(_WORD.findall(right.casefold()))
    if not a or not b:
        if not a and not b:
            return difflib.SequenceMatcher(None, left, right).ratio() if left or right else 1.0
        return 0.0
    dot = sum(count * b[word] for word, count in a.items())
    norm = math.sqrt(sum(c * c for c in a.values())) * math.sqrt(sum(c * c for c in b.values()))
    return min(1.0, dot / norm)


def parse_datetime(value: Any) -> dt.datetime | None:
    """An ISO 8601 date or date-time (naive values are taken as UTC), or epoch seconds."""
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime(value.year, value.month, value.day)
    elif _is_number(value):
        try:
            parsed = dt.datetime.fromtimestamp(float(value), dt.UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- one call's arguments ----------------------------------------------------------------------


@dataclass
class ArgumentCheck:
    path: str
    passed: bool
    score: float
    weight: float
    message: str | None = None


@dataclass
class ArgumentResult:
    """The comparison of one call's arguments: passed, a weighted score in [0, 1], why."""

    checks: list[ArgumentCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def score(self) -> float:
        total = sum(c.weight for c in self.checks)
        if not total:
            return 1.0
        return sum(c.score * c.weight for c in self.checks) / total

    @property
    def problems(self) -> list[str]:
        return [f"{c.path}: {c.message}" for c in self.checks if not c.passed and c.message]

    def add(self, path: str, passed: bool, weight: float = 1.0, message: str | None = None) -> None:
        self.checks.append(ArgumentCheck(path, passed, 1.0 if passed else 0.0, weight, message))


_ABSENT = object()


def _lookup(value: Any, path: str) -> Any:
    if isinstance(value, Mapping) and path in value:  # a key with dots in it
        return value[path]
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def apply_rule(
    rule: ArgumentRule, expected: Any, actual: Any, path: str = ""
) -> tuple[bool, float, str | None]:
    """(passed, score, why not) for one argument under its rule; `actual` may be absent."""
    if rule.has_value:
        expected = rule.value
    strategy = rule.strategy
    if strategy == "ignore":
        return True, 1.0, None
    if actual is _ABSENT:
        if strategy == "optional":
            return True, 1.0, None
        return False, 0.0, "missing"
    if strategy in ("exact", "optional"):
        ok = values_equal(
            expected,
            actual,
            trim=rule.trim,
            case_insensitive=rule.case_insensitive,
            cast=rule.cast,
        )
        return ok, float(ok), None if ok else f"expected {_show(expected)}, got {_show(actual)}"
    if strategy == "regex":
        assert rule.pattern is not None
        ok = actual is not None and _regex(rule.pattern).fullmatch(_as_text(actual)) is not None
        return ok, float(ok), None if ok else f"{_show(actual)} does not match /{rule.pattern}/"
    if strategy == "tolerance":
        want = _as_decimal(expected) if _is_number(expected) or rule.cast else None
        got = (
            _as_decimal(actual)
            if _is_number(actual) or (rule.cast and isinstance(actual, str))
            else None
        )
        if want is None or got is None:
            return False, 0.0, f"expected a number near {_show(expected)}, got {_show(actual)}"
        allowed = Decimal(str(rule.tolerance or 0)) + Decimal(
            str(rule.relative_tolerance or 0)
        ) * abs(want)
        ok = abs(got - want) <= allowed
        return ok, float(ok), None if ok else f"{got} is more than {allowed} from {want}"
    if strategy == "datetime":
        want_time, got_time = parse_datetime(expected), parse_datetime(actual)
        if want_time is None or got_time is None:
            return False, 0.0, f"expected a date-time near {_show(expected)}, got {_show(actual)}"
        gap = abs((got_time - want_time).total_seconds())
        ok = gap <= (rule.window_seconds or 0)
        return ok, float(ok), None if ok else f"{gap:g} s from {_show(expected)}"
    if strategy == "similarity":
        similarity = text_similarity(_as_text(expected), _as_text(actual))
        ok = similarity >= rule.threshold
        why = None if ok else f"similarity {similarity:.2f} below {rule.threshold:g}"
        return ok, similarity, why
    matcher = _JUDGED_MATCHER.get()
    if matcher is None:
        return token_match(_as_text(expected), _as_text(actual), rule.threshold)
    return matcher(_as_text(expected), _as_text(actual), rule.threshold, rule.rubric, path)


# `strategy: judged` asks the LLM judge, which lives in a layer above this pure one: while a
# suite scores with a judge session, that layer lends its matcher (`judged_matcher`). Without
# one, token similarity decides, as it does when the judge and the embeddings are unavailable.
JudgedMatcher = Callable[[str, str, float, str | None, str], tuple[bool, float, str | None]]
_JUDGED_MATCHER: contextvars.ContextVar[JudgedMatcher | None] = contextvars.ContextVar(
    "spanscore_judged_matcher", default=None
)


@contextlib.contextmanager
def judged_matcher(matcher: JudgedMatcher) -> Iterator[None]:
    """Within the block, `strategy: judged` arguments are decided by `matcher`."""
    token = _JUDGED_MATCHER.set(matcher)
    try:
        yield
    finally:
        _JUDGED_MATCHER.reset(token)


def token_match(expected: str, actual: str, threshold: float) -> tuple[bool, float, str | None]:
    """The judged strategy's last step: the token similarity of the two texts."""
    similarity = text_similarity(expected, actual)
    passed = similarity >= threshold
    why = None if passed else f"token similarity {similarity:.2f} below {threshold:g}"
    return passed, similarity, why


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def match_arguments(
    expected: Mapping[str, Any] | None,
    actual: Any,
    *,
    mode: ArgMode = "exact",
    rules: Mapping[str, ArgumentRule] | None = None,
) -> ArgumentResult:
    """Compare one call's actual arguments with the expected ones (`None`: names only, unless
    rules are given) under `mode` and per-argument `rules`."""
    result = ArgumentResult()
    rules = rules or {}
    if expected is None and not rules:
        return result
    if actual is None:
        actual = {}
    if not isinstance(actual, Mapping):
        result.add("", False, message=f"arguments are not an object: {_show(actual)}")
        return result
    expected = expected or {}
    if expected is not None and not rules and mode == "ignore":
        return result
    _compare_object(expected, actual, "", mode, rules, result)
    for path, rule in rules.items():
        if _lookup(expected, path) is _ABSENT and not _under_checked(path, expected):
            value = _lookup(actual, path)
            ok, score, why = apply_rule(rule, None, value, path)
            result.checks.append(ArgumentCheck(path, ok, score, rule.weight, why))
    return result


def _under_checked(path: str, expected: Mapping[str, Any]) -> bool:
    """Whether an ancestor of `path` is an expected argument (its rule then covered it)."""
    parts = path.split(".")
    return any(_lookup(expected, ".".join(parts[:i])) is not _ABSENT for i in range(1, len(parts)))


def _rules_under(path: str, rules: Mapping[str, ArgumentRule]) -> bool:
    return any(key.startswith(path + ".") for key in rules)


def _compare_object(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    prefix: str,
    mode: ArgMode,
    rules: Mapping[str, ArgumentRule],
    result: ArgumentResult,
) -> None:
    for key, want in expected.items():
        path = f"{prefix}{key}"
        got = actual.get(key, _ABSENT) if isinstance(key, str) else _ABSENT
        rule = rules.get(path)
        if rule is not None:
            ok, score, why = apply_rule(rule, want, got, path)
            result.checks.append(ArgumentCheck(path, ok, score, rule.weight, why))
        elif mode == "ignore":
            continue
        elif (
            isinstance(want, Mapping) and not isinstance(got, Mapping) and _rules_under(path, rules)
        ):
            # Rules on the object's leaves decide, each for its own leaf: an absent object
            # (or a value that is not one) has none of them (an `optional` leaf passes).
            if got is _ABSENT and mode == "superset":
                continue
            _compare_object(want, {}, path + ".", mode, rules, result)
        elif got is _ABSENT:
            if mode == "superset":
                continue
            result.add(path, False, message="missing")
        elif isinstance(want, Mapping) and isinstance(got, Mapping):
            _compare_object(want, got, path + ".", mode, rules, result)
        else:
            ok = values_equal(want, got, mode=mode)
            result.add(
                path, ok, message=None if ok else f"expected {_show(want)}, got {_show(got)}"
            )
    if mode in ("exact", "superset"):
        for key in actual:
            path = f"{prefix}{key}"
            if key not in expected and path not in rules:
                result.add(path, False, message=f"unexpected argument ({_show(actual[key])})")
