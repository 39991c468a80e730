"""The scale each metric's values are drawn on, so that no plot mixes a 0-1 score with a 0-5
rubric, and a rubric whose values are all 5 is drawn at the top of 0-5, not on an axis of 5-6.

The one rule: the scale a score declares in its details (`"scale": [low, high]`, as the judged
rubrics record it); else 0-1 when every value lies in it; else from 0 (or the lowest value,
when below 0) to the highest value. The values always lie on their scale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from spanscore.evaluation.report.schema import ScaleDoc
from spanscore.evaluation.runs.store import ScoreRecord


def _declared(details: str | None) -> tuple[float, float] | None:
    if not details or '"scale"' not in details:
        return None
    try:
        found = orjson.loads(details).get("scale")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if (
        isinstance(found, list)
        and len(found) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in found)
        and found[0] < found[1]
    ):
        return float(found[0]), float(found[1])
    return None


def declared_scales(scores: Iterable[ScoreRecord]) -> dict[tuple[str | None, str], ScaleDoc]:
    """The scale each (scenario, metric) declares, read from the first of its scores that has
    details (one metric of one scenario declares one scale)."""
    out: dict[tuple[str | None, str], ScaleDoc] = {}
    looked: set[tuple[str | None, str]] = set()
    for s in scores:
        key = (s.scenario_id, s.metric)
        if key in looked or not s.details or s.error is not None:
            continue
        looked.add(key)
        found = _declared(s.details)
        if found is not None:
            out[key] = {"low": found[0], "high": found[1]}
    return out


def scale_of(values: Sequence[float], declared: Iterable[ScaleDoc] = ()) -> ScaleDoc:
    """The scale of these values (see the module doc); several declared scales (one metric in
    several scenarios) are drawn on the one that spans them all."""
    lows = [d["low"] for d in declared]
    highs = [d["high"] for d in declared]
    if lows:
        low, high = min(lows), max(highs)
    elif all(0 <= v <= 1 for v in values):
        return {"low": 0.0, "high": 1.0}
    else:
        low, high = 0.0, 0.0
    low = min([low, *values])
    high = max([high, *values])
    return {"low": low, "high": high if high > low else low + 1}
