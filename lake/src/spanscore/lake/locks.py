"""Who may do what on a lake: one writing collector per embedded lake (`single_writer`), and one
maintenance leader among the collectors of a shared lake (`elected`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

from spanscore.lake.location import LakeError, LakeLocation


@contextlib.contextmanager
def single_writer(location: LakeLocation, what: str = "collector") -> Iterator[None]:
    """Hold an embedded lake for one writing service (a collector), or refuse at once.

    An embedded lake's SQLite catalog is single-host, and one collector per lake is what its
    group commit is sized for: a second one is refused with a message that says what to do. The
    lock is an OS file lock, so it goes with the process however that ends. A lake with a
    PostgreSQL catalog takes any number of collectors, and this does nothing.
    """
    if location.directory is None:
        yield
        return
    import fcntl

    location.directory.mkdir(parents=True, exist_ok=True)
    path = location.directory / f"{what}.lock"
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LakeError(
                f"another {what} is already running on the embedded lake {location.directory} "
                "(its SQLite catalog serves one host and one collector): stop it, or put the "
                "catalog on PostgreSQL (--lake postgresql://...) to run several collectors"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


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
