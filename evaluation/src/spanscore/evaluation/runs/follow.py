"""Continuous evaluation (`spanscore evaluate --follow`): conversations scored as they settle.

A follower runs passes, one every `poll_s`. A pass scores, with the same suite, sampling,
judge, budgets and writes as a nightly run, the conversations whose last span ended before
now minus the settle time and that no run of this suite version has scored yet. Its window
starts the settle time before the previous pass's end and, on the first pass, where a nightly
run would start: the end of the suite's last completed run, so a follower that was stopped or
killed backfills what it missed. Run one follower per suite: two would race.

End times alone cannot bound a pass: a conversation's spans reach the lake after they end (an
SDK's batch delay, a gateway's retries, the collector's group commit), so one that ended
before a pass's window end may be committed only after that pass pinned its snapshot, and the
next window, starting later, would never hold it. So each pass also takes every settled
conversation with a span committed (`ingest_time`) after the newest commit the previous pass
saw (on a shared lake, less a margin for other collectors' clocks): however late it arrives,
the pass after its commit finds it. A closed run records that mark
(`details.follow.committed_since`), and a restarted follower starting where that run ended
takes it up, so a stop or a restart misses nothing either.
What the follower scored is skipped, and a period's run counts only what it scored (and, on
the follower's first pass, what earlier runs scored in its window, as a nightly run does).

Passes write into one run per period (`period_s`, aligned to the clock: hourly runs start on
the hour), so reports, gates and `compare` see runs as they see nightly ones. A period whose
passes found nothing to score leaves no run. A period's run
closes when the period ends, or when the follower stops (SIGTERM, Ctrl-C): its window ends
where its last pass ended, its summary covers every conversation its passes found, and its
gates are checked. A follower killed with kill -9 leaves its run `running`; the next one, on
this host, marks it `interrupted` and scores what it had not: each batch of scores is one
transaction, and a conversation with a committed score is never scored again, so no
conversation is scored twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.runs.engines import score_batches
from spanscore.evaluation.runs.export_otlp import ExportOutcome, export_run
from spanscore.evaluation.runs.gates import (
    check_gate,
    conversation_verdicts,
    run_warnings,
    summarize,
)
from spanscore.evaluation.runs.judge_rounds import judged_batches
from spanscore.evaluation.runs.options import UTC, RunOptions, judge_settings
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.store import (
    close_abandoned_runs,
    finish_run,
    forget_run,
    insert_run,
    pin_snapshot,
    scored_conversations,
    set_details,
    set_window_end,
    write_scores,
)
from spanscore.evaluation.runs.window import (
    choose,
    commit_margin,
    default_since,
    late_commits_since,
    newest_commit,
    window_candidates,
)
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.lake import connect, current_snapshot, is_interrupt

log = logging.getLogger("spanscore.evaluate")

# A pass that scores nothing moves its period's pin (`details.snapshot`) up at most this often.
MOVE_PIN_AFTER_S = 300.0


@dataclass
class FollowSettings:
    """How a follower paces itself (the `--follow` options besides the run's)."""

    period_s: float = 3600.0  # one run per period, aligned to the clock
    poll_s: float = 10.0  # between passes
    export: tuple[str, str] | None = None  # (endpoint, protocol) of --export-otlp
    max_periods: int | None = None  # stop after closing this many periods (tests, benchmarks)


@dataclass
class PassResult:
    """What one pass did."""

    run_id: str
    since: dt.datetime | None
    until: dt.datetime
    candidates: int
    scored: int
    scores: int
    export: ExportOutcome | None = None


@dataclass
class _Period:
    result: RunResult
    ends: dt.datetime
    sample: set[str] = field(default_factory=set)
    candidates: set[str] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)
    export: ExportOutcome | None = None
    started: float = field(default_factory=time.monotonic)


def period_end(now: dt.datetime, period_s: float) -> dt.datetime:
    """The end of the clock-aligned period `now` is in."""
    epoch = now.timestamp()
    end = (math.floor(epoch / period_s) + 1) * period_s
    return dt.datetime.fromtimestamp(end, UTC)


