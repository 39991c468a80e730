"""Engines: where a run's conversations are rebuilt and scored.

An engine is a function that gives a run's batches (`Engine`): `local` (a process pool on this
machine, `engines.local`) or `ray` (shards over a Ray cluster, `engines.ray`). A new engine is
one module with such a function, and one line in `engine()`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from spanscore.evaluation.runs.chunks import Batch
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.suites.loaded import LoadedSuite


class Engine(Protocol):
    def __call__(
        self,
        lake: str,
        snapshot: int,
        suite: LoadedSuite,
        todo: Sequence[str],
        options: RunOptions,
        write_as: str | None,
    ) -> Iterator[Batch]:
        """(score rows, conversations, what waits for the judge, committed) per batch, in
        completion order. Given `write_as` (the run id), an engine may commit a batch's
        scores itself when nothing in it waits for the judge (and says so: committed)."""
        ...


def engine(name: str) -> Engine:
    """The engine named by `RunOptions.engine`."""
    if name == "ray":
        # Ray is an optional dependency, and slow to import: only a run that uses it pays.
        from spanscore.evaluation.runs.engines.ray import ray_batches

        return ray_batches
    if name != "local":
        raise ValueError(f"unknown engine {name!r} (local, ray)")
    from spanscore.evaluation.runs.engines.local import local_batches

    return local_batches


def score_batches(
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    todo: Sequence[str],
    options: RunOptions,
    write_as: str | None = None,
) -> Iterator[Batch]:
    """The run's batches from the engine its options name (none when there is nothing to do)."""
    if not todo:
        return iter(())
    return engine(options.engine)(lake, snapshot, suite, todo, options, write_as)
