"""The data's lifecycle: retention (rows past `retention_days` deleted by maintenance) and
erasure (`spanscore erase`), each in two phases.

1. The rows leave the lake's current data in one transaction: a reader sees a conversation
   whole or not at all, and a process killed meanwhile leaves the lake as it was.
2. They leave the disk: the data files holding them are rewritten without them
   (`ducklake_rewrite_data_files`), the snapshots that still reference the old files are
   expired, the old files deleted, and an embedded lake's SQLite catalog compacted (`VACUUM`:
   its free pages still hold the column statistics of the deleted files).

Each phase is recorded in the `erasures` table (who, when, how many rows; never which). A row
whose second phase did not end (killed, or deferred while an evaluation runs: a run never loses
the snapshot it pinned, nor the files it reads) stays `erased` until the next erase or
maintenance finishes it (`finish_erasures`).
"""

from spanscore.lake.lifecycle.common import AGED_CONTENT, RAW_TIMES, Step, requested_by
from spanscore.lake.lifecycle.erase import (
    Selection,
    erase,
    finish_erasures,
    pending_erasures,
    purge,
    select_conversations,
)
from spanscore.lake.lifecycle.retention import apply_retention, finish_retention, oldest_kept

__all__ = [
    "AGED_CONTENT",
    "RAW_TIMES",
    "Selection",
    "Step",
    "apply_retention",
    "erase",
    "finish_erasures",
    "finish_retention",
    "oldest_kept",
    "pending_erasures",
    "purge",
    "requested_by",
    "select_conversations",
]
