"""Context into threads: spans started in a worker thread keep their conversation.

asyncio tasks copy the current context by themselves; threads do not. While instrumented,
`threading.Thread` runs its target in the context of the code that started it, and
`ThreadPoolExecutor.submit` runs each call in the context of the code that submitted it (so
`conversation(...)` and the active span follow the work). `restore()` puts the originals back.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

_originals: dict[str, Any] = {}


def patch() -> None:
    """Idempotent."""
    if _originals:
        return
    start = threading.Thread.start
    submit: Any = futures.ThreadPoolExecutor.submit

    @functools.wraps(start)
    def start_in_context(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        ctx = contextvars.copy_context()
        run = self.run

        def run_in_context() -> None:
            ctx.run(run)

        self.run = run_in_context  # type: ignore[method-assign]
        start(self, *args, **kwargs)

    @functools.wraps(submit)
    def submit_in_context(
        self: futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> futures.Future[Any]:
        ctx = contextvars.copy_context()
        future: futures.Future[Any] = submit(self, ctx.run, fn, *args, **kwargs)
        return future

    _originals.update(start=start, submit=submit)
    threading.Thread.start = start_in_context  # type: ignore[method-assign]
    futures.ThreadPoolExecutor.submit = submit_in_context  # type: ignore[method-assign,assignment]


def restore() -> None:
    if not _originals:
        return
    threading.Thread.start = _originals["start"]  # type: ignore[method-assign]
    futures.ThreadPoolExecutor.submit = _originals["submit"]  # type: ignore[method-assign]
    _originals.clear()
