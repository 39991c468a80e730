"""Reading a lake the way another process would: a fresh connection per read, closed after, so
that a test sees only what the collector or the evaluator committed."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from spanscore.lake import connect


def query(lake: Path | str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Read the lake from a fresh connection, as another process would."""
    con = connect(lake)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def copy_lake(source: Path, target: Path) -> Path:
    """A copy of an embedded lake at `target` that reads and writes its own files: the catalog
    names its data directory in full, so the copy's catalog is pointed at the copy's."""
    import os
    import shutil
    import sqlite3

    shutil.copytree(source, target)
    with contextlib.closing(sqlite3.connect(target / "catalog.sqlite")) as catalog, catalog:
        catalog.execute(
            "UPDATE ducklake_metadata SET value = ? WHERE key = 'data_path'",
            [str(target / "data") + os.sep],
        )
    return target
