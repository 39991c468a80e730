"""A simulation: for each scenario with a `user:` block, `trials` conversations between a
simulated user and the agent, recorded in the lake (`records`), the agent's spans arriving
over OTLP as production's do.

Each trial runs turn by turn: the user model writes the user's message (or the scenario's
`opening` is sent as it is), the agent answers within the turn timeout, until the user ends
the conversation, its turns run out, or the agent fails. Trials run concurrently (at most
`concurrency` at once); the user model's calls share one pool with adaptive concurrency.

What ends a trial is its stop reason (`spanscore.lake.schema.SIMULATION_STOP_REASONS`). A
trial that could not run to an end (the user model failed, its budget was spent, the
simulation was stopped) is left out of pass^k, and `resume` runs it again as a new attempt,
in a new conversation: no trial is recorded twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from spanscore.evaluation.llm.client import JudgeClient, JudgeUnavailable
from spanscore.evaluation.llm.pool import JudgeRunner
from spanscore.evaluation.simulation import records
from spanscore.evaluation.simulation.records import Recorder, SimulationRow, TrialRow, TurnRow
from spanscore.evaluation.simulation.targets import (
    AgentFailed,
    Conversation,
    Target,
    TargetError,
    reachable,
)
from spanscore.evaluation.simulation.user_model import (
    PURPOSE_PREFIX,
    UserModelError,
    next_turn_request,
    read_turn,
)
from spanscore.evaluation.suites.load import Problem, SuiteError
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Scenario
from spanscore.evaluation.suites.users import SimulatedUser, SimulatorConfig
from spanscore.lake import connect
from spanscore.lake.schema import COMPLETED_STOP_REASONS

log = logging.getLogger("spanscore.simulate")
UTC = dt.UTC

# Trials whose end is not the agent's doing: `resume` runs them again.
RERUN = ("planned", "running")
RERUN_REASONS = ("user_model_error", "budget", "interrupted")


@dataclass
class SimulationOptions:
    trials: int = 1
    max_turns: int = 10
    turn_timeout_s: float = 120.0
    concurrency: int = 8
    seed: int = 0
    scenarios: tuple[str, ...] = ()
    # Over the suite's `simulator:` block: model, base_url, api_key_env, max_calls, ...
    user_model: dict[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def stored(self) -> dict[str, Any]:
        """What `resume` needs to run the same simulation (no secrets: no environment)."""
        return {
            "trials": self.trials,
            "max_turns": self.max_turns,
            "turn_timeout_s": self.turn_timeout_s,
            "concurrency": self.concurrency,
            "seed": self.seed,
            "scenarios": list(self.scenarios),
            "user_model": {k: v for k, v in self.user_model.items() if k != "headers"},
        }


@dataclass
class TrialOutcome:
    conversation_id: str
    scenario_id: str
    trial: int
    attempt: int
    stop_reason: str
    turns: int
    error: str | None


@dataclass
class SimulationResult:
    simulation_id: str
    suite_name: str
    target: str
    status: str = "running"  # completed, interrupted, budget_spent
    outcomes: list[TrialOutcome] = field(default_factory=list)
    user: dict[str, Any] = field(default_factory=dict)  # the user model's calls and cost
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    resumed: bool = False
    # A resumed simulation's trials that had completed before, not run again.
    earlier_completed: int = 0

    def count(self, *reasons: str) -> int:
        return sum(1 for o in self.outcomes if o.stop_reason in reasons)

    @property
    def completed(self) -> int:
        """Trials the simulated user took to an end (the agent answered every turn)."""
        return self.count(*COMPLETED_STOP_REASONS)

    @property
    def not_run(self) -> int:
        return self.count("budget", "user_model_error", "interrupted")

    @property
    def exit_code(self) -> int:
        """0 when every trial ran to an end; 1 when some did not (budget, user model,
        interruption) or none completed: a simulation that completed nothing never passes.
        A resume counts the trials completed before it (resuming a finished simulation runs
        nothing, and passes)."""
        if self.status == "interrupted":
            return 130
        if self.completed + self.earlier_completed == 0 or self.not_run:
            return 1
        return 0

    def by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.stop_reason] = counts.get(outcome.stop_reason, 0) + 1
        return dict(sorted(counts.items()))


def new_simulation_id(now: dt.datetime | None = None) -> str:
    moment = (now or dt.datetime.now(UTC)).astimezone(UTC)
    return f"sim-{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def conversation_id(simulation_id: str, scenario_id: str, trial: int, attempt: int) -> str:
    base = f"{simulation_id}/{scenario_id}/t{trial}"
    return base if attempt == 1 else f"{base}/a{attempt}"


def simulated_scenarios(suite: LoadedSuite, wanted: tuple[str, ...]) -> list[Scenario]:
    """The scenarios to simulate: those named (every one, by default). A scenario without a
    `user:` block, or a name that is no scenario, is a suite error naming it."""
    scenarios = suite.suite.scenarios
    known = {s.id: s for s in scenarios}
    problems: list[Problem] = []
    for name in wanted:
        if name not in known:
            shown = ", ".join(repr(s) for s in known) or "none"
            problems.append(
                Problem(suite.label, None, "scenarios", f"no scenario {name!r} (it has {shown})")
            )
    chosen = [known[n] for n in dict.fromkeys(wanted) if n in known] if wanted else scenarios
    for scenario in chosen:
        if scenario.user is None:
            index = scenarios.index(scenario)
            problems.append(
                Problem(
                    suite.label,
                    suite.scenario_lines.get(scenario.id),
                    f"scenarios[{index}]",
                    f"scenario {scenario.id!r} has no `user:` block: `spanscore simulate` needs "
                    "one (goal, profile, knowledge...; docs/simulation.md), or leave the "
                    "scenario out with --scenario",
                )
            )
    if not chosen and not problems:
        problems.append(Problem(suite.label, None, "scenarios", "the suite has no scenario"))
    if problems:
        raise SuiteError(problems)
    return chosen


def user_model_config(suite: LoadedSuite, overrides: Mapping[str, Any]) -> SimulatorConfig:
    """The suite's `simulator:` block over the judge's endpoint settings, options over both."""
    base: dict[str, Any] = {}
    judge = suite.suite.judge
    if judge is not None:
        base = judge.model_dump(
            include={"base_url", "api_key_env", "azure", "api_version", "headers", "prices"},
            exclude_unset=True,
        )
    if suite.suite.simulator is not None:
        base.update(suite.suite.simulator.model_dump(exclude_unset=True))
    base.update({k: v for k, v in overrides.items() if v is not None})
    return SimulatorConfig.model_validate(base)


def check_user_model(config: SimulatorConfig, environ: Mapping[str, str] | None) -> None:
    """Refuse, before anything is recorded, a user model that would fail every call (no key
    and no endpoint, or an endpoint that cannot be reached) or a cost budget that cannot be
    counted (no price): `TargetError`, in the user model's own settings (the judge's checks
    speak of the judge's). An endpoint that is down is refused even when the lake's cache
    holds every turn: a replay would pass off the turns of a user model that is not there."""
    client = JudgeClient(config, environ=environ)
    if client.api_key() is None and client.base_url() is None and not config.is_azure():
        raise TargetError(
            "the user model has no key and no endpoint: export OPENAI_API_KEY (or name the "
            "variable with --user-api-key-env), or point it at an OpenAI-compatible endpoint "
            "(--user-base-url, the suite's simulator.base_url, or OPENAI_BASE_URL; a local "
            "server needs no key)"
        )
    if config.max_cost_usd is not None and config.price(config.model) is None:
        raise TargetError(
            f"--max-user-cost needs the price of the user model {config.model!r}: add it "
            "under the suite's simulator.prices (USD per million tokens: input, cached_input, "
            "output)"
        )
    asyncio.run(reachable(client.endpoint(), "the user model"))


@dataclass
class _Trial:
    scenario: Scenario
    user: SimulatedUser
    row: TrialRow


def simulate(
    lake: str,
    suite: LoadedSuite,
    target: Target,
    options: SimulationOptions,
    *,
    resume: str | None = None,
    echo: Callable[[str], object] | None = None,
) -> SimulationResult:
    """Run (or resume) a simulation; see the module doc. Raises `SuiteError` for a scenario
    that cannot be simulated and `TargetError` for an agent that cannot be reached, before
    anything is recorded."""
    started = time.monotonic()
    config = user_model_config(suite, options.user_model)
    check_user_model(config, options.environ)
    con = connect(lake)
    try:
        if resume is not None:
            result, plan = _resume_plan(con, suite, target, options, resume)
        else:
            result, plan = _new_plan(con, suite, target, options)
        runner = JudgeRunner(config, lake=con, run_id=result.simulation_id, environ=options.environ)
        if runner.cache is not None:  # a replay answers from memory, not a query per turn
            runner.cache.preload(PURPOSE_PREFIX)
        try:
            runner.start()
        except JudgeUnavailable as exc:
            raise TargetError(f"the user model cannot be used: {exc}") from None
        recorder = Recorder(con)
        try:
            status = asyncio.run(_run_all(plan, target, runner, recorder, options, result, echo))
        finally:
            runner.close()
            recorder.flush()
        result.status = status
        totals = runner.totals
        result.user = {
            "model": config.model,
            **totals.as_dict(),
            "throttled": runner.client.stats.throttled,
        }
        result.elapsed_s = time.monotonic() - started
        details = {
            "stop_reasons": records.counts_by_stop_reason(con, result.simulation_id),
            "user_model": result.user,
            "elapsed_s": round(result.elapsed_s, 3),
        }
        records.set_simulation(
            con, result.simulation_id, status=status, details=details, finished=True
        )
        return result
    finally:
        con.close()


def _new_plan(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    target: Target,
    options: SimulationOptions,
) -> tuple[SimulationResult, list[_Trial]]:
    scenarios = simulated_scenarios(suite, options.scenarios)
    asyncio.run(target.check())
    simulation_id = new_simulation_id()
    plan = []
    for scenario in scenarios:
        assert scenario.user is not None
        for trial in range(1, options.trials + 1):
            cid = conversation_id(simulation_id, scenario.id, trial, 1)
            trial_row = TrialRow(cid, simulation_id, scenario.id, trial, 1)
            plan.append(_Trial(scenario, scenario.user, trial_row))
    row = SimulationRow(
        simulation_id=simulation_id,
        suite_name=suite.name,
        suite_hash=suite.content_hash,
        target=target.description,
        status="running",
        started_at=dt.datetime.now(UTC),
        finished_at=None,
        trials=options.trials,
        options=options.stored(),
        details={},
    )
    records.start_simulation(con, row, [t.row for t in plan])
    result = SimulationResult(simulation_id, suite.name, target.description)
    return result, plan


def stored_options(row: SimulationRow, environ: Mapping[str, str] | None) -> SimulationOptions:
    """The options a simulation ran with, to resume it the same way."""
    stored = dict(row.options)
    return SimulationOptions(
        trials=int(stored.get("trials", row.trials)),
        max_turns=int(stored.get("max_turns", 10)),
        turn_timeout_s=float(stored.get("turn_timeout_s", 120.0)),
        concurrency=int(stored.get("concurrency", 8)),
        seed=int(stored.get("seed", 0)),
        scenarios=tuple(stored.get("scenarios", ())),
        user_model=dict(stored.get("user_model", {})),
        environ=environ,
    )


def _resume_plan(
    con: duckdb.DuckDBPyConnection,
    suite: LoadedSuite,
    target: Target,
    options: SimulationOptions,
    simulation_id: str,
) -> tuple[SimulationResult, list[_Trial]]:
    """The trials of `simulation_id` still to run, each as a new attempt; those that never
    finished (the simulation was killed) are marked interrupted first."""
    row = records.simulation(con, simulation_id)
    if row is None:
        known = [r.simulation_id for r in records.simulations(con, limit=5)]
        raise TargetError(
            f"no simulation {simulation_id!r} in this lake (`spanscore simulations` lists "
            f"them; the latest: {', '.join(known) or 'none'})"
        )
    if row.suite_name != suite.name:
        raise TargetError(
            f"simulation {simulation_id} simulated suite {row.suite_name!r}, not {suite.name!r}"
        )
    scenarios = {s.id: s for s in simulated_scenarios(suite, options.scenarios)}
    asyncio.run(target.check())
    latest: dict[tuple[str, int], TrialRow] = {}
    for trial in records.trials(con, simulation_id):
        latest[(trial.scenario_id, trial.trial)] = trial  # ordered by attempt
    unfinished = []
    plan = []
    for (scenario_id, number), trial in sorted(latest.items()):
        if trial.status in RERUN:
            unfinished.append(
                dataclasses.replace(
                    trial,
                    status="finished",
                    stop_reason="interrupted",
                    error="the simulation stopped before this trial finished",
                    finished_at=dt.datetime.now(UTC),
                )
            )
        elif trial.stop_reason not in RERUN_REASONS:
            continue
        scenario = scenarios.get(scenario_id)
        if scenario is None or scenario.user is None:
            raise TargetError(
                f"simulation {simulation_id} has trials of scenario {scenario_id!r}, which the "
                "suite no longer has (or no longer gives a user)"
            )
        attempt = trial.attempt + 1
        cid = conversation_id(simulation_id, scenario_id, number, attempt)
        plan.append(
            _Trial(
                scenario, scenario.user, TrialRow(cid, simulation_id, scenario_id, number, attempt)
            )
        )
    if unfinished:
        recorder = Recorder(con)
        for trial in unfinished:
            recorder.finished(trial, [])
        recorder.flush()
    records.plan_more(con, [t.row for t in plan])
    records.set_simulation(
        con, simulation_id, status="running", details=row.details, finished=False
    )
    result = SimulationResult(simulation_id, suite.name, target.description, resumed=True)
    rerun = {(t.row.scenario_id, t.row.trial) for t in plan}
    result.earlier_completed = sum(
        1
        for key, trial in latest.items()
        if key not in rerun and trial.stop_reason in COMPLETED_STOP_REASONS
    )
    if not plan:
        result.warnings.append(
            f"nothing to resume: every trial of simulation {simulation_id} has finished"
        )
    return result, plan


async def _run_all(
    plan: list[_Trial],
    target: Target,
    runner: JudgeRunner,
    recorder: Recorder,
    options: SimulationOptions,
    result: SimulationResult,
    echo: Callable[[str], object] | None,
) -> str:
    """Every planned trial; returns the simulation's status."""
    slots = asyncio.Semaphore(options.concurrency)
    budget: list[str] = []  # set once the user model's budget is spent
    done = 0

    async def one(item: _Trial) -> None:
        nonlocal done
        async with slots:
            outcome = await _run_trial(item, target, runner, recorder, options, budget)
        result.outcomes.append(outcome)
        done += 1
        if echo is not None:
            flag = "" if outcome.stop_reason in COMPLETED_STOP_REASONS else " !"
            echo(
                f"[{done}/{len(plan)}] {outcome.conversation_id}: {outcome.stop_reason} "
                f"after {outcome.turns} turn{'s' if outcome.turns != 1 else ''}{flag}"
                + (f" ({outcome.error})" if outcome.error else "")
            )

    async def flush_often() -> None:
        while True:
            await asyncio.sleep(1.0)
            await asyncio.to_thread(recorder.flush)

    flusher = asyncio.create_task(flush_often())
    tasks = [asyncio.create_task(one(item)) for item in plan]
    status = "completed"
    try:
        await asyncio.gather(*tasks)
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        await target.aclose()
    if status != "interrupted" and budget:
        status = "budget_spent"
    return status


