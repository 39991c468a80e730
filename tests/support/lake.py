"""Reading a lake the way another process would: a fresh connection per read, closed after, so
that a test sees only what the collector or the evaluator committed."""

from __future__ import annotations

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
