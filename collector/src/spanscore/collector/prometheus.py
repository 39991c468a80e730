"""The collector's counters and gauges in the Prometheus text format (`GET /metrics`).

Names come from `Stats` by one rule: a counter `refused_REASON` or `SIGNAL_refused_REASON` is
`spanscore_collector_refused_total{reason=...}` (with `signal` for the second), a counter
`SIGNAL_WHAT` (spans, logs) is `spanscore_collector_WHAT_total{signal=...}`, any other counter
`spanscore_collector_NAME_total`; a gauge is `spanscore_collector_NAME` (`_s` read as
`_seconds`). A counter appears once it has counted: Prometheus reads a missing series as no
data, and `rate()` over a counter that starts later is still right. A histogram `NAME` is
`spanscore_collector_NAME` (`_bucket{le}`, `_sum`, `_count`), and the lake's size per table
`spanscore_collector_lake_bytes{table}`, `..._lake_files{table}` and
`..._lake_retained_bytes{table}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "spanscore_collector_"
SIGNALS = ("spans", "logs")

_HELP = {
    "stored": "Spans and log records committed to the lake.",
    "received": "Spans and log records received.",
    "refused": "Exports refused, by reason.",
    "commits": "Group commits to the lake.",
    "commits_failed": "Group commits that failed.",
    "maintenance_runs": "Background maintenance runs.",
    "maintenance_failed": "Background maintenance runs that failed.",
    "uptime_seconds": "Seconds since the collector started.",
    "last_commit_seconds": "How long the last commit took.",
    "queue_rows": "Rows waiting for the next commit.",
    "queue_bytes": "Bytes waiting for the next commit.",
    "commit_seconds": "How long group commits took.",
    "lake_bytes": "Bytes of the data and delete files the lake's current snapshot reads.",
    "lake_files": "Data and delete files the lake's current snapshot reads.",
    "lake_retained_bytes": "Bytes of files only older snapshots read, freed when they expire.",
}
_LAKE = {"bytes": "lake_bytes", "files": "lake_files", "retained_bytes": "lake_retained_bytes"}
_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _series(counter: str) -> tuple[str, dict[str, str]]:
    """(metric name without prefix and `_total`, labels) of a `Stats` counter."""
    signal, _, rest = counter.partition("_")
    if signal not in SIGNALS:
        signal, rest = "", counter
    if rest.startswith("refused_"):
        labels = {"reason": rest.removeprefix("refused_")}
        if signal:
            labels["signal"] = signal
        return "refused", labels
    if signal:
        return rest, {"signal": signal}
    return counter, {}


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    escaped = (
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(labels.items())
    )
    return "{" + ",".join(escaped) + "}"


def render(status: Mapping[str, object]) -> str:
    """The text exposition of a `/status` document (its counters, gauges, uptime, histograms
    and the lake's size)."""
    counters = status.get("counters") or {}
    gauges = dict(status.get("gauges") or {})  # type: ignore[call-overload]
    gauges["uptime_s"] = status.get("uptime_s", 0)
    families: dict[str, tuple[str, list[tuple[dict[str, str], float]]]] = {}
    for counter, value in sorted(counters.items()):  # type: ignore[attr-defined]
        name, labels = _series(str(counter))
        family = PREFIX + _NAME.sub("_", name) + "_total"
        families.setdefault(family, ("counter", []))[1].append((labels, float(value)))
    for gauge, value in sorted(gauges.items()):
        name = _seconds(_NAME.sub("_", str(gauge)))
        if isinstance(value, int | float):
            families.setdefault(PREFIX + name, ("gauge", []))[1].append(({}, float(value)))
    tables = status.get("lake") or {}
    for table, sizes in sorted(tables.items()):  # type: ignore[attr-defined]
        for key, name in _LAKE.items():
            if isinstance(sizes.get(key), int | float):
                families.setdefault(PREFIX + name, ("gauge", []))[1].append(
                    ({"table": str(table)}, float(sizes[key]))
                )
    lines = []
    for family, (kind, samples) in families.items():
        lines.extend(_header(family, kind))
        lines.extend(f"{family}{_labels(labels)} {_number(value)}" for labels, value in samples)
    histograms = status.get("histograms") or {}
    for histogram, h in sorted(histograms.items()):  # type: ignore[attr-defined]
        family = PREFIX + _seconds(_NAME.sub("_", str(histogram)))
        lines.extend(_header(family, "histogram"))
        for bound, count in zip(h["le"], h["counts"], strict=True):
            lines.append(f'{family}_bucket{{le="{float(bound):g}"}} {_number(count)}')
        lines.append(f'{family}_bucket{{le="+Inf"}} {_number(h["count"])}')
        lines.append(f"{family}_sum {_number(h['sum'])}")
        lines.append(f"{family}_count {_number(h['count'])}")
    return "\n".join(lines) + "\n"


def _header(family: str, kind: str) -> list[str]:
    short = family.removeprefix(PREFIX).removesuffix("_total")
    return [
        f"# HELP {family} {_HELP.get(short, short.replace('_', ' ') + '.')}",
        f"# TYPE {family} {kind}",
    ]


def _number(value: float) -> str:
    """A sample's value in full: `:g` wrote 1234567 as 1.23457e+06, and a counter read back
    that way goes backwards between scrapes."""
    value = float(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _seconds(name: str) -> str:
    return name[:-2] + "_seconds" if name.endswith("_s") else name
