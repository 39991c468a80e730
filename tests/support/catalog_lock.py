"""Another process holds an embedded lake's catalog lock (SQLite `BEGIN EXCLUSIVE`): the
collector's commits retry, exports wait for them, its queue fills. A stalled commit, made real.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The blocker's program: it takes the lock, says "locked", and holds it until stdin closes.
LOCK_CATALOG = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
"""


class CatalogLock:
    """Another process holds the catalog's write lock: commits retry, exports wait, the queue
    fills. (A separate process: POSIX locks do not conflict within one process.)"""

    def __init__(self, lake_dir: Path) -> None:
        self.lake_dir = lake_dir
        self.blocker: subprocess.Popen[str] | None = None

    def hold(self) -> None:
        self.blocker = subprocess.Popen(
            [sys.executable, "-c", LOCK_CATALOG, str(self.lake_dir / "catalog.sqlite")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.blocker.stdout is not None
        assert self.blocker.stdout.readline().strip() == "locked"

    def release(self) -> None:
        if self.blocker is not None and self.blocker.poll() is None:
            self.blocker.communicate("", timeout=60)
