"""`spanscore erase`: the conversations selected, phase 1 (their rows leave the lake's
current data in one transaction), and phase 2 for every pending erasure (their old files leave
the disk, and the catalog forgets their values: `catalog`)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson

from spanscore.lake.lifecycle.catalog import scrub_catalog
from spanscore.lake.lifecycle.common import (
    REWRITTEN_TABLES,
    SELECTED,
    SELECTED_TRACES,
    Step,
    keep_ids,
    record_erasure,
    requested_by,
)
from spanscore.lake.location import ALIAS, sql_string
from spanscore.lake.retry import retrying
from spanscore.lake.schema.tables import CONVERSATION_CONTENT, quote_identifier
from spanscore.lake.snapshots import (
    delete_old_files,
    evaluation_running,
    expirable_snapshots,
)


@dataclass
class Selection:
    """The conversations an erase would remove, and what of theirs it would delete."""

    conversations: list[str]
    unknown: list[str] = field(default_factory=list)  # asked for by id, not in the lake
    spans: int = 0
    log_records: int = 0
    scores: int = 0
    derived: dict[str, int] = field(default_factory=dict)  # CONVERSATION_CONTENT rows by table

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversations": len(self.conversations),
            "unknown": self.unknown,
            "spans": self.spans,
            "log_records": self.log_records,
            "scores": self.scores,
            "derived_rows": self.derived,
        }


def select_conversations(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str] = (),
    where: str | None = None,
) -> Selection:
    """The conversations given by id (`unknown`: those in no table of the lake) or matched by
    a `where` over the `conversations` view, with the rows an erase would delete. Leaves them
    in a temporary table for `erase`."""
    if where is not None:
        rows = con.execute(
            f"SELECT DISTINCT conversation_id FROM {ALIAS}.conversations WHERE {where}"
        ).fetchall()
        found = sorted(str(r[0]) for r in rows if r[0] is not None)
        unknown: list[str] = []
    else:
        asked = list(dict.fromkeys(ids))
        keep_ids(con, asked)
        sources = ["spans", "logs", "scores", *CONVERSATION_CONTENT]
        union = " UNION ".join(
            f"SELECT conversation_id FROM {ALIAS}.{quote_identifier(t)} "
            f"WHERE conversation_id IN {SELECTED}"
            for t in sources
        )
        known = {str(r[0]) for r in con.execute(union).fetchall()}
        found = [i for i in asked if i in known]
        unknown = [i for i in asked if i not in known]
    keep_ids(con, found)
    counts = con.execute(
        f"""SELECT
            (SELECT count(*) FROM {ALIAS}.spans
                WHERE conversation_id IN {SELECTED} OR trace_id IN {SELECTED_TRACES}),
            (SELECT count(*) FROM {ALIAS}.logs
                WHERE conversation_id IN {SELECTED} OR trace_id IN {SELECTED_TRACES}),
            (SELECT count(*) FROM {ALIAS}.scores WHERE conversation_id IN {SELECTED})"""
    ).fetchone()
    assert counts is not None
    derived = {
        table: int(
            con.execute(
                f"SELECT count(*) FROM {ALIAS}.{quote_identifier(table)} "
                f"WHERE conversation_id IN {SELECTED}"
            ).fetchone()[0]  # type: ignore[index]
        )
        for table in CONVERSATION_CONTENT
    }
    return Selection(found, unknown, int(counts[0]), int(counts[1]), int(counts[2]), derived)


def erase(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    *,
    selection_kind: str,
    who: str | None = None,
    deadline_s: float = 120.0,
) -> str:
    """Phase 1 for the conversations of `selection` (`select_conversations` on this
    connection, just before): in one transaction, delete their spans and log records and
    those of their traces, clear their scores' explanation and details, delete their rows of
    every `CONVERSATION_CONTENT` table, and record the erasure. Returns its id."""
    erase_id = uuid.uuid4().hex
    started = dt.datetime.now(dt.UTC)

    def transaction() -> None:
        con.execute("BEGIN")
        # Records first: the spans' delete removes what finds their traces.
        for table in ("logs", "spans"):
            con.execute(
                f"DELETE FROM {ALIAS}.{table} "
                f"WHERE conversation_id IN {SELECTED} OR trace_id IN {SELECTED_TRACES}"
            )
        con.execute(
            f"UPDATE {ALIAS}.scores SET explanation = NULL, details = NULL "
            f"WHERE conversation_id IN {SELECTED} "
            "AND (explanation IS NOT NULL OR details IS NOT NULL)"
        )
        for table in CONVERSATION_CONTENT:
            con.execute(
                f"DELETE FROM {ALIAS}.{quote_identifier(table)} WHERE conversation_id IN {SELECTED}"
            )
        record_erasure(
            con,
            erase_id,
            reason="erase",
            selection_kind=selection_kind,
            who=who or requested_by(),
            started=started,
            conversations=len(selection.conversations),
            spans=selection.spans,
            log_records=selection.log_records,
            scores=selection.scores,
            derived=selection.derived,
        )
        con.execute("COMMIT")

    retrying(transaction, con=con, deadline_s=deadline_s, what="erase")
    return erase_id


# The tables erasure and retention delete from: their files are rewritten without the rows.
def pending_erasures(con: duckdb.DuckDBPyConnection, reason: str | None = None) -> list[str]:
    """Ids of the erasures whose rows may still be on disk (status `erased`)."""
    rows = con.execute(
        f"SELECT erase_id FROM {ALIAS}.erasures WHERE status = 'erased'"
        + (" AND reason = ?" if reason else "")
        + " ORDER BY started_at",
        [reason] if reason else [],
    ).fetchall()
    return [str(r[0]) for r in rows]


def finish_erasures(
    con: duckdb.DuckDBPyConnection,
    step: Step,
    *,
    reason: str | None = "erase",
) -> dict[str, int]:
    """Phase 2 of every pending erasure (of `reason`): rewrite the affected tables' files
    without deleted rows, expire every snapshot but the latest, delete the files no snapshot
    references, compact a SQLite catalog, and mark them `purged`. Deferred (`purge_deferred`)
    while an evaluation runs: it reads the snapshot it pinned, and the files of it; or, with
    `catalog_busy` too, while another process kept the catalog from being compacted."""
    pending = pending_erasures(con, reason)
    done = {"erasures_finished": 0, "purge_deferred": 0}
    if not pending:
        return done
    if evaluation_running(con):
        done["purge_deferred"] = 1
        return done
    done |= purge(con, step)
    if done["purge_deferred"]:  # an evaluation started while the files were rewritten
        return done
    done["catalog_scrubbed"] = int(scrub_catalog(con, step, pending))
    if not done["catalog_scrubbed"]:
        # Its old values are still in the catalog: another process holds it open.
        done["purge_deferred"] = done["catalog_busy"] = 1
        return done
    ids = ", ".join(sql_string(i) for i in pending)
    details = orjson.dumps(
        {k: done[k] for k in ("files_rewritten", "snapshots_expired", "files_deleted")}
    ).decode()
    step(
        f"UPDATE {ALIAS}.erasures SET status = 'purged', finished_at = now(), "
        f"details = json_merge_patch(coalesce(details, '{{}}'), {sql_string(details)}) "
        f"WHERE erase_id IN ({ids})",
        "record erasures",
    )
    done["erasures_finished"] = len(pending)
    return done


def purge(con: duckdb.DuckDBPyConnection, step: Step) -> dict[str, int]:
    """Deleted rows off the data files: the files holding them rewritten, every snapshot but
    the latest expired, unreferenced files deleted (the catalog is the caller's:
    `scrub_catalog`). An evaluation that
    started while the files were rewritten defers the rest (`purge_deferred`): it reads the
    snapshot it pinned, and the files of it; and a snapshot a running evaluation pinned is
    never expired, however late it registered."""
    done = {
        "files_rewritten": 0,
        "snapshots_expired": 0,
        "files_deleted": 0,
        "purge_deferred": 0,
    }
    for table in REWRITTEN_TABLES:
        rows = step(
            f"CALL ducklake_rewrite_data_files({sql_string(ALIAS)}, {sql_string(table)}, "
            "delete_threshold => 0)",
            "rewrite files",
        )
        done["files_rewritten"] += sum(int(r[2] or 0) for r in rows)
    if evaluation_running(con):
        done["purge_deferred"] = 1
        return done
    older = expirable_snapshots(con, 0.0)
    if older:
        expired = step(
            f"CALL ducklake_expire_snapshots({sql_string(ALIAS)}, versions => {older})",
            "expire snapshots",
        )
        done["snapshots_expired"] = len(expired)
    done["files_deleted"] = len(
        delete_old_files(con, 0.0, lambda sql: step(sql, "delete old files"), everything=True)
    )
    return done
