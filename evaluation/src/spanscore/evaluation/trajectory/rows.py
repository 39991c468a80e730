"""The rows trajectories are assembled from, read from the lake: one query per window of
conversations (`trajectory_rows`), stored rows used where their fingerprints still match, cut
into chunks of whole conversations for the workers.

Nothing here imports the trajectory model (pydantic): `spanscore show` reads a conversation's
rows in one thread while another imports the code that assembles them."""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.evaluation.trajectory.spread import SPREAD_FROM_CHUNKS, Spread, spread
from spanscore.lake.location import ALIAS
from spanscore.lake.schema import Source
from spanscore.lake.schema.tables import CONVERSATION_ATTRIBUTES
from spanscore.lake.schema.trajectory import (
    chosen_ids,
    fingerprints_sql,
    stored_fingerprints_sql,
    stored_rows_sql,
    trajectory_rows_sql,
)
from spanscore.lake.stored import by_spans

# --- reading the lake ------------------------------------------------------------------------


# Spans per query when `load_trajectories` reads many conversations: a background thread
# queries the next chunk while the caller assembles this one, and DuckDB sorts a chunk at a
# time, not the whole window. Each query also scans the conversation ids of the whole lake, so
# chunks are few and large (bench/trajectories.py: on 1,000,000 spans, chunks of 250,000 were
# 15% faster than one query and took half the memory; of 100,000, no faster than one query).
CHUNK_SPANS = 250_000


FIRST_CHUNK_SPANS = 25_000


# Up to this many conversations asked for by id are read by one query without counting
# their spans first (a point query, `load_trajectory`, stays one query).
_UNCOUNTED_IDS = 1_000


def conversation_chunks(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    chunk_spans: int = CHUNK_SPANS,
) -> list[list[str]]:
    """The conversations a load reads (`load_trajectories`), sorted and cut into chunks of
    about `chunk_spans` spans, each read by a query of its own (`rows_of_chunks`)."""
    if conversation_ids is not None and len(set(conversation_ids)) <= _UNCOUNTED_IDS:
        return [sorted(set(conversation_ids))] if conversation_ids else []
    # Small chunks first, each twice the one before: assembling starts soon, and the thread
    # reading the next chunk keeps ahead.
    parts = by_spans(
        _span_counts(con, conversation_ids, since, until),
        chunk_spans,
        first_spans=FIRST_CHUNK_SPANS,
    )
    return [[conversation_id for conversation_id, _ in part] for part in parts]


def rows_of_chunks(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    *,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
    stored: bool = True,
) -> Iterator[pa.RecordBatch]:
    """`trajectory_rows` of each chunk of conversation ids (each sorted) in turn, one query per
    chunk, the next queried by a thread while the caller works on this one (`_prefetched`)."""
    if not chunks:
        return iter(())
    keys = attribute_keys(attributes)
    # Which conversations have stored rows that are still current, by one query for the whole
    # load: fingerprinting chunk by chunk read the spans around each chunk again, three times
    # the work (bench/trajectories.py), in the thread the assembly waits for.
    current = set(stored_current(con, [c for chunk in chunks for c in chunk]) if stored else ())
    if len(chunks) == 1:
        return iter(rows_of(con, chunks[0], current, keys, batch_rows))
    return _prefetched(con, chunks, batch_rows, keys, current)


def _span_counts(
    con: duckdb.DuckDBPyConnection,
    conversation_ids: Sequence[str] | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
) -> list[tuple[str, int]]:
    """(conversation id, spans) of the conversations asked for by id, else of those with a
    span starting in [since, until) (either bound may be open; the spans counted are those in
    the window), sorted by id."""
    where = ["conversation_id IS NOT NULL"]
    params: list[Any] = []
    if conversation_ids is not None:
        con.register("spanscore_counted", pa.table({"id": list(conversation_ids)}))
        where.append("conversation_id IN (SELECT id FROM spanscore_counted)")
    else:
        conditions, params = _window(since, until)
        where += conditions
    found = con.execute(
        f"SELECT conversation_id, count(*) FROM spans WHERE {' AND '.join(where)} "
        "GROUP BY 1 ORDER BY 1",
        params,
    ).fetchall()
    return found


