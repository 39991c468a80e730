"""`spanscore evaluate --engine ray`: a run's conversations scored by tasks on a Ray cluster.

The driver (the `evaluate` process) does what it does with the local engine: it pins the
snapshot, picks the conversations, records the run, asks the judge, summarises and checks the
gates. Only the rebuilding and scoring move: the conversations are cut into shards by a hash of
their id, and each shard is one Ray task that reads its spans from the lake at the run's pinned
snapshot, scores them as a local worker does, and commits its scores itself in one transaction.

- A task whose worker is lost is retried by Ray. Its commit is all or nothing, and a retry
  finds the scores a lost attempt committed and does not write them again: no double scores.
- The judge stays in the driver: a shard with judged metrics returns its deterministic scores
  and its questions, and the driver's one judge pool answers them (one budget, one cache) and
  commits the shard, as it does for the local engine's batches.
- Workers need the lake spec to mean the same thing where they run: a shared lake (PostgreSQL
  catalog, data on object storage) for a cluster of several hosts; an embedded lake only on a
  one-host cluster. The suite travels with the task, but the files it names (custom metrics)
  must be at the same path on every host.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from spanscore.evaluation.runs.chunks import Batch, chunks_of, score_chunk, worker_suite
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.store import missing_scores, score_table, write_scores_once
from spanscore.evaluation.suites.loaded import Deferred, LoadedSuite
from spanscore.evaluation.trajectory.rows import trajectory_rows
from spanscore.lake import connect

log = logging.getLogger("spanscore.evaluate")


INSTALL_HINT = "--engine ray needs Ray: pip install 'spanscore-evaluation[ray]'"


# Attempts after the first when a task's worker or node is lost (errors of the suite are
# not retried: they would fail again).
TASK_RETRIES = 3


# Environment the tasks need to open the same lake as the driver (object-storage credentials
# and endpoint, the data path of a PostgreSQL-catalog lake).
_FORWARDED_PREFIXES = ("AWS_", "SPANSCORE_")


class EngineUnavailable(RuntimeError):
    """The Ray engine cannot run (Ray not installed, the cluster cannot be reached)."""


def shard_of(conversation_id: str, shards: int) -> int:
    """The shard of a conversation: a hash of its id (independent of the sample's hash, so a
    10% sample still spreads over every shard)."""
    digest = hashlib.blake2b(conversation_id.encode(), digest_size=8, person=b"shard").digest()
    return int.from_bytes(digest, "big") % shards


def shards_for(todo: Sequence[str], batch_size: int, cpus: int) -> list[list[str]]:
    """The run's conversations in shards of about `batch_size`, and at least one per CPU of
    the cluster (while there are conversations for it); empty shards dropped."""
    count = max(math.ceil(len(todo) / max(1, batch_size)), min(cpus, len(todo)), 1)
    shards: list[list[str]] = [[] for _ in range(count)]
    for conversation_id in todo:
        shards[shard_of(conversation_id, count)].append(conversation_id)
    return [s for s in shards if s]


def score_shard(
    lake: str,
    snapshot: int,
    suite_spec: tuple[dict[str, Any], str, bool],
    conversation_ids: list[str],
    batch_size: int,
    write_as: str | None,
) -> Batch:
    """One Ray task: rebuild and score these conversations from the lake at `snapshot`; with
    `write_as` (the run id) and nothing waiting for the judge, commit the scores (once, see
    `write_scores_once`) and say so."""
    document, base_dir, allow_outside_metrics = suite_spec
    suite = worker_suite(document, base_dir, allow_outside_metrics)
    tables: list[pa.Table] = []
    deferred: list[Deferred] = []
    seen: set[str] = set()
    reader_con = connect(lake, snapshot=snapshot)
    try:
        reader = trajectory_rows(
            reader_con,
            conversation_ids=conversation_ids,
            attributes=suite.attribute_keys(),
            batch_rows=50_000,
        )
        for chunk in chunks_of(reader, max(1, batch_size)):
            scores, ids, waiting = score_chunk(suite, chunk)
            tables.append(scores)
            seen.update(ids)
            deferred += waiting
    finally:
        reader_con.close()
    missing = [missing_scores(c) for c in conversation_ids if c not in seen]
    if missing:
        tables.append(score_table(missing))
    scores = pa.concat_tables(tables) if tables else score_table([])
    written = False
    if write_as is not None and not deferred:
        writer = connect(lake)
        try:
            if not write_scores_once(writer, write_as, conversation_ids, scores):
                log.info("shard of %d conversations already committed", len(conversation_ids))
        finally:
            writer.close()
        written = True
    return scores, len(conversation_ids), deferred, written


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise EngineUnavailable(INSTALL_HINT) from None
    return ray


def check_available() -> None:
    """Raise `EngineUnavailable` when Ray is not installed."""
    _ray()


def _join(ray: Any, address: str | None) -> bool:
    """Connect this process to the cluster (or start a local one); True when it did (and so
    must disconnect). A process already connected (`ray.init` by its caller) stays so."""
    if ray.is_initialized():
        return False
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_PREFIXES)}
    kwargs: dict[str, Any] = {
        "runtime_env": {"env_vars": env} if env else None,
        "logging_level": logging.WARNING,
        "log_to_driver": False,
    }
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # A cluster of this run only: "local" starts one, where no address would join the
        # latest cluster started on this machine (Ray's /tmp/ray/ray_current_cluster),
        # whose workers may not have this run's packages.
        address = "local"
        kwargs["include_dashboard"] = False
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EngineUnavailable(
            f"cannot join the Ray cluster at {address or os.environ.get('RAY_ADDRESS')}: {exc}"
        ) from exc
    return True


def ray_batches(
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    todo: Sequence[str],
    options: RunOptions,
    write_as: str | None,
) -> Iterator[Batch]:
    """The run's shards scored by Ray tasks, in completion order (an `Engine`)."""
    ray = _ray()
    if "://" not in lake and os.path.exists(lake):
        lake = os.path.abspath(lake)  # tasks do not run in this directory
    joined = _join(ray, options.ray_address)
    pending: list[Any] = []
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        shards = shards_for(todo, options.batch_size, cpus)
        log.info("scoring %d conversations in %d Ray tasks", len(todo), len(shards))
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(score_shard)
        suite_ref = ray.put((suite.document(), str(suite.base_dir), suite.allow_outside_metrics))
        waiting = iter(shards)

        def submit() -> None:
            shard = next(waiting, None)
            if shard is not None:
                pending.append(
                    task.remote(lake, snapshot, suite_ref, shard, options.batch_size, write_as)
                )

        # Two shards per CPU in flight: every worker busy, the results held at once bounded.
        for _ in range(2 * cpus):
            submit()
        while pending:
            done, pending[:] = ray.wait(pending, num_returns=1)
            batch: Batch = ray.get(done[0])
            submit()
            yield batch
    finally:
        for ref in pending:  # an interrupted or failed run: the rest is not wanted
            ray.cancel(ref, force=True)
        if joined:
            ray.shutdown()
