"""Which conversations a run scores: the window (since, until), the deterministic sample, and
those already scored by this suite version (skipped)."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import duckdb

from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.runs.options import UTC, RunOptions, judge_settings
from spanscore.evaluation.runs.result import RunResult, plural
from spanscore.evaluation.runs.store import COMPLETED, runs, scored_conversations, set_details
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.lake import LakeLocation, connect
from spanscore.lake.schema.rules import CONVERSATION_SUMMARIES

# How far before the newest commit a run saw the next run looks for commits, on a shared lake:
# one collector's commits are in order (`ingest_time` is its transaction's time, and its
# commits are one at a time), but another collector's transaction may have begun earlier, or
# run on a clock that is behind. An embedded lake has one collector: no margin, so the next
# run never takes again a conversation this one saw (and perhaps left out of its sample).
COMMIT_MARGIN_S = 300.0


def commit_margin(lake: str) -> dt.timedelta:
    """`COMMIT_MARGIN_S` on a lake that several collectors write, else none."""
    shared = LakeLocation.parse(lake).is_postgres
    return dt.timedelta(seconds=COMMIT_MARGIN_S if shared else 0)


# --- sampling ----------------------------------------------------------------------------------


def sample_key(conversation_id: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by seed and conversation id."""
    digest = hashlib.blake2b(f"{seed}\0{conversation_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def choose(
    conversations: Sequence[tuple[str, str | None]],
    *,
    rate: float | None,
    limit: int | None,
    seed: int,
) -> list[str]:
    """Deterministic sample of (conversation id, stratum) pairs: those whose key is below
    `rate`, then at most `limit`, shared among strata in proportion to their sizes (largest
    remainders), each stratum taking its lowest keys."""
    strata: dict[str | None, list[tuple[float, str]]] = {}
    for conversation_id, stratum in conversations:
        key = sample_key(conversation_id, seed)
        if rate is None or key < rate:
            strata.setdefault(stratum, []).append((key, conversation_id))
    for members in strata.values():
        members.sort()
    total = sum(len(m) for m in strata.values())
    if limit is None or limit >= total:
        return sorted(cid for members in strata.values() for _, cid in members)
    shares = {s: limit * len(m) / total for s, m in strata.items()}
    taken = {s: math.floor(share) for s, share in shares.items()}
    by_remainder = sorted(strata, key=lambda s: (taken[s] - shares[s], str(s)))
    for s in by_remainder[: limit - sum(taken.values())]:
        taken[s] += 1
    return sorted(cid for s, members in strata.items() for _, cid in members[: taken[s]])


# --- the run -----------------------------------------------------------------------------------


def run_now(options: RunOptions) -> dt.datetime:
    return options.now or dt.datetime.now(UTC)


def select(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    snapshot: int,
    suite: LoadedSuite,
    options: RunOptions,
    result: RunResult,
    until_from: str,
    committed_since: dt.datetime | None = None,
) -> tuple[list[str], list[str], int, JudgeRunner | None]:
    """The run's sample and what of it is still to score, read at the pinned snapshot, and
    its judge, started (one that cannot work is refused before anything is scored); the
    counts go into `result` and the run's row. `committed_since`: see `late_commits_since`."""
    since, until = result.window_start, result.window_end
    reader = connect(lake, snapshot=snapshot)
    try:
        rows = _candidate_rows(reader, options, since, until)
        if committed_since is not None and since is not None:
            # Ended before the window, committed after the previous run looked: those that
            # run (or any other of this suite version) did not score join the window's.
            late = _candidate_rows(reader, options, since, until, late_since=committed_since)
            done_late = scored_conversations(con, suite, [r[0] for r in late])
            rows = sorted(rows + [r for r in late if r[0] not in done_late])
        candidates = [(cid, stratum) for cid, stratum, _ in rows]
        single_traces = sum(1 for *_, single in rows if single)
        newest = newest_commit(reader)
        if not candidates:
            result.empty_because = _why_empty(
                reader, options, since, until, result.window_from, until_from
            )
    finally:
        reader.close()
    sample = choose(
        candidates, rate=options.sample, limit=options.max_conversations, seed=options.seed
    )
    # A simulation is scored whole each time: its trials and pass^k come from one run.
    whole = options.rescore or options.simulation is not None
    done = set() if whole else scored_conversations(con, suite, sample)
    todo = [c for c in sample if c not in done]
    result.candidates, result.sampled = len(candidates), len(sample)
    result.skipped = len(sample) - len(todo)
    judge_config = judge_settings(suite, options) if suite.uses_judge and todo else None
    runner = (
        JudgeRunner(judge_config, lake=con, run_id=result.run_id, environ=options.judge_environ)
        if judge_config is not None
        else None
    )
    if runner is not None:
        runner.start()  # refuses a judge that cannot work before anything is scored
    set_details(
        con,
        result.run_id,
        "record the run's sample",
        candidates=result.candidates,
        sampled=result.sampled,
        skipped=result.skipped,
        # Where the next run looks for late commits from (`late_commits_since`).
        committed_since=(newest - commit_margin(lake)).isoformat() if newest is not None else None,
    )
    return sample, todo, single_traces, runner