def _window(since: dt.datetime | None, until: dt.datetime | None) -> tuple[list[str], list[Any]]:
    """Conditions on `start_time` for [since, until) (either bound may be open), and their
    parameters."""
    conditions: list[str] = []
    params: list[Any] = []
    if since is not None:
        conditions.append("start_time >= ?")
        params.append(since)
    if until is not None:
        conditions.append("start_time < ?")
        params.append(until)
    return conditions, params


def _prefetched(
    con: duckdb.DuckDBPyConnection,
    chunks: Sequence[Sequence[str]],
    batch_rows: int,
    keys: tuple[str, ...],
    current: AbstractSet[str],
) -> Iterator[pa.RecordBatch]:
    """The rows of each chunk of conversations in turn, queried by a thread one chunk ahead of
    the caller: DuckDB runs a query without holding the GIL, so the next chunk is queried while
    the caller assembles this one. From `SPREAD_FROM_CHUNKS` chunks on, the chunks after the
    first are read from the lake once (`spread`) and each from its own file. Closing the
    iterator early stops the thread and its query."""
    cursor = con.cursor()
    cursor.execute(f"USE {ALIAS}")
    ready: queue.Queue[list[pa.RecordBatch] | BaseException | None] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: list[pa.RecordBatch] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def query_chunks() -> None:
        try:
            with contextlib.ExitStack() as cleanup:
                # The first chunk is read from the lake, so that its rows come at once; the
                # others, from a load of SPREAD_FROM_CHUNKS on, spread (but those of stored rows).
                rest: Spread | None = None
                if len(chunks) >= SPREAD_FROM_CHUNKS:
                    todo = [[c for c in part if c not in current] for part in chunks]
                    rest = spread(cursor, todo, cleanup, start=1)
                for k, chunk in enumerate(chunks):
                    source = rest.source(k) if rest is not None and k > 0 else None
                    reader = rows_of(cursor, chunk, current, keys, batch_rows, source)
                    batches = list(reader)
                    if rest is not None and source is not None:
                        rest.drop(k)
                    if not hand_over(batches):
                        return
            hand_over(None)
        except BaseException as exc:  # raised again in the caller's thread
            hand_over(exc)

    thread = threading.Thread(target=query_chunks, name="spanscore-trajectory-rows", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield from item
    finally:
        stop.set()
        cursor.interrupt()
        thread.join()
        cursor.close()


def attribute_keys(attributes: Sequence[str] = ()) -> tuple[str, ...]:
    """The attribute keys a load with `attributes` collects, in column order."""
    return tuple(dict.fromkeys((*CONVERSATION_ATTRIBUTES, *attributes)))


def trajectory_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    conversation_ids: Sequence[str] | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    batch_rows: int = 100_000,
    attributes: Sequence[str] = (),
    stored: bool = True,
) -> pa.RecordBatchReader:
    """The rows `load_trajectories` assembles (`spanscore.lake.schema.TRAJECTORY_COLUMNS`), as
    Arrow batches sorted by conversation, each conversation's rows together: for building
    trajectories elsewhere (`trajectories_from_rows`).

    Conversations asked for by id whose rows maintenance stored (`spanscore.lake.stored`) from
    the spans and log records they have now are read as stored (their attributes past
    `CONVERSATION_ATTRIBUTES` from their spans), unless `stored` is false; the rules are
    applied to the rest. Either way the rows are the same."""
    keys = attribute_keys(attributes)
    if conversation_ids is None:
        chosen = where = ""
        window, params = _window(since, until)
        if window:
            # Whole conversations: every span of one that started in the window.
            spans = f"SELECT DISTINCT conversation_id FROM spans WHERE {' AND '.join(window)}"
            chosen = f"chosen AS ({spans}), "
            where = "WHERE s.conversation_id IN (SELECT conversation_id FROM chosen)"
        return con.execute(trajectory_rows_sql(chosen, where, keys), params).to_arrow_reader(
            batch_rows
        )
    ids = sorted(set(conversation_ids))
    current = set(stored_current(con, ids)) if stored else set()
    return rows_of(con, ids, current, keys, batch_rows)


