"""The collector's own counters: what it received, stored, refused and dropped, by reason; a
few gauges; and histograms (commit latency), with fixed buckets."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter

# Upper bounds of the histograms' buckets, in seconds: a group commit on local disk takes
# milliseconds, one on object storage or a busy PostgreSQL catalog up to seconds, and one that
# retries conflicts up to its deadline.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Stats:
    """Thread-safe named counters plus a few gauges and histograms; `snapshot()` is what
    /status returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._gauges: dict[str, float] = {}
        # name -> (count per bucket, the last for values past every bound), sum, count
        self._histograms: dict[str, tuple[list[int], list[float]]] = {}
        self.started = time.time()

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def observe(self, name: str, value: float) -> None:
        """Count `value` into the histogram `name` (buckets `SECONDS_BUCKETS`)."""
        index = bisect.bisect_left(SECONDS_BUCKETS, value)  # the first bound >= value
        with self._lock:
            buckets, total = self._histograms.setdefault(
                name, ([0] * (len(SECONDS_BUCKETS) + 1), [0.0])
            )
            buckets[index] += 1
            total[0] += value

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            counts = dict(sorted(self._counts.items()))
            gauges = dict(sorted(self._gauges.items()))
            histograms = {
                name: {
                    # cumulative, as Prometheus gives them: observations <= each bound
                    "le": list(SECONDS_BUCKETS),
                    "counts": list(itertools.accumulate(buckets[:-1])),
                    "count": sum(buckets),
                    "sum": round(total[0], 6),
                }
                for name, (buckets, total) in sorted(self._histograms.items())
            }
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "counters": counts,
            "gauges": gauges,
            "histograms": histograms,
        }
