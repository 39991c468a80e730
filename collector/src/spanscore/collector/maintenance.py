"""Lake maintenance beside ingest: compaction as soon as it is due, the rest on an interval.

One thread runs `Maintenance.run`. Every `maintenance_interval_s` it runs the whole of
`lake.maintain` (flushing inlined rows, compaction, snapshot expiry, file cleanup, stored
trajectories); in between, compaction alone whenever `compact_after_commits` commits were made
since the last, and its first stage alone (`lake.maintain(early=True)`: small files rewritten
into sorted files that the regular compaction merges again) whenever
`compact_after_small_commits` small ones (under SMALL_COMMIT_SPANS spans on average) were made
since the last compaction of either kind (`count_commit`, called by the writer after each
commit, wakes it).

Each step holds the writer (`GroupCommitWriter.paused`): exports wait meanwhile, and a step that
another process keeps failing gives up after MAINTENANCE_STEP_DEADLINE_S and runs again next
time. With several collectors on one lake, one at a time maintains it (`lake.elected`).
Maintenance never stops ingestion: a failure is counted and logged, and the loop goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from spanscore import lake

from . import secrets
from .config import SMALL_COMMIT_SPANS, CollectorConfig
from .stats import Stats
from .writer import GroupCommitWriter

log = logging.getLogger("spanscore.collector")


def _data_kept(con: Any) -> dict[str, str | None]:
    from spanscore.lake.lifecycle import oldest_kept

    return {k: v.isoformat() if v is not None else None for k, v in oldest_kept(con).items()}


# Longest a maintenance step retries while it holds the writer (see `Maintenance.run`).
MAINTENANCE_STEP_DEADLINE_S = 5.0


class Maintenance:
    """The maintenance of one collector's lake; `run` in a thread of its own, `stop` to end it."""

    def __init__(
        self,
        config: CollectorConfig,
        location: lake.LakeLocation,
        con: Any,
        writer: GroupCommitWriter,
        stats: Stats,
    ) -> None:
        self.config = config
        self.location = location
        self._con = con
        self.writer = writer
        self.stats = stats
        self._stop = threading.Event()
        # Set when `compact_after_commits` commits, or `compact_after_small_commits` small ones,
        # were made since the last compaction (or to stop): wakes the maintenance thread
        # before its interval is up.
        self.compaction_due = threading.Event()
        self.commits_since_compaction = 0
        self.spans_since_compaction = 0
        # Commits since the last compaction of either stage, and their spans: past
        # `compact_after_small_commits` small ones, the first stage is due.
        self.commits_since_early = 0
        self.spans_since_early = 0
        self.early_due = False
        # The oldest rows of each kind, as the last full maintenance left them (/status).
        self.kept: dict[str, str | None] = {}

    def count_commit(self, spans: int) -> None:
        """The writer committed `spans` spans (its thread): past `compact_after_commits`
        commits, or `compact_after_small_commits` small ones, wake maintenance."""
        self.commits_since_compaction += 1
        self.spans_since_compaction += spans
        self.commits_since_early += 1
        self.spans_since_early += spans
        due = self.config.compact_after_commits
        small_due = self.config.compact_after_small_commits
        if due and self.commits_since_compaction >= due:
            self.compaction_due.set()
        elif (
            small_due
            and self.commits_since_early >= small_due
            and self.spans_since_early < self.commits_since_early * SMALL_COMMIT_SPANS
        ):
            self.early_due = True
            self.compaction_due.set()

    def run(self) -> None:
        """Maintenance every `maintenance_interval_s`; between two, compaction alone whenever
        `compact_after_commits` commits were made since the last (a busy lake then never holds
        more small files than that, whatever the interval), and its first stage alone whenever
        `compact_after_small_commits` small ones were (a quiet one then holds a file per a
        dozen small commits)."""
        con = lake.side_cursor(self._con)
        try:
            self.kept = _data_kept(con)
        except Exception as exc:  # measured again after each maintenance
            log.warning("could not measure the oldest data kept: %s", secrets.describe_error(exc))
        interval = self.config.maintenance_interval_s
        next_full = time.monotonic() + interval
        while True:
            self.compaction_due.wait(max(0.0, next_full - time.monotonic()))
            if self._stop.is_set():
                return
            full = time.monotonic() >= next_full
            self.compaction_due.clear()
            # The first stage alone when only it is due (the writer's thread may set these
            # meanwhile: a commit counted now wakes the next round).
            due = self.config.compact_after_commits
            early = (
                not full and self.early_due and not (due and self.commits_since_compaction >= due)
            )
            self.early_due = False
            self.commits_since_early = self.spans_since_early = 0
            if not early:
                self.commits_since_compaction = self.spans_since_compaction = 0
            if full:
                next_full = time.monotonic() + interval
            try:
                started = time.monotonic()
                # Several collectors on one lake: one of them at a time compacts and expires.
                with lake.elected(self.location, "maintenance") as leader:
                    if not leader:
                        self.stats.add("maintenance_skipped")
                        log.debug("maintenance: another process is running it")
                        continue
                    done = lake.maintain(
                        con,
                        expire_older_than_s=self.config.snapshot_retention_s,
                        delete_older_than_s=self.config.snapshot_retention_s,
                        snapshot_interval_s=self.config.snapshot_interval_s,
                        exclusive=self.writer.paused,
                        # Exports wait while a step holds the writer: a step that another
                        # process keeps failing gives up soon and runs again next time.
                        step_deadline_s=MAINTENANCE_STEP_DEADLINE_S,
                        store_settled_after_s=(
                            self.config.store_settled_after_s
                            if self.config.store_trajectories
                            else None
                        ),
                        # a first run over a large lake goes on next time
                        store_deadline_s=max(self.config.maintenance_interval_s / 2, 1.0),
                        compact_only=not full,
                        early=early,
                        retention_days=self.config.retention_days,
                        score_retention_days=self.config.score_retention_days,
                    )
                    if full:
                        self.kept = _data_kept(con)
                self.stats.add(
                    "maintenance_runs" if full else "early_compactions" if early else "compactions"
                )
                for counted in (
                    "span_files_sorted",
                    "log_files_sorted",
                    "early_files_sorted",
                    "records_resolved",
                    "snapshots_thinned",
                ):
                    self.stats.add(counted, done.get(counted, 0))
                log.info(
                    "maintenance" if full else "early compaction" if early else "compaction",
                    extra={
                        **done,
                        "seconds": round(time.monotonic() - started, 3),
                        # What DuckDB holds (bounded by memory_limit), to tell it from the rest.
                        "duckdb_memory_mib": {
                            tag: size >> 20 for tag, size in lake.memory_in_use(con).items()
                        },
                    },
                )
            except Exception as exc:  # maintenance must never stop ingestion
                self.stats.add("maintenance_failed")
                log.warning("maintenance failed: %s", secrets.describe_error(exc))

    def data_kept(self) -> dict[str, Any]:
        """What /status says of the data: its retention, and the oldest rows kept."""
        return {
            "retention_days": self.config.retention_days,
            "score_retention_days": self.config.score_retention_days,
            **self.kept,
        }

    def stop(self) -> None:
        """End `run` at its next wake-up (now, unless a step is running)."""
        self._stop.set()
        self.compaction_due.set()