def rows_of(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str],
    current: AbstractSet[str],
    keys: tuple[str, ...],
    batch_rows: int,
    source: Source | None = None,
) -> pa.RecordBatchReader:
    """`trajectory_rows` of the conversations `ids` (sorted), reading stored rows for those
    that are `current` (`stored_current`); `source`: where the spans and log records of the
    others are, and theirs alone (`spread`), rather than the lake."""
    fresh = [c for c in ids if c in current] if current else []
    named: dict[str, Any] = {}
    stored_where = ""
    if fresh:
        named = {"first_fresh": fresh[0], "last_fresh": fresh[-1]}
        stored_where = chosen_ids(
            id_relation(con, "spanscore_fresh", fresh, named), bounds="_fresh"
        )
        if len(fresh) == len(ids):
            sql = stored_rows_sql(stored_where, attribute_keys=keys)
            return con.execute(sql, named).to_arrow_reader(batch_rows)
        ids = [i for i in ids if i not in current]
    if source is not None:
        sql = trajectory_rows_sql("", "", keys, stored=stored_where, source=source)
        return con.execute(sql, named).to_arrow_reader(batch_rows)
    chosen = (
        "chosen AS (SELECT conversation_id FROM "
        f"{id_relation(con, 'spanscore_chosen', ids, named)}), "
    )
    where = "WHERE s.conversation_id IN (SELECT conversation_id FROM chosen)"
    if ids:  # a chunk of nearby ids then reads little more than its own spans
        where = chosen_ids("chosen", "s.")
        named |= {"first": ids[0], "last": ids[-1]}
    sql = trajectory_rows_sql(chosen, where, keys, stored=stored_where)
    return con.execute(sql, named).to_arrow_reader(batch_rows)


def stored_current(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[str]:
    """Of the conversations `ids`, those whose stored rows are current (built by these rules
    from the spans and log records they have now), sorted."""
    return _current(con, _stored(con, ids))


def _stored(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, int]:
    """{conversation id: fingerprint} of those of `ids` whose rows these rules stored."""
    if not ids:
        return {}
    return _by_id(con, ids, lambda wanted: stored_fingerprints_sql(wanted()))


def _current(con: duckdb.DuckDBPyConnection, stored: dict[str, int]) -> list[str]:
    """The conversations of `stored` whose spans have the fingerprint stored, sorted."""
    if not stored:
        return []
    now = _by_id(
        con,
        list(stored),
        lambda wanted: (
            f"SELECT conversation_id, fingerprint FROM ({fingerprints_sql(wanted('s.'))})"
        ),
    )
    return sorted(c for c, fingerprint in stored.items() if now.get(c) == fingerprint)


def _by_id(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str],
    sql: Callable[[Callable[..., str]], str],
) -> dict[str, Any]:
    """{id: value} from the two-column query `sql(wanted)`, where `wanted(alias)` is the
    condition choosing the ids (`chosen_ids`)."""
    named: dict[str, Any] = {"first": min(ids), "last": max(ids)}
    wanted = id_relation(con, "spanscore_wanted", ids, named)
    query = sql(lambda alias="": chosen_ids(wanted, alias))
    try:
        return dict(con.execute(query, named).fetchall())
    except duckdb.CatalogException:  # a snapshot from before schema 9 has no stored rows
        return {}
    finally:
        if wanted == "spanscore_wanted":
            con.unregister(wanted)


# Up to this many conversation ids go to a query as a list parameter, more as a registered
# Arrow table (any length, joined rather than inlined in the SQL). A process's first
# registration costs more than a point query's whole read (60-100 ms of a cold `spanscore
# show`'s 1 s); a list parameter, nothing.
_LISTED_IDS = 1_000


def id_relation(
    con: duckdb.DuckDBPyConnection, name: str, ids: Sequence[str], named: dict[str, Any]
) -> str:
    """A relation of one column, `conversation_id`, holding `ids`, for the query whose named
    parameters are `named`: a list parameter `name` added to them, or the Arrow table
    registered as `name` on `con`."""
    if len(ids) <= _LISTED_IDS:
        named[name] = list(ids)
        return f"(SELECT unnest(${name}::VARCHAR[]) AS conversation_id)"
    con.register(name, pa.table({"conversation_id": list(ids)}))
    return name
