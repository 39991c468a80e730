"""Evaluation runs: a window of conversations in, scores in the lake, gates out.

One run:
1. pins the lake's current snapshot, so every reader (in every worker process) sees the same
   data while the collector goes on committing;
2. picks the conversations whose last span ended in the window [since, until), where `until`
   is at most now minus `settle` (a conversation still receiving spans waits for the next run)
   and `since` defaults to the end of the previous successful run of the same suite;
3. samples them deterministically (a hash of seed and conversation id: the same ones on every
   re-run), optionally per stratum, and skips those already scored by this suite version;
4. rebuilds and scores them in batches on all cores (or, with `engine="ray"`, in shards over a
   Ray cluster, see `engines.ray`); each batch's scores are committed in one transaction, so an
   interrupted run leaves whole batches and the next run resumes;
5. records the run in `eval_runs`, summarises the scores per scenario and metric, and checks
   the gates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator

import duckdb
import pyarrow as pa

from spanscore.evaluation.llm.client import JudgeClient
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.runs.engines import score_batches
from spanscore.evaluation.runs.gates import (
    check_gate,
    conversation_verdicts,
    judge_failures,
    run_warnings,
    summarize,
)
from spanscore.evaluation.runs.judge_rounds import judge_in_batches, judged_batches
from spanscore.evaluation.runs.options import (
    RUN_GC_THRESHOLD,
    NothingNew,
    Progress,
    RunOptions,
    WindowError,
    judge_settings,
)
from spanscore.evaluation.runs.result import RunInterrupted, RunResult, plural
from spanscore.evaluation.runs.store import (
    close_abandoned_runs,
    finish_run,
    forget_run,
    insert_run,
    write_scores,
)
from spanscore.evaluation.runs.trials import check_trial_gate, trial_results
from spanscore.evaluation.runs.window import (
    default_since,
    duration_text,
    late_commits_since,
    run_now,
    select,
    shown,
)
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.lake import (
    connect,
    current_snapshot,
    is_interrupt,
)
from spanscore.lake.schema import COMPLETED_STOP_REASONS

log = logging.getLogger("spanscore.evaluate")


def evaluate(
    lake: str | os.PathLike[str],
    suite: LoadedSuite,
    options: RunOptions | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
) -> RunResult:
    """Run the suite over the lake's conversations as `options` says (see the module doc).

    Raises `RunInterrupted` (with the partial result, recorded as `interrupted`) on
    KeyboardInterrupt; scores committed before it are kept and a re-run resumes. While it runs,
    the process's garbage collector runs less often (its settings are restored after)."""
    options = options or RunOptions()
    started = time.monotonic()
    now = run_now(options)
    with _few_collections():
        con = connect(lake)
        try:
            return _run(con, str(lake), suite, options, now, started, progress)
        finally:
            con.close()


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Collect less often while a run lasts, and never rescan what existed before it; the
    process's own settings are restored after it. A process that froze objects itself keeps
    them frozen (unfreezing is all or nothing, so the run then freezes nothing)."""
    before = gc.get_threshold()
    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()
    gc.set_threshold(*RUN_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if freezing:
            gc.unfreeze()


def _run(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    suite: LoadedSuite,
    options: RunOptions,
    now: dt.datetime,
    started: float,
    progress: Callable[[Progress], None] | None,
) -> RunResult:
    close_abandoned_runs(con, suite)
    snapshot = current_snapshot(con)
    until = now - dt.timedelta(seconds=options.settle_s)
    until_from = f"now minus --settle {duration_text(options.settle_s)}"
    if options.until is not None and options.until < until:
        until, until_from = options.until, "--until"
    since, since_from = options.since, "--since"
    committed_since: dt.datetime | None = None
    if options.simulation is not None:
        _check_simulation(con, options.simulation)
        _check_whole(options)
        # Every finished trial of the simulation, whenever it ran: the simulator says when a
        # conversation is over, so nothing waits to settle.
        until, until_from = now, f"simulation {options.simulation}"
        since_from = until_from
    elif since is None:
        since, since_from = default_since(con, suite)
        # What the previous run could not see yet, however early it ended, is found too.
        committed_since = late_commits_since(con, suite, since)
    if since is not None and since > until and options.since is None and options.until is None:
        raise NothingNew(
            f"nothing new yet: the window would start at {shown(since)} ({since_from}), "
            f"after now minus --settle {duration_text(options.settle_s)} ({shown(until)}). A "
            "later run scores what ends after it; --since or --last scores an earlier window"
        )
    if since is not None and since > until:
        given = options.since is not None
        if given and options.until is not None and until == options.until:
            # A duration is a time ago: the longer one is the earlier bound.
            fix = "Give a --since before --until (--since 2h --until 1h: from 2 h to 1 h ago)"
        elif given:
            fix = "Give an earlier --since, or a shorter --settle"
        elif until_from == "--until":
            fix = "Give --since (or --last) before --until, or a later --until"
        else:
            fix = "Give --since (or --last), or a shorter --settle"
        raise WindowError(
            f"the window starts at {shown(since)} ({since_from}) after it ends at "
            f"{shown(until)} ({until_from}): nothing can be in it. {fix}"
        )
    run_id = uuid.uuid4().hex[:16]
    result = RunResult(
        simulation_id=options.simulation,
        run_id=run_id,
        status="running",
        window_start=since,
        window_end=until,
        snapshot=snapshot,
        window_from=since_from,
    )
    # Recorded before anything reads at the snapshot: the row pins it, and maintenance that
    # runs meanwhile would otherwise expire it under the first query (the soak found it).
    insert_run(con, suite, options, result, now)
    snapshot = result.snapshot  # pinned again if maintenance thinned it meanwhile
    try:
        sample, todo, single_traces, runner = select(
            con, lake, snapshot, suite, options, result, until_from, committed_since
        )
    except BaseException:
        with contextlib.suppress(Exception):  # nothing was scored: the run never happened
            forget_run(con, run_id)
        raise
    timings: dict[str, float] = {}
    own_watchdog = suite.watchdog is None
    suite.start_watchdog()  # for scoring in this process (one worker) and re-scoring

    def commit(scores: pa.Table, batch_size: int, written: bool = False) -> None:
        if not written:  # a Ray task may have committed its shard itself
            t0 = time.monotonic()
            write_scores(con, run_id, scores)
            timings["write_s"] = timings.get("write_s", 0.0) + time.monotonic() - t0
        result.scored += batch_size
        result.score_count += scores.num_rows
        result.error_count += scores.num_rows - scores.column("error").null_count
        if progress is not None:
            progress(Progress(result.scored, len(todo), time.monotonic() - started))

    try:
        if runner is not None and runner.config.batch:
            judge_in_batches(con, lake, snapshot, suite, todo, options, runner, result)
        batches = score_batches(lake, snapshot, suite, todo, options, write_as=run_id)
        if runner is None:
            for scores, batch_size, _, written in batches:
                commit(scores, batch_size, written)
        else:
            judged_batches(batches, suite, runner, commit)
    except BaseException as exc:
        if is_interrupt(exc):
            result.status = "interrupted"
            result.elapsed_s = time.monotonic() - started
            if own_watchdog:
                suite.stop_watchdog()
            _close_judge(runner, result)
            with contextlib.suppress(Exception):  # a write the interrupt cut short
                con.execute("ROLLBACK")
            finish_run(con, result, timings)
            raise RunInterrupted(result) from None
        result.status = "failed"
        result.elapsed_s = time.monotonic() - started
        if own_watchdog:
            suite.stop_watchdog()
        with contextlib.suppress(Exception):
            _close_judge(runner, result)
        with contextlib.suppress(Exception):
            finish_run(con, result, timings)
        raise
    if own_watchdog:
        suite.stop_watchdog()
    _close_judge(runner, result)
    result.summary = summarize(con, suite, sample)
    if options.simulation is not None:
        result.trials = trial_results(con, run_id)
    gates = [*suite.suite.gates, *options.gates]
    verdicts = conversation_verdicts(con, suite, sample) if gates else {}
    result.gates = [
        check_trial_gate(g, result.trials)
        if g.pass_k is not None
        else check_gate(g, result.summary, verdicts)
        for g in gates
    ]
    simulated = None
    if options.simulation is not None:
        simulated = {
            str(r[0])
            for r in con.execute(
                "SELECT DISTINCT scenario_id FROM simulated_conversations WHERE simulation_id = ?",
                [options.simulation],
            ).fetchall()
        }
    result.warnings = run_warnings(suite, result.summary, len(sample), simulated)
    if options.simulation is not None:
        nothing = _completed_nothing(con, options.simulation)
        if nothing is not None:
            result.failures.append(nothing)
    if single_traces * 2 > result.candidates:
        result.warnings.append(
            f"{single_traces} of the {result.candidates} conversations in the window carried no "
            "conversation id (each is one trace: conversations.conversation_source = 'trace'); "
            "set one with spanscore.instrumentation.conversation(...) or the collector's "
            "conversation_attribute, or multi-turn conversations are scored piece by piece"
        )
    if suite.uses_judge:
        judge = result.judge or {}
        endpoint = (
            judge.get("endpoint")
            or JudgeClient(judge_settings(suite, options), environ=options.judge_environ).endpoint()
        )
        result.failures += judge_failures(suite, result.summary, endpoint, judge.get("last_error"))
    least = (
        options.min_conversations
        if options.min_conversations is not None
        else suite.suite.min_conversations
    )
    if len(sample) < least:
        result.failures.append(
            f"{plural(len(sample), 'conversation')} in the run, fewer than the {least} required "
            "(min_conversations)"
        )
    strict = options.strict if options.strict is not None else suite.suite.strict
    result.strict = strict
    if strict and result.warnings:
        count = len(result.warnings)
        result.failures.append(
            f"strict mode: {count} {'warning fails' if count == 1 else 'warnings fail'} the run"
        )
    result.status = "succeeded" if result.passed else "gate_failed"
    result.elapsed_s = time.monotonic() - started
    finish_run(con, result, timings)
    return result


def _completed_nothing(con: duckdb.DuckDBPyConnection, simulation_id: str) -> str | None:
    """Why a simulation's run cannot pass when no trial of it completed (every one failed
    in the agent, or never ran: the user model, the budget, an interruption); None when one
    did. Without it, a run with no gate over a simulation that measured nothing passed."""
    counts = dict(
        con.execute(
            "SELECT coalesce(stop_reason, status), count(*) FROM simulated_conversations "
            "WHERE simulation_id = ? GROUP BY 1 ORDER BY 1",
            [simulation_id],
        ).fetchall()
    )
    if any(counts.get(reason) for reason in COMPLETED_STOP_REASONS):
        return None
    ended = ", ".join(f"{reason} {n}" for reason, n in counts.items()) or "no trial"
    return (
        f"simulation {simulation_id} completed no conversation ({ended}): it measured "
        "nothing, so it cannot pass"
    )


def _check_whole(options: RunOptions) -> None:
    """A simulation's run scores every trial: pass^k counts a trial left unscored as failed,
    so sampling or filtering its conversations would fail the trials left out."""
    narrowing = [
        name
        for name, value in (
            ("--sample", options.sample),
            ("--max-conversations", options.max_conversations),
            ("--scenario", options.scenarios),
            ("--service", options.services),
            ("--agent", options.agents),
        )
        if value
    ]
    if narrowing:
        raise WindowError(
            f"{narrowing[0]} cannot narrow a simulation's run: its pass^k counts a trial left "
            f"unscored as failed, so a simulation is scored whole (drop {', '.join(narrowing)}, "
            "or unset the SPANSCORE_ variable that sets it; `simulate --scenario` simulates "
            "fewer scenarios)"
        )


def _check_simulation(con: duckdb.DuckDBPyConnection, simulation_id: str) -> None:
    found = con.execute(
        "SELECT count(*) FROM simulations WHERE simulation_id = ?", [simulation_id]
    ).fetchone()
    if not found or not found[0]:
        raise WindowError(
            f"no simulation {simulation_id!r} in this lake (`spanscore simulations` lists them)"
        )


def _close_judge(runner: JudgeRunner | None, result: RunResult) -> None:
    if runner is None:
        return
    try:
        runner.close()
    finally:
        result.judge = {**runner.totals.as_dict(), **runner.limit_info()}
