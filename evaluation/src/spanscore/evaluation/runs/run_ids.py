"""Naming evaluation runs on the command line: a run id, a unique prefix of one, `latest` (the
most recently started run that is not still running) or `previous` (the one before it)."""

from __future__ import annotations

import duckdb

from spanscore.evaluation.runs.store import runs

__all__ = ["RunNotFound", "resolve_run"]


class RunNotFound(ValueError):
    """No run, or more than one, answers to the name; the message says which exist."""


def resolve_run(con: duckdb.DuckDBPyConnection, name: str, *, suite: str | None = None) -> str:
    """The run id `name` stands for (optionally among the runs of one suite)."""
    name = name.strip()
    if name in ("latest", "previous"):
        newest = runs(con, suite=suite, finished=True, limit=2)
        index = 0 if name == "latest" else 1
        if len(newest) <= index:
            count = "no finished run" if not newest else "only one finished run"
            scope = f" of suite {suite!r}" if suite else ""
            raise RunNotFound(f"no {name} run: the lake holds {count}{scope}")
        return newest[index].run_id
    if not name:
        raise RunNotFound("an empty run id")
    ids = [r.run_id for r in runs(con, suite=suite, prefix=name)]
    if name in ids:
        return name
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise RunNotFound(
            f"no evaluation run {name!r} in this lake (`spanscore runs` lists them; "
            "`latest` and `previous` name the last two)"
        )
    raise RunNotFound(
        f"{name!r} is the start of {len(ids)} run ids ({', '.join(ids[:5])}"
        f"{', ...' if len(ids) > 5 else ''}): give more of it"
    )