def window_candidates(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
    *,
    committed_since: dt.datetime | None = None,
) -> tuple[list[tuple[str, str | None]], int]:
    """(conversation id, stratum) of every conversation whose last span ended in the window,
    and how many of them are a trace with no conversation id (`conversation_source`).

    With `committed_since`, also those that ended before `since` and have a span the
    collector committed after it (`ingest_time`): a window bounded by end times alone
    misses a conversation whose spans were committed after a reader looked but ended before
    the window it looked at, however long after that it arrives."""
    rows = _candidate_rows(con, options, since, until)
    if committed_since is not None and since is not None:
        rows = sorted(
            rows + _candidate_rows(con, options, since, until, late_since=committed_since)
        )
    return [(cid, stratum) for cid, stratum, _ in rows], sum(1 for *_, single in rows if single)


def _candidate_rows(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
    *,
    late_since: dt.datetime | None = None,
) -> list[tuple[str, str | None, bool]]:
    """(conversation id, stratum, a trace with no conversation id) of the conversations whose
    last span ended in `[since, until)`, ordered by id; with `late_since`, instead those that
    ended before `since` with a span committed after `late_since`."""
    where: list[str] = []
    params: list[Any] = []
    # Simulated conversations are scored only by a run of their simulation; a trial counts
    # once finished (the simulator says when: no window, no settling).
    if options.simulation is None:
        where.append("end_time < ?")
        params.append(until)
        if since is not None and late_since is not None:
            where.append(
                "end_time < ? AND conversation_id IN "
                "(SELECT conversation_id FROM spans WHERE ingest_time > ?)"
            )
            params.extend([since, late_since])
        elif since is not None:
            where.append("end_time >= ?")
            params.append(since)
    if options.simulation is not None:
        where.append(
            "conversation_id IN (SELECT conversation_id FROM simulated_conversations "
            "WHERE simulation_id = ? AND status = 'finished')"
        )
        params.append(options.simulation)
    else:
        where.append("conversation_id NOT IN (SELECT conversation_id FROM simulated_conversations)")
    if options.services:
        where.append("service_name IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(options.services))
    if options.agents:
        where.append("agent_name IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(options.agents))
    if options.scenarios:
        where.append(
            "conversation_id IN (SELECT conversation_id FROM spans WHERE "
            """json_extract_string(attributes, '$."scenario.id"')"""
            " IN (SELECT unnest(?::VARCHAR[])))"
        )
        params.append(list(options.scenarios))
    stratum = "NULL"
    if options.stratify_by in ("agent_name", "service_name"):
        stratum = options.stratify_by
    elif options.stratify_by:
        stratum = (
            "(SELECT max(json_extract_string(s.attributes, ?)) FROM spans s "
            "WHERE s.conversation_id = c.conversation_id)"
        )
        params.insert(0, '$."' + options.stratify_by.replace('"', '\\"') + '"')
    sql = (
        f"SELECT conversation_id, {stratum}, conversation_source = 'trace' "
        f"FROM {CONVERSATION_SUMMARIES} c WHERE {' AND '.join(where)} ORDER BY conversation_id"
    )
    return [
        (str(cid), None if s is None else str(s), bool(single))
        for cid, s, single in con.execute(sql, params).fetchall()
    ]


def newest_commit(reader: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    """When the collector committed the newest span a (pinned) reader sees."""
    row = reader.execute("SELECT max(ingest_time) FROM spans").fetchone()
    value = row[0] if row else None
    return value if isinstance(value, dt.datetime) else None


_NO_END = dt.datetime.min.replace(tzinfo=UTC)


def default_since(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite
) -> tuple[dt.datetime | None, str]:
    """The default window start, and where it comes from.

    The end of the previous finished run of this suite version; for a version that never ran
    (the suite was edited), the start of the window the suite's previous version last scored,
    so the edited suite scores that window again (and `compare` can pair the two runs)
    rather than finding nothing new; for a suite that never ran, the beginning."""
    # A simulation's run scores no window of production traffic: it moves no window start.
    newest = [r for r in runs(con, suite=suite.name, statuses=COMPLETED) if r.simulation_id is None]
    # By window end, newest first (then by start, as `runs` gives them; no end sorts last).
    latest = sorted(newest, key=lambda r: r.window_end or _NO_END, reverse=True)
    for run in latest:
        if run.suite_hash == suite.content_hash:
            return (
                run.window_end,
                f"the end of run {run.run_id}, the previous one of this suite version",
            )
    if latest:
        run = latest[0]
        if run.window_start is None:
            return None, (
                f"this suite version never ran: from the beginning, as the previous "
                f"version's last run {run.run_id}"
            )
        return run.window_start, (
            f"this suite version never ran: the start of the previous version's last run "
            f"{run.run_id}"
        )
    return None, "the beginning: the first run of this suite"


def late_commits_since(
    con: duckdb.DuckDBPyConnection, suite: LoadedSuite, since: dt.datetime | None
) -> dt.datetime | None:
    """From when a run whose window starts at `since` (where the previous run of this suite
    version ended) also takes conversations that ended before it: those with a span committed
    after the previous run looked. Each run records the newest commit it saw, less
    `commit_margin` (`details.committed_since`; a follower's period, where its last pass
    looked: `details.follow.committed_since`). None when no run ending at `since` recorded
    one (runs before this rule)."""
    if since is None:
        return None
    row = con.execute(
        "SELECT max(coalesce(json_extract_string(details, '$.follow.committed_since'), "
        "json_extract_string(details, '$.committed_since'))) "
        "FROM eval_runs WHERE suite_name = ? AND suite_hash = ? "
        "AND status IN (SELECT unnest(?::VARCHAR[])) AND window_end = ? "
        "AND simulation_id IS NULL",
        [suite.name, suite.content_hash, list(COMPLETED), since],
    ).fetchone()
    return dt.datetime.fromisoformat(row[0]) if row and row[0] else None


def _why_empty(
    con: duckdb.DuckDBPyConnection,
    options: RunOptions,
    since: dt.datetime | None,
    until: dt.datetime,
    since_from: str,
    until_from: str,
) -> str:
    """Why no conversation is in the window: what the lake holds, and how many conversations
    each bound and the filters left out."""
    row = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE end_time >= ?), "
        "count(*) FILTER (WHERE end_time < ?) FROM conversations",
        [until, since if since is not None else dt.datetime(1, 1, 1, tzinfo=UTC)],
    ).fetchone()
    total, after, before = row if row else (0, 0, 0)
    if not total:
        return (
            "the lake holds no conversation yet (are spans arriving? `spanscore status` shows "
            "what the collector received)"
        )
    parts = []
    if before:
        note = f"{before} ended before the window start ({since_from})"
        if options.rescore and options.since is None:
            # --rescore scores a window again; it does not move the window's start.
            note += (
                "; --rescore scores the window again and does not widen it: add --since or "
                "--last (e.g. --last 7d) to score older conversations"
            )
        parts.append(note)
    if after:
        parts.append(f"{after} ended at or after the window end ({until_from})")
    filtered = total - before - after
    if filtered:
        parts.append(
            f"{filtered} did not match --service / --agent / --scenario"
            + (
                " / --simulation"
                if options.simulation
                else " (or were simulated: `evaluate --simulation ID` scores those)"
            )
        )
    return f"the lake holds {plural(total, 'conversation')}: " + "; ".join(parts)


def duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def shown(moment: dt.datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
