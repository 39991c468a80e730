"""How fast the judge may call: `AdaptiveLimit` finds the provider's concurrency by itself (slow
start, additive increase, cut on 429), and the retry-after headers and backoff decide when to
try again."""

from __future__ import annotations

import asyncio
import email.utils
import heapq
import itertools
import random
import re
import time
from collections.abc import Mapping

# --- concurrency ---------------------------------------------------------------------------


class AdaptiveLimit:
    """How many calls may be in flight: doubles each round trip from `start` until the first
    429 (slow start); on a 429, drops to 90 % of what was in flight; then, below the level that
    was refused, climbs back by half the gap per round trip (at least one), and above it by one
    per round trip. Always within [1, ceiling]. Only calls started after the last cut can cut
    again, so one burst of 429s cuts the limit once.

    The fast climb back matters against a provider with a fixed capacity: with a plain +1 per
    round trip, every cut leaves the provider under-used for many round trips (measured with
    `bench/judge.py`: 80 % of its capacity with +1).

    Free slots go to the waiting call with the lowest ticket (`ticket()`, taken once per
    question): a retry keeps its place instead of queueing behind every later question, so
    questions are answered in the order they were asked and the run's batches complete one
    after another, each freeing the evaluator to send the next, rather than all at the end."""

    DECREASE = 0.9

    def __init__(self, ceiling: int, start: int = 4) -> None:
        self.ceiling = ceiling
        self.limit = float(min(ceiling, max(1, start)))
        self.in_flight = 0
        self.peak = 0
        self.lowest_after_throttle: float | None = None
        self.throttles = 0
        self._refused_at: float | None = None
        self._slow_start = True
        self._epoch = 0
        self._tickets = itertools.count()
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []  # a heap by ticket

    def ticket(self) -> int:
        """A question's place in line, kept by all its attempts."""
        return next(self._tickets)

    async def acquire(self, ticket: int | None = None) -> int:
        """Wait for a slot (by `ticket`, default: last in line); the epoch to release with."""
        if self.in_flight < int(self.limit) and not self._waiting:
            self.in_flight += 1
        else:
            handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            place = self.ticket() if ticket is None else ticket
            heapq.heappush(self._waiting, (place, handed))
            try:
                await handed  # the slot is counted by whoever hands it over
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self.in_flight -= 1  # handed over as we were cancelled: pass it on
                    self._hand_over()
                raise
        self.peak = max(self.peak, self.in_flight)
        return self._epoch

    async def release(self, epoch: int, throttled: bool) -> None:
        self.in_flight -= 1
        if throttled:
            self.throttles += 1
            if epoch == self._epoch:
                self._slow_start = False
                self._epoch += 1
                # What was in flight when the provider refused is its limit: go a little
                # below it (a gentler cut than TCP's half keeps the provider busier).
                refused_at = float(self.in_flight + 1)
                self._refused_at = refused_at
                self.limit = max(1.0, min(self.limit, refused_at) * self.DECREASE)
                low = self.lowest_after_throttle
                self.lowest_after_throttle = self.limit if low is None else min(low, self.limit)
        elif self._slow_start:
            self.limit = min(float(self.ceiling), self.limit + 1)
        else:
            gap = (self._refused_at or 0.0) - self.limit
            step = max(1.0, gap / 2)  # per round trip: `limit` answers
            self.limit = min(float(self.ceiling), self.limit + step / self.limit)
        self._hand_over()

    def _hand_over(self) -> None:
        """Give the free slots to the first waiting calls in line (cancelled ones skipped)."""
        while self._waiting and self.in_flight < int(self.limit):
            _, handed = heapq.heappop(self._waiting)
            if not handed.done():
                self.in_flight += 1
                handed.set_result(None)


# --- retry timing --------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a throttled or failed answer asks for, from `retry-after-ms`, `retry-after`
    (seconds or an HTTP date) or the `x-ratelimit-reset-*` durations (`1s`, `6m0s`, `20ms`)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is not None:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                parsed = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):  # neither seconds nor a date: ignored
                parsed = None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - time.time())
    resets = [
        _duration(lowered[k])
        for k in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if k in lowered
    ]
    found = [r for r in resets if r is not None]
    return max(found) if found else None


def _duration(text: str) -> float | None:
    parts = _DURATION.findall(text)
    if not parts:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def backoff_s(attempt: int, base: float = 0.5, cap: float = 20.0) -> float:
    """Exponential backoff with full jitter (attempt 1 is the first retry)."""
    return random.uniform(0, min(cap, base * 2 ** min(attempt - 1, 32)))