async def _run_trial(
    item: _Trial,
    target: Target,
    runner: JudgeRunner,
    recorder: Recorder,
    options: SimulationOptions,
    budget: list[str],
) -> TrialOutcome:
    row = item.row
    row.status = "running"
    row.started_at = dt.datetime.now(UTC)
    conv = Conversation(
        row.conversation_id,
        row.scenario_id,
        row.simulation_id,
        row.trial,
        item.user.goal,
        tuple(item.user.knowledge),
    )
    turns: list[TurnRow] = []
    history: list[tuple[str, str]] = []
    stop_reason = "max_turns"
    error: str | None = None
    max_turns = item.user.max_turns or options.max_turns
    session = None
    try:
        if budget:
            stop_reason, error = "budget", budget[0]
            return _finish(row, recorder, turns, stop_reason, error)
        session = target.open(conv)
        for index in range(max_turns):
            cached = False
            if index == 0 and item.user.opening:
                message = item.user.opening
            else:
                request = dataclasses.replace(
                    next_turn_request(
                        item.user,
                        history,
                        scenario_id=row.scenario_id,
                        seed=options.seed,
                        trial=row.trial,
                    ),
                    asked_for=row.conversation_id,  # its cached turn goes with it (erase)
                )
                answers = await asyncio.wrap_future(runner.submit({request.digest: request}))
                answer = answers[request.digest]
                row.user_calls += 0 if answer.cached or not answer.ok else 1
                row.user_cache_hits += 1 if answer.cached else 0
                if answer.usage.cost_usd is not None and row.user_cost_usd is not None:
                    row.user_cost_usd += answer.usage.cost_usd
                try:
                    turn = read_turn(answer)
                except UserModelError as exc:
                    if exc.budget:
                        budget.append(str(exc))
                        stop_reason = "budget"
                    else:
                        stop_reason = "user_model_error"
                    error = str(exc)
                    break
                if turn.outcome != "continue":
                    stop_reason = (
                        "goal_reached" if turn.outcome == "goal_reached" else "user_gave_up"
                    )
                    break
                message, cached = turn.message, turn.cached
            agent_history = [
                m
                for said, reply in history
                for m in (
                    {"role": "user", "content": said},
                    {"role": "assistant", "content": reply},
                )
            ]
            sent_at = dt.datetime.now(UTC)
            clock = time.perf_counter()
            try:
                reply = await asyncio.wait_for(
                    session.send(message, agent_history), options.turn_timeout_s
                )
            except TimeoutError:
                stop_reason = "timeout"
                error = f"the agent did not answer within {options.turn_timeout_s:g} s"
            except AgentFailed as exc:
                stop_reason, error = "agent_error", str(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the agent's own exception: the trial's result
                stop_reason, error = "agent_error", f"{type(exc).__name__}: {exc}"
            else:
                turns.append(
                    TurnRow(
                        row.conversation_id,
                        index,
                        message,
                        reply,
                        None,
                        (time.perf_counter() - clock) * 1000,
                        cached,
                        sent_at,
                    )
                )
                history.append((message, reply))
                continue
            turns.append(
                TurnRow(
                    row.conversation_id,
                    index,
                    message,
                    None,
                    error,
                    (time.perf_counter() - clock) * 1000,
                    cached,
                    sent_at,
                )
            )
            break
        return _finish(row, recorder, turns, stop_reason, error)
    except asyncio.CancelledError:
        _finish(row, recorder, turns, "interrupted", "the simulation was stopped mid-trial")
        raise
    finally:
        if session is not None:
            try:
                await asyncio.wait_for(session.close(), options.turn_timeout_s)
            except (Exception, asyncio.CancelledError):
                log.debug("closing the agent's session failed", exc_info=True)


def _finish(
    row: TrialRow,
    recorder: Recorder,
    turns: list[TurnRow],
    stop_reason: str,
    error: str | None,
) -> TrialOutcome:
    row.status = "finished"
    row.stop_reason = stop_reason
    row.error = error
    row.turn_count = len(turns)
    row.finished_at = dt.datetime.now(UTC)
    recorder.finished(row, turns)
    return TrialOutcome(
        row.conversation_id, row.scenario_id, row.trial, row.attempt, stop_reason, len(turns), error
    )
