"""Every read and write of the simulation tables (`simulations`, `simulated_conversations`,
`simulated_turns`).

A simulation's trials are planned in one commit before the first conversation starts, so an
evaluation of production traffic already leaves their conversations out while they run, and a
killed simulation leaves rows saying what did not finish. Finished trials and their turns are
written in group commits (`Recorder.flush`), not one per turn: a commit costs the same for one
row or a thousand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.lake import ALIAS, append_rows, arrow_schema, retrying, side_cursor
from spanscore.lake.schema import (
    SIMULATED_CONVERSATIONS,
    SIMULATED_TURNS,
    SIMULATIONS,
    quote_identifier,
)

UTC = dt.UTC


@dataclass
class SimulationRow:
    simulation_id: str
    suite_name: str
    suite_hash: str
    target: str
    status: str
    started_at: dt.datetime
    finished_at: dt.datetime | None
    trials: int
    options: dict[str, Any]
    details: dict[str, Any]
    host: str = dataclasses.field(default_factory=socket.gethostname)


@dataclass
class TrialRow:
    conversation_id: str
    simulation_id: str
    scenario_id: str
    trial: int
    attempt: int
    status: str = "planned"
    stop_reason: str | None = None
    error: str | None = None
    turn_count: int = 0
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    user_calls: int = 0
    user_cache_hits: int = 0
    user_cost_usd: float | None = 0.0


@dataclass
class TurnRow:
    conversation_id: str
    turn_index: int
    user_message: str
    agent_reply: str | None
    error: str | None
    latency_ms: float | None
    user_cached: bool
    sent_at: dt.datetime


def _table(rows: Sequence[Any], columns: Any) -> pa.Table:
    data = [dataclasses.asdict(r) for r in rows]
    for row in data:
        for key in ("options", "details"):
            if key in row and not isinstance(row[key], str):
                row[key] = json.dumps(row[key], sort_keys=True)
    return pa.Table.from_pylist(data, schema=arrow_schema(columns))


def start_simulation(
    con: duckdb.DuckDBPyConnection, row: SimulationRow, trials: Sequence[TrialRow]
) -> None:
    """The simulation and all its planned trials, in one commit each."""
    append_rows(con, "simulations", _table([row], SIMULATIONS))
    if trials:
        append_rows(con, "simulated_conversations", _table(trials, SIMULATED_CONVERSATIONS))


def plan_more(con: duckdb.DuckDBPyConnection, trials: Sequence[TrialRow]) -> None:
    if trials:
        append_rows(con, "simulated_conversations", _table(trials, SIMULATED_CONVERSATIONS))


def set_simulation(
    con: duckdb.DuckDBPyConnection,
    simulation_id: str,
    *,
    status: str,
    details: dict[str, Any],
    finished: bool,
) -> None:
    finished_at = dt.datetime.now(UTC) if finished else None
    retrying(
        lambda: con.execute(
            "UPDATE simulations SET status = ?, details = ?, finished_at = ? "
            "WHERE simulation_id = ?",
            [status, json.dumps(details, sort_keys=True), finished_at, simulation_id],
        ),
        con=con,
        what="record the simulation",
    )


class Recorder:
    """Finished trials and their turns, written in group commits (thread-safe)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self._lock = threading.Lock()
        self._trials: list[TrialRow] = []
        self._turns: list[TurnRow] = []
        self.written = 0

    def finished(self, trial: TrialRow, turns: Sequence[TurnRow]) -> None:
        with self._lock:
            self._trials.append(trial)
            self._turns.extend(turns)

    def pending(self) -> int:
        with self._lock:
            return len(self._trials)

    def flush(self) -> int:
        with self._lock:
            trials, self._trials = self._trials, []
            turns, self._turns = self._turns, []
        if not trials:
            return 0
        try:
            _write_finished(self.con, trials, turns)
        except BaseException:
            with self._lock:  # kept for the next flush: nothing finished is lost
                self._trials[:0] = trials
                self._turns[:0] = turns
            raise
        self.written += len(trials)
        return len(trials)


