"""Retrying what a retry can clear: catalog locks and DuckLake commit conflicts, with backoff;
and telling an interrupt (Ctrl-C inside a DuckDB query) from a real error."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb

from spanscore.lake.location import log
from spanscore.lake.locks import commit_turn, turn_of

T = TypeVar("T")


def is_transient(exc: BaseException) -> bool:
    """Errors that a retry can clear: catalog locks and DuckLake commit conflicts."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(
        marker in text
        for marker in (
            "database is locked",
            "Failed to commit DuckLake transaction",
            "Transaction conflict",
            "conflict",
            "could not serialize access",
            "deadlock detected",
            "SQLITE_BUSY",
            "Current transaction is aborted",  # a conflict inside a DuckLake maintenance call
        )
    )


def is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, also when it arrived during a DuckDB query: DuckDB then raises its own error
    ("Query interrupted"), caused by the KeyboardInterrupt."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt | duckdb.InterruptException):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def retrying(
    fn: Callable[[], T],
    *,
    con: duckdb.DuckDBPyConnection | None = None,
    deadline_s: float = 60.0,
    what: str = "lake transaction",
    transient: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Run `fn` (one whole transaction) again with jittered backoff while it fails transiently.

    DuckLake retries snapshot-id conflicts itself; what reaches us is a locked SQLite catalog
    (SQLite answers SQLITE_BUSY at once, without waiting) or a conflict that outlived DuckLake's
    own retries. `fn` must be safe to re-run from the start; a failed attempt is rolled back.

    On an embedded lake, each attempt holds the lake's commit turn (`locks.commit_turn`) when
    `con` is the lake's connection (or a cursor of it): pass it for every write transaction.
    """
    start = time.monotonic()
    turn = turn_of(con)
    delay = 0.005
    attempt = 0
    while True:
        attempt += 1
        try:
            with commit_turn(turn, deadline_s - (time.monotonic() - start)):
                return fn()
        except duckdb.Error as exc:
            if con is not None:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
            if not transient(exc) or time.monotonic() - start > deadline_s:
                raise
            if attempt in (1, 10, 100):
                log.debug("%s: transient failure, retrying (attempt %d): %s", what, attempt, exc)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)
