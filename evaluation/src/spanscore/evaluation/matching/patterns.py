"""Regular expressions a suite may use.

`check_pattern` refuses, at load time, a pattern that can backtrack catastrophically (a
quantified group that itself contains an unbounded quantifier, like `(a+)+$` or `(\\w*)*`):
Python's matcher cannot be interrupted while it backtracks, so such a pattern could hang a run
on one long argument."""

from __future__ import annotations

import re
from re import _parser as sre_parse  # type: ignore[attr-defined]  # the parser behind `re`
from typing import Any

_UNBOUNDED = sre_parse.MAXREPEAT


_REPEATS = tuple(
    op
    for op in (
        sre_parse.MAX_REPEAT,
        sre_parse.MIN_REPEAT,
        getattr(sre_parse, "POSSESSIVE_REPEAT", None),
    )
    if op is not None
)


def check_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; ValueError when it is invalid or can backtrack catastrophically."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    nested = _nested_repeat(sre_parse.parse(pattern), inside=False)
    if nested:
        raise ValueError(
            f"regular expression {pattern!r} nests an unbounded repetition inside another "
            f"({nested}): it can take exponential time on a long value; write it without the "
            "outer repetition (e.g. `a+` for `(a+)+`)"
        )
    return compiled


def _nested_repeat(parsed: Any, inside: bool) -> str | None:
    """A description of an unbounded repeat inside a repeated group, or None."""
    for op, value in parsed:
        if op in _REPEATS:
            _, high, body = value
            if inside and high == _UNBOUNDED:
                return "an unbounded repeat inside a repeated group"
            found = _nested_repeat(body, inside=inside or high == _UNBOUNDED or high > 1)
            if found:
                return found
        elif op is sre_parse.SUBPATTERN:
            found = _nested_repeat(value[-1], inside)
            if found:
                return found
        elif op is sre_parse.BRANCH:
            for branch in value[1]:
                found = _nested_repeat(branch, inside)
                if found:
                    return found
        elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
            found = _nested_repeat(value[1], inside)
            if found:
                return found
    return None