def _write_finished(
    con: duckdb.DuckDBPyConnection, trials: Sequence[TrialRow], turns: Sequence[TurnRow]
) -> None:
    """The trials' final rows and their turns in one transaction: a trial is finished with
    its turns, or not at all."""
    finished = _table(trials, SIMULATED_CONVERSATIONS)
    turn_table = _table(turns, SIMULATED_TURNS)
    cur = side_cursor(con)
    names = [c.name for c in SIMULATED_CONVERSATIONS if c.name != "conversation_id"]
    sets = ", ".join(f"{quote_identifier(n)} = f.{quote_identifier(n)}" for n in names)

    def write() -> None:
        cur.register("spanscore_finished", finished)
        cur.register("spanscore_turns", turn_table)
        try:
            cur.execute("BEGIN TRANSACTION")
            try:
                cur.execute(
                    f"UPDATE {ALIAS}.simulated_conversations AS c SET {sets} "
                    "FROM spanscore_finished f WHERE c.conversation_id = f.conversation_id"
                )
                if turn_table.num_rows:
                    columns = ", ".join(quote_identifier(n) for n in turn_table.column_names)
                    cur.execute(
                        f"INSERT INTO {ALIAS}.simulated_turns ({columns}) "
                        f"SELECT {columns} FROM spanscore_turns"
                    )
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
        finally:
            cur.unregister("spanscore_finished")
            cur.unregister("spanscore_turns")

    try:
        retrying(write, con=cur, what="write finished trials")
    finally:
        cur.close()


# --- reads -------------------------------------------------------------------------------------


def simulation(con: duckdb.DuckDBPyConnection, simulation_id: str) -> SimulationRow | None:
    rows = simulations(con, simulation_id=simulation_id)
    return rows[0] if rows else None


def simulations(
    con: duckdb.DuckDBPyConnection, *, simulation_id: str | None = None, limit: int | None = None
) -> list[SimulationRow]:
    """Simulations, newest first."""
    names = [c.name for c in SIMULATIONS]
    sql = f"SELECT {', '.join(quote_identifier(n) for n in names)} FROM simulations"
    params: list[Any] = []
    if simulation_id is not None:
        sql += " WHERE simulation_id = ?"
        params.append(simulation_id)
    sql += " ORDER BY started_at DESC, simulation_id DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    out = []
    for values in con.execute(sql, params).fetchall():
        row = dict(zip(names, values, strict=True))
        row["options"] = json.loads(row["options"] or "{}")
        row["details"] = json.loads(row["details"] or "{}")
        out.append(SimulationRow(**row))
    return out


def trials(con: duckdb.DuckDBPyConnection, simulation_id: str) -> list[TrialRow]:
    names = [c.name for c in SIMULATED_CONVERSATIONS]
    rows = con.execute(
        f"SELECT {', '.join(quote_identifier(n) for n in names)} FROM simulated_conversations "
        "WHERE simulation_id = ? ORDER BY scenario_id, trial, attempt",
        [simulation_id],
    ).fetchall()
    return [TrialRow(**dict(zip(names, values, strict=True))) for values in rows]


def counts_by_stop_reason(con: duckdb.DuckDBPyConnection, simulation_id: str) -> dict[str, int]:
    rows = con.execute(
        "SELECT coalesce(stop_reason, status), count(*) FROM simulated_conversations "
        "WHERE simulation_id = ? GROUP BY 1 ORDER BY 1",
        [simulation_id],
    ).fetchall()
    return {str(k): int(v) for k, v in rows}


def conversations_with_spans(
    con: duckdb.DuckDBPyConnection, conversation_ids: Sequence[str]
) -> set[str]:
    """Which of these conversations have spans in the lake."""
    if not conversation_ids:
        return set()
    con.register("spanscore_ids", pa.table({"conversation_id": list(conversation_ids)}))
    try:
        rows = con.execute(
            "SELECT DISTINCT conversation_id FROM spans "
            "WHERE conversation_id IN (SELECT conversation_id FROM spanscore_ids)"
        ).fetchall()
    finally:
        con.unregister("spanscore_ids")
    return {str(r[0]) for r in rows}


def simulated_conversation(
    con: duckdb.DuckDBPyConnection, conversation_id: str
) -> tuple[TrialRow, list[TurnRow]] | None:
    """A simulated conversation's trial and its user turns; None for any other conversation."""
    names = [c.name for c in SIMULATED_CONVERSATIONS]
    found = con.execute(
        f"SELECT {', '.join(quote_identifier(n) for n in names)} FROM simulated_conversations "
        "WHERE conversation_id = ?",
        [conversation_id],
    ).fetchone()
    if found is None:
        return None
    turn_names = [c.name for c in SIMULATED_TURNS]
    turns = con.execute(
        f"SELECT {', '.join(quote_identifier(n) for n in turn_names)} FROM simulated_turns "
        "WHERE conversation_id = ? ORDER BY turn_index",
        [conversation_id],
    ).fetchall()
    return (
        TrialRow(**dict(zip(names, found, strict=True))),
        [TurnRow(**dict(zip(turn_names, t, strict=True))) for t in turns],
    )
