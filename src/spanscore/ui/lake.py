"""The app's lake: one long-lived connection, a cursor per request (the review app's, and the
MCP server's, read-only).

A reading request works in one transaction, so every query of a page sees the same snapshot
of the lake while the collector goes on committing; it writes nothing and holds nothing back.
A writing request (a label, a queue) commits its own small transaction, taking the embedded
lake's commit turn like every writer.

The app is a tool for a few reviewers beside a collector that must keep up with production: its
reads run one at a time, on one DuckDB thread, so that however many pages are open it takes at
most one core from the collector (bench/ui.py measures the collector's rate with and without
people browsing).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb

from spanscore.lake import ALIAS, connect, side_cursor
from spanscore.lake.guard import seal


class AppLake:
    def __init__(self, lake: str, *, read_only: bool = False) -> None:
        self.lake = lake
        # Read-write for the app: it writes labels and queues (and a lake from before they
        # existed gets their tables). Read-only for the MCP server, which only reads and runs
        # a model's SQL: attached read-only and sealed (`spanscore.lake.guard`).
        self._con = connect(lake, threads=1, read_only=read_only)
        self.sealed = False
        if read_only:
            try:
                self.sealed = seal(self._con)
            except BaseException:
                self._con.close()
                raise
        self._lock = threading.Lock()
        self._reading = threading.Semaphore(1)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:  # cursors are made one at a time; each is then its own connection
            cur = side_cursor(self._con)
        cur.execute(f"USE {ALIAS}")
        return cur

    @contextlib.contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor reading one snapshot of the lake (one reader at a time)."""
        with self._reading:
            yield from self._snapshot()

    def _snapshot(self) -> Iterator[duckdb.DuckDBPyConnection]:
        cur = self._cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                yield cur
            finally:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
        finally:
            cur.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor whose writes commit at once (each in its own transaction)."""
        cur = self._cursor()
        try:
            yield cur
        finally:
            cur.close()

    def close(self) -> None:
        self._con.close()
