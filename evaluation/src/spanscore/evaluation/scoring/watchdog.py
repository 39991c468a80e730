"""The time limit of one score: each assertion and metric gets a time limit per conversation
(default 30 s). A watchdog thread interrupts the scoring thread when the limit passes; the
score is then an error saying so, and the run goes on. It works where Python can deliver
signals: in the main thread of the evaluating process and of each worker (where scoring runs).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

DEFAULT_TIME_LIMIT_S = 30.0


class TimeLimitExceeded(BaseException):
    """An assertion ran past its time limit."""


class Watchdog:
    """Interrupts the thread that created it when one `guard()` lasts longer than `limit_s`.

    Create it in the scoring thread (the main thread of its process); `begin()` and `end()`
    around each assertion cost a few attribute writes."""

    def __init__(self, limit_s: float = DEFAULT_TIME_LIMIT_S) -> None:
        self.limit_s = limit_s
        self._sequence = 0
        self._started: float | None = None
        self._fired = -1
        self._usable = (
            limit_s > 0
            and threading.current_thread() is threading.main_thread()
            and hasattr(signal, "pthread_kill")
        )
        self._previous: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._target = threading.get_ident()

    def start(self) -> Watchdog:
        if self._usable and self._thread is None:
            self._previous = signal.signal(signal.SIGALRM, self._interrupt)
            self._thread = threading.Thread(
                target=self._watch, name="spanscore-watchdog", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)

    def begin(self) -> None:
        """An assertion starts: its clock runs."""
        self._sequence += 1
        self._started = time.monotonic()

    def end(self) -> None:
        self._started = None

    def _watch(self) -> None:
        tick = max(0.01, min(0.25, self.limit_s / 4))
        while not self._stop.wait(tick):
            started, sequence = self._started, self._sequence
            overdue = started is not None and time.monotonic() - started > self.limit_s
            if overdue and self._fired != sequence:
                self._fired = sequence
                signal.pthread_kill(self._target, signal.SIGALRM)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        # A signal that arrives after its assertion ended is for nobody.
        if self._started is not None and self._fired == self._sequence:
            raise TimeLimitExceeded(f"took longer than its time limit of {self.limit_s:g} s")