class Follower:
    """Scores a lake's conversations as they settle until `stop()` (or `max_periods`)."""

    def __init__(
        self,
        lake: str,
        suite: LoadedSuite,
        options: RunOptions,
        settings: FollowSettings | None = None,
        *,
        on_pass: Callable[[PassResult], None] | None = None,
        on_period: Callable[[RunResult], None] | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.lake = lake
        self.suite = suite
        self.options = options
        self.settings = settings or FollowSettings()
        self.on_pass = on_pass
        self.on_period = on_period
        self.clock = clock or (lambda: dt.datetime.now(UTC))
        self._stop = threading.Event()
        self._period: _Period | None = None
        self._next_since: dt.datetime | None = None  # where the next pass looks from
        self._committed_since: dt.datetime | None = None  # and since which commits
        self._last_end: dt.datetime | None = None  # where the last period's window ended
        self._first = True
        self._pinned_at = time.monotonic()  # when the period's row last moved its pin
        self.closed = 0

    def stop(self) -> None:
        """End after the pass in progress: its period's run is closed."""
        self._stop.set()

    def run(self) -> None:
        """Pass after pass until stopped; the open period is closed on the way out (an
        interrupt closes it as `interrupted`, and is raised again)."""
        con = connect(self.lake)
        try:
            close_abandoned_runs(con, self.suite)
            while not self._stop.is_set():
                now = self.clock()
                if self._period is not None and now >= self._period.ends:
                    self._close(con)
                    if self.settings.max_periods and self.closed >= self.settings.max_periods:
                        break
                self._pass(con, now)
                self._stop.wait(self.settings.poll_s)
            if self._period is not None:
                self._close(con)
        except BaseException as exc:
            if self._period is not None:
                status = "interrupted" if is_interrupt(exc) else "failed"
                try:
                    self._close(con, status=status)
                except Exception:  # the lake failed under us: the next follower marks it
                    log.warning("could not close run %s", self._period.result.run_id)
            raise
        finally:
            con.close()

    # --- a period ----------------------------------------------------------------------------

    def _open(self, con: duckdb.DuckDBPyConnection, now: dt.datetime) -> _Period:
        if self._first:
            since, since_from = self.options.since, "--since"
            if since is None:
                since, since_from = default_since(con, self.suite)
                # A follower before this one left where to look for commits from: what it
                # had not seen committed is found, however early it ended.
                self._committed_since = late_commits_since(con, self.suite, since)
            self._next_since = since
        else:
            since, since_from = self._last_end, "the end of the follower's previous period"
        result = RunResult(
            run_id=uuid.uuid4().hex[:16],
            status="running",
            window_start=since,
            window_end=now - dt.timedelta(seconds=self.options.settle_s),
            snapshot=current_snapshot(con),
            window_from=since_from,
        )
        insert_run(con, self.suite, self.options, result, now)
        period = _Period(result, period_end(now, self.settings.period_s))
        set_details(
            con,
            result.run_id,
            "record the follower's period",
            follow={"period_s": self.settings.period_s, "ends": period.ends.isoformat()},
        )
        return period

    def _close(self, con: duckdb.DuckDBPyConnection, status: str | None = None) -> None:
        period, self._period = self._period, None
        assert period is not None
        result = period.result
        self._last_end = result.window_end
        if not period.sample:
            # Nothing to score this period: no run (a quiet hour is no failed gate, and no run
            # that `previous` or `report latest` should find). The next period starts where
            # this one ended; a restarted follower looks again from the last recorded run.
            forget_run(con, result.run_id)
            self.closed += 1
            return
        if self._committed_since is not None:
            follow = {"period_s": self.settings.period_s, "ends": period.ends.isoformat()}
            follow["committed_since"] = self._committed_since.isoformat()
            set_details(con, result.run_id, "record where to look for commits", follow=follow)
        set_window_end(con, result.run_id, result.window_end)
        sample = sorted(period.sample)
        result.summary = summarize(con, self.suite, sample)
        gates = [*self.suite.suite.gates, *self.options.gates]
        verdicts = conversation_verdicts(con, self.suite, sample) if gates else {}
        result.gates = [check_gate(g, result.summary, verdicts) for g in gates]
        result.warnings = run_warnings(self.suite, result.summary, len(sample))
        result.sampled = len(sample)
        result.candidates = len(period.candidates)
        result.skipped = len(sample) - result.scored
        if period.export is not None:
            result.export = period.export.as_dict()
            set_details(con, result.run_id, "record the export", export=result.export)
        result.status = status or ("succeeded" if result.passed else "gate_failed")
        result.elapsed_s = time.monotonic() - period.started
        finish_run(con, result, period.timings)
        self.closed += 1
        if self.on_period is not None and status is None:
            self.on_period(result)

    # --- a pass ------------------------------------------------------------------------------

    def _pass(self, con: duckdb.DuckDBPyConnection, now: dt.datetime) -> PassResult:
        if self._period is None:
            self._period = self._open(con, now)
        period = self._period
        result = period.result
        # A period's run holds what ended before the period's end: the rest is the next one's.
        until = min(now - dt.timedelta(seconds=self.options.settle_s), period.ends)
        since = self._next_since
        # Read at the current snapshot: the period's row pins an older one, and maintenance
        # thins and expires no snapshot from the oldest pinned on.
        snapshot = current_snapshot(con)
        reader = connect(self.lake, snapshot=snapshot)
        try:
            committed_since = self._committed_since
            candidates, _ = window_candidates(
                reader, self.options, since, until, committed_since=committed_since
            )
            newest = newest_commit(reader)
        finally:
            reader.close()
        sample = choose(
            candidates,
            rate=self.options.sample,
            limit=self.options.max_conversations,
            seed=self.options.seed,
        )
        found = [c for c, _ in candidates]
        done = scored_conversations(con, self.suite, found)
        todo = [c for c in sample if c not in done]
        before = (result.scored, result.score_count)
        # The pin moves up to what this pass reads at when it scores (it commits then anyway)
        # or every few minutes: a period lasts an hour, and its first snapshot pinned for all
        # of it would keep maintenance from thinning or expiring anything meanwhile.
        if todo or time.monotonic() - self._pinned_at >= MOVE_PIN_AFTER_S:
            snapshot = result.snapshot = pin_snapshot(con, result.run_id, snapshot)
            self._pinned_at = time.monotonic()
        if todo:
            self._score(con, snapshot, todo, period)
        # The first pass counts, as a nightly run does, what earlier runs scored in its window;
        # later ones find again what this follower scored (their windows overlap): not counted.
        backfill, self._first = self._first, False
        period.sample.update(c for c in sample if backfill or c not in done)
        period.candidates.update(c for c in found if backfill or c not in done)
        # Whatever is committed after this snapshot, the next pass finds (an empty lake: all).
        self._committed_since = (
            newest - commit_margin(self.lake) if newest is not None else _BEGINNING
        )
        result.window_end = max(result.window_end, until)
        # The next pass looks one settle time back: spans that arrived late are found.
        back = until - dt.timedelta(seconds=self.options.settle_s)
        self._next_since = back if since is None or back > since else since
        outcome = None
        if self.settings.export is not None and result.scored > before[0]:
            outcome = export_run(
                con, result.run_id, *self.settings.export, conversation_ids=todo, record=False
            )
            period.export = _added(period.export, outcome)
        done_pass = PassResult(
            result.run_id,
            since,
            until,
            len(candidates),
            result.scored - before[0],
            result.score_count - before[1],
            outcome,
        )
        if self.on_pass is not None:
            self.on_pass(done_pass)
        return done_pass

    def _score(
        self,
        con: duckdb.DuckDBPyConnection,
        snapshot: int,
        todo: list[str],
        period: _Period,
    ) -> None:
        result, timings = period.result, period.timings

        def commit(scores: pa.Table, batch_size: int, written: bool = False) -> None:
            if not written:
                t0 = time.monotonic()
                write_scores(con, result.run_id, scores)
                timings["write_s"] = timings.get("write_s", 0.0) + time.monotonic() - t0
            result.scored += batch_size
            result.score_count += scores.num_rows
            result.error_count += scores.num_rows - scores.column("error").null_count

        config = judge_settings(self.suite, self.options) if self.suite.uses_judge else None
        runner = (
            JudgeRunner(config, lake=con, run_id=result.run_id, environ=self.options.judge_environ)
            if config is not None
            else None
        )
        own_watchdog = self.suite.watchdog is None
        self.suite.start_watchdog()
        try:
            if runner is not None:
                runner.start()
            batches = score_batches(
                self.lake, snapshot, self.suite, todo, self.options, write_as=result.run_id
            )
            if runner is None:
                for scores, batch_size, _, written in batches:
                    commit(scores, batch_size, written)
            else:
                judged_batches(batches, self.suite, runner, commit)
        finally:
            if own_watchdog:
                self.suite.stop_watchdog()
            if runner is not None:
                try:
                    runner.close()
                finally:
                    result.judge = _summed(result.judge, runner.totals.as_dict())


_BEGINNING = dt.datetime(1, 1, 1, tzinfo=UTC)


def _added(total: ExportOutcome | None, more: ExportOutcome) -> ExportOutcome:
    if total is None:
        return more
    total.events += more.events
    total.sent += more.sent
    total.failed += more.failed
    total.unparented += more.unparented
    total.error = total.error or more.error
    return total


def _summed(total: dict[str, Any] | None, more: dict[str, Any]) -> dict[str, Any]:
    """The judge's totals over the passes: counts and costs added, anything else the latest."""
    out = dict(total or {})
    for key, value in more.items():
        before = out.get(key)
        numbers = (int, float)
        if isinstance(value, numbers) and isinstance(before, numbers):
            out[key] = before + value
        else:
            out[key] = value
    return out
