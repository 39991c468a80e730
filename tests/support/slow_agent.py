"""An agent that takes a second per answer, so that a test can stop a simulation while
it runs (`simulate --agent tests.support.slow_agent:answer`)."""

from __future__ import annotations

import time


def answer(message: str) -> str:
    time.sleep(1.0)
    return f"noted: {message}"
