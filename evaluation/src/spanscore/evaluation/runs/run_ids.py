"""Naming evaluation runs on the command line: a run id, a unique prefix of one, `latest` (the
most recently started run that is not still running) or `previous` (the one before it)."""

from __future__ import annotations

import duckdb

__all__ = ["RunNotFound", "resolve_run"]


class RunNotFound(ValueError):
    """No run, or more than one, answers to the name; the message says which exist."""


def resolve_run(con: duckdb.DuckDBPyConnection, name: str, *, suite: str | None = None) -> str:
    """The run id `name` stands for (optionally among the runs of one suite)."""
    name = name.strip()
    where, params = ("WHERE suite_name = ?", [suite]) if suite else ("", [])
    if name in ("latest", "previous"):
        finished = "status <> 'running'"
        rows = con.execute(
            f"SELECT run_id FROM eval_runs {where + ' AND ' if where else 'WHERE '}{finished} "
            "ORDER BY started_at DESC, run_id DESC LIMIT 2",
            params,
        ).fetchall()
        index = 0 if name == "latest" else 1
        if len(rows) <= index:
            count = "no finished run" if not rows else "only one finished run"
            scope = f" of suite {suite!r}" if suite else ""
            raise RunNotFound(f"no {name} run: the lake holds {count}{scope}")
        return str(rows[index][0])
    if not name:
        raise RunNotFound("an empty run id")
    rows = con.execute(
        f"SELECT run_id FROM eval_runs {where + ' AND ' if where else 'WHERE '}"
        "starts_with(run_id, ?) ORDER BY started_at DESC",
        [*params, name],
    ).fetchall()
    ids = [str(r[0]) for r in rows]
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
