"""Naming evaluation runs on the command line: a run id, a unique prefix of one, `latest` (the
most recently started run that is not still running, a simulation's only when no other is) or
`previous` (the completed run of the same suite, and of the same kind, that started before
it: `store.latest_run`, `store.previous_run`)."""

from __future__ import annotations

import duckdb

from spanscore.evaluation.runs.store import latest_run, previous_run, runs

__all__ = ["RunNotFound", "resolve_run"]


class RunNotFound(ValueError):
    """No run, or more than one, answers to the name; the message says which exist."""


def resolve_run(con: duckdb.DuckDBPyConnection, name: str, *, suite: str | None = None) -> str:
    """The run id `name` stands for (optionally among the runs of one suite)."""
    name = name.strip()
    if name in ("latest", "previous"):
        found = latest_run(con, suite=suite)
        if found is not None and name == "previous":
            earlier = previous_run(con, found.run_id)
            if earlier is None:
                raise RunNotFound(
                    f"no previous run: the lake holds no completed run of suite "
                    f"{found.suite_name!r} before the latest, {found.run_id}"
                )
            return earlier.run_id
        if found is None:
            scope = f" of suite {suite!r}" if suite else ""
            raise RunNotFound(f"no {name} run: the lake holds no finished run{scope}")
        return found.run_id
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
