"""How stored values become the report's JSON: times as ISO strings, JSON text parsed, numbers
rounded, and nothing that is not finite."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import orjson

OPTIONS = orjson.OPT_NON_STR_KEYS  # arguments read as Python literals may have int keys


def iso(moment: Any) -> str | None:
    if moment is None:
        return None
    if isinstance(moment, dt.datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return str(moment.astimezone(dt.UTC).isoformat()).replace("+00:00", "Z")
    return str(moment)


def json(text: Any) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def round_to(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
