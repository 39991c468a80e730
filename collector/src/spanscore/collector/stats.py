"""The collector's own counters: what it received, stored, refused and dropped, by reason."""

from __future__ import annotations

import threading
import time
from collections import Counter


class Stats:
    """Thread-safe named counters plus a few gauges; `snapshot()` is what /status returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._gauges: dict[str, float] = {}
        self.started = time.time()

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            counts = dict(sorted(self._counts.items()))
            gauges = dict(sorted(self._gauges.items()))
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "counters": counts,
            "gauges": gauges,
        }
