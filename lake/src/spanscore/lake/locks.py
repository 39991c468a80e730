"""Who may do what on a lake: one writing collector per embedded lake (`single_writer`), one
maintenance leader among the collectors of a shared lake (`elected`), and one write transaction
at a time on an embedded lake, in turns (`commit_turn`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spanscore.lake.location import LakeError, LakeLocation


class LakeHeld(LakeError):
    """`single_writer` refused: another process holds the lake. `holder` is what that process
    recorded: its `pid`, and, once it listens, `http` (the URL of its OTLP/HTTP port) and
    `auth` ("yes" when it asks for a token)."""

    def __init__(self, message: str, holder: dict[str, str]) -> None:
        super().__init__(message)
        self.holder = holder


def _read_holder(text: str) -> dict[str, str]:
    """The lock file's record: the pid on its first line, then one `key value` a line."""
    lines = text.splitlines()
    holder = {"pid": lines[0].strip()} if lines and lines[0].strip().isdigit() else {}
    for line in lines[1:]:
        key, _, value = line.strip().partition(" ")
        if key and value:
            holder[key] = value
    return holder


@contextlib.contextmanager
def single_writer(location: LakeLocation, what: str = "collector") -> Iterator[Callable[..., None]]:
    """Hold an embedded lake for one writing service (a collector), or refuse at once
    (`LakeHeld`, with what the holder recorded).

    An embedded lake's SQLite catalog is single-host, and one collector per lake is what its
    group commit is sized for: a second one is refused with a message that says what to do. The
    lock is an OS file lock, so it goes with the process however that ends. A lake with a
    PostgreSQL catalog takes any number of collectors, and this does nothing.

    Yields `record(**fields)`, which writes into the lock file what another process may need
    to know of the holder (`http=URL` where it listens: `spanscore simulate` sends there).
    """
    if location.directory is None:
        yield lambda **fields: None
        return
    import fcntl

    location.directory.mkdir(parents=True, exist_ok=True)
    path = location.directory / f"{what}.lock"
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = _read_holder(handle.read())
            pid = f" (pid {holder['pid']})" if "pid" in holder else ""
            raise LakeHeld(
                f"another {what} is already running on the embedded lake {location.directory}"
                f"{pid} (its SQLite catalog serves one host and one collector): "
                "stop it, or put the catalog on PostgreSQL (--lake postgresql://...) to run "
                "several collectors",
                holder,
            ) from None

        def record(**fields: str) -> None:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n" + "".join(f"{k} {v}\n" for k, v in fields.items()))
            handle.flush()

        record()
        yield record
    finally:
        handle.close()


def writer_pid(directory: Path | None, what: str = "collector") -> int | None:
    """The process id of the `single_writer` (a collector) holding the embedded lake in
    `directory` now, or None: none holds it (or it is not embedded)."""
    path = directory / f"{what}.lock" if directory is not None else None
    if path is None or not path.exists():
        return None
    import fcntl

    with path.open("r") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            # The pid is the record's first line (`record` may add lines after it).
            pid = _read_holder(handle.read()).get("pid")
            return int(pid) if pid is not None else 0
        return None  # closing the file releases the shared lock just taken


def _lock_key(location: LakeLocation, name: str) -> int:

    digest = hashlib.sha256(f"spanscore:{name}:{location.metadata_schema or ''}".encode())
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


@contextlib.contextmanager
def elected(location: LakeLocation, name: str = "maintenance") -> Iterator[bool]:
    """Whether this process is the one to do `name` now (yields True), or another one is.

    On a PostgreSQL catalog the election is a session advisory lock in the catalog's database,
    taken without waiting and held until the block ends (or the process dies: PostgreSQL
    releases it with the connection). An embedded lake has one collector: always elected.
    """
    if not location.is_postgres:
        yield True
        return
    import psycopg

    dsn = location.catalog.removeprefix("postgres:")
    key = _lock_key(location, name)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as pg:
        row = pg.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        won = bool(row and row[0])
        try:
            yield won
        finally:
            if won:
                with contextlib.suppress(psycopg.Error):
                    pg.execute("SELECT pg_advisory_unlock(%s)", [key])


# --- the commit turn of an embedded lake ---------------------------------------------------------
#
# SQLite answers a writer that finds the catalog locked, or its snapshot outdated by another
# commit, with "database is locked" at once, and DuckLake takes the catalog's write lock only at
# COMMIT. A long transaction (the collector's group commit writes its Parquet file first) then
# loses every race to a process committing small transactions back to back: measured, a
# collector retried one commit for 15 s while another process wrote 150 single-row inserts, and
# its exporters' 10 s deadlines passed. Writers of an embedded lake therefore take turns: each
# write transaction run through `retrying` holds the lake's turn from BEGIN to COMMIT.
#
# The turn is two OS file locks: a writer queues on `commit.queue`, takes `commit.turn`, then
# leaves the queue. A writer that just finished must queue again behind the one waiting, so two
# busy writers alternate instead of the faster one winning every time.

_TURN_POLL_S = (0.001, 0.002, 0.005, 0.01)
_turns: weakref.WeakKeyDictionary[Any, Path] = weakref.WeakKeyDictionary()
_held = threading.local()


def register_turn(con: Any, directory: Path) -> None:
    """Write transactions on `con` (through `retrying`) take the turn of the lake in
    `directory`."""
    _turns[con] = directory.resolve()  # one name per lake: the turn is re-entrant by name


def turn_of(con: Any) -> Path | None:
    """The lake directory whose turn `con`'s write transactions take, if any."""
    return _turns.get(con) if con is not None else None


@contextlib.contextmanager
def commit_turn(directory: Path | None, deadline_s: float) -> Iterator[None]:
    """Hold the commit turn of the embedded lake in `directory` (nothing for None), waiting at
    most `deadline_s`; re-entrant within a thread."""
    held: set[Path] = _held.__dict__.setdefault("paths", set())
    if directory is None or directory in held:
        yield
        return
    import fcntl

    queue = (directory / "commit.queue").open("a+")
    turn = (directory / "commit.turn").open("a+")
    try:
        waited_from = time.monotonic()
        for handle in (queue, turn):
            attempt = 0
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - waited_from > deadline_s:
                        raise LakeError(
                            f"another process has been writing to the lake {directory} for "
                            f"more than {deadline_s:.0f} s: its write transaction holds the "
                            "lake's commit turn"
                        ) from None
                    time.sleep(_TURN_POLL_S[min(attempt, len(_TURN_POLL_S) - 1)])
                    attempt += 1
        fcntl.flock(queue, fcntl.LOCK_UN)
        held.add(directory)
        try:
            yield
        finally:
            held.discard(directory)
    finally:
        turn.close()  # closing releases the lock, also when the process dies
        queue.close()
