"""`spanscore simulate` (simulated users drive an agent before deployment; the same suite judges
it) and `spanscore simulations` (the simulations in a lake)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from .invocation import runnable
from .options import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    format_option,
    judge_options,
    lake_option,
    open_lake_or_fail,
    option,
    suite_options,
)


@click.command("simulate")
@lake_option()
@suite_options
@option(
    "--agent",
    "agent",
    envvar="SPANSCORE_SIMULATE_AGENT",
    required=True,
    metavar="TARGET",
    help="The agent: module:function or file.py:function (sync or async, run here, "
    "instrumented), an ArkSim custom agent (module or module:Class), or a URL: an "
    "OpenAI-compatible .../chat/completions endpoint, or any JSON endpoint (--agent-api json).",
)
@option(
    "--endpoint",
    envvar="SPANSCORE_SIMULATE_ENDPOINT",
    metavar="URL",
    help="OTLP/HTTP endpoint of the collector that stores the agent's spans in the lake "
    "(default: the collector running on --lake, where it records that it listens; else a "
    "private one on --lake, started and stopped by this command).",
)
@option(
    "--trials",
    envvar="SPANSCORE_TRIALS",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Conversations per scenario.",
)
@option(
    "--max-turns",
    envvar="SPANSCORE_MAX_TURNS",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="User messages per conversation at most (a scenario's user.max_turns wins).",
)
@option(
    "--turn-timeout",
    envvar="SPANSCORE_TURN_TIMEOUT",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds the agent has to answer one message; past it the trial ends as `timeout`.",
)
@option(
    "--concurrency",
    envvar="SPANSCORE_SIMULATE_CONCURRENCY",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Conversations at once.",
)
@option(
    "--seed",
    envvar="SPANSCORE_SIMULATE_SEED",
    type=int,
    default=0,
    show_default=True,
    help="The user model's sampling seed (each trial has its own from it); the same seed "
    "replays the users' turns from the lake's cache.",
)
@option(
    "--scenario",
    "scenarios",
    envvar="SPANSCORE_SIMULATE_SCENARIO",
    multiple=True,
    help="Only this scenario (repeatable). Default: every scenario, each of which must "
    "have a user: block.",
)
@option(
    "--user-model",
    envvar="SPANSCORE_USER_MODEL",
    help="Model playing the users (over the suite's simulator: block).",
)
@option(
    "--user-base-url",
    envvar="SPANSCORE_USER_BASE_URL",
    metavar="URL",
    help="OpenAI-compatible endpoint of the user model (default: the suite's simulator, "
    "else its judge, else OPENAI_BASE_URL).",
)
@option(
    "--user-api-key-env",
    envvar="SPANSCORE_USER_API_KEY_ENV",
    metavar="VAR",
    help="Variable holding the user model's key (default: OPENAI_API_KEY).",
)
@option(
    "--max-user-calls",
    envvar="SPANSCORE_MAX_USER_CALLS",
    type=click.IntRange(min=0),
    help="Budget: user-model calls at most; the trials left are reported as not run.",
)
@option(
    "--max-user-cost",
    envvar="SPANSCORE_MAX_USER_COST",
    type=click.FloatRange(min=0),
    metavar="USD",
    help="Budget: user-model spending at most.",
)
@option(
    "--agent-api",
    envvar="SPANSCORE_AGENT_API",
    type=click.Choice(["chat", "json"]),
    help="A URL agent's protocol (default: chat for .../chat/completions, else json).",
)
@option(
    "--agent-model",
    envvar="SPANSCORE_AGENT_MODEL",
    default="agent",
    show_default=True,
    help="chat: the `model` sent to the agent's endpoint.",
)
@option(
    "--request-template",
    envvar="SPANSCORE_REQUEST_TEMPLATE",
    metavar="JSON",
    help="json: the request body, with {message}, {conversation_id}, {scenario_id}, "
    '{simulation_id}, {trial}, {turn} and "{history}" (default: '
    '{"message": "{message}", "conversation_id": "{conversation_id}"}).',
)
@option(
    "--reply-path",
    envvar="SPANSCORE_REPLY_PATH",
    default="reply",
    show_default=True,
    help="json: where the reply text is in the answer (dotted, e.g. output.0.text).",
)
@option(
    "--agent-header",
    "agent_headers",
    envvar="SPANSCORE_AGENT_HEADER",
    multiple=True,
    metavar="NAME=VALUE",
    help="Header sent to a URL agent (repeatable).",
)
@option(
    "--resume",
    envvar="SPANSCORE_RESUME",
    metavar="SIMULATION",
    help="Run only the trials of this simulation that did not finish (each as a new "
    "attempt), with its options.",
)
@option(
    "--evaluate",
    "then_evaluate",
    envvar="SPANSCORE_SIMULATE_EVALUATE",
    is_flag=True,
    help="Then score the simulation with the same suite (as `evaluate --simulation ID`).",
)
@option(
    "--fail-under",
    "fail_under",
    envvar="SPANSCORE_SIMULATE_FAIL_UNDER",
    multiple=True,
    metavar="[SCENARIO/]KEY=X",
    help="With --evaluate: gate, e.g. pass^3=0.8 or pass_rate=0.9 (repeatable).",
)
@option(
    "--report",
    "report_path",
    envvar="SPANSCORE_SIMULATE_REPORT",
    type=click.Path(dir_okay=False),
    help="With --evaluate: write the run's HTML report here.",
)
@judge_options
@format_option("simulate", ["text", "json"], "json: one document on stdout.")
def simulate_command(
    lake: str,
    suite_path: str,
    allow_outside_metrics: bool,
    agent: str,
    endpoint: str | None,
    trials: int,
    max_turns: int,
    turn_timeout: float,
    concurrency: int,
    seed: int,
    scenarios: tuple[str, ...],
    user_model: str | None,
    user_base_url: str | None,
    user_api_key_env: str | None,
    max_user_calls: int | None,
    max_user_cost: float | None,
    agent_api: str | None,
    agent_model: str,
    request_template: str | None,
    reply_path: str,
    agent_headers: tuple[str, ...],
    resume: str | None,
    then_evaluate: bool,
    fail_under: tuple[str, ...],
    report_path: str | None,
    judge: dict[str, Any],
    fmt: str,
) -> None:
    """Simulated users drive the agent: for each scenario with a `user:` block, --trials
    conversations; the agent's spans go over OTLP into the lake as production's do, marked with
    the simulation id and the trial. `--evaluate` then judges them with the same suite (or run
    `spanscore evaluate --simulation ID` later); nightly runs over production leave them out.

    Exit status: 0 every trial ran to an end (and, with --evaluate, every gate passed); 1 a
    trial could not run (the user model failed or its budget was spent), no trial completed,
    or a gate failed; 2 usage, suite, or an agent or collector that cannot be reached; 3 the
    lake cannot be opened; 130 interrupted (`--resume ID` runs the rest).

    \b
    $ spanscore simulate --lake ./lake --suite suite.yaml --agent my_agent:answer --trials 3
    $ spanscore simulate --lake ./lake --suite suite.yaml --trials 4 --evaluate \\
        --agent http://127.0.0.1:8000/v1/chat/completions --fail-under 'pass^2=0.8'
    """
    from spanscore.evaluation import SuiteError, load_suite
    from spanscore.evaluation.runs.gates import parse_gate
    from spanscore.evaluation.simulation import records
    from spanscore.evaluation.simulation.simulate import (
        SimulationOptions,
        check_user_model,
        simulate,
        simulated_scenarios,
        stored_options,
        user_model_config,
    )
    from spanscore.evaluation.simulation.targets import (
        HttpSettings,
        TargetError,
        make_target,
        reachable,
    )

    try:
        suite = load_suite(suite_path, allow_outside_metrics=allow_outside_metrics)
    except SuiteError as exc:
        click.echo(f"Error: the suite cannot be used:\n{exc}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        gates = [parse_gate(g) for g in fail_under]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fail-under") from None
    headers = {}
    for header in agent_headers:
        name, sep, value = header.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(
                f"{header!r}: expected NAME=VALUE", param_hint="--agent-header"
            )
        headers[name.strip()] = value
    user = {
        "model": user_model,
        "base_url": user_base_url,
        "api_key_env": user_api_key_env,
        "max_calls": max_user_calls,
        "max_cost_usd": max_user_cost,
    }
    options = SimulationOptions(
        trials=trials,
        max_turns=max_turns,
        turn_timeout_s=turn_timeout,
        concurrency=concurrency,
        seed=seed,
        scenarios=scenarios,
        user_model={k: v for k, v in user.items() if v is not None},
    )
    if resume is not None:
        con = open_lake_or_fail(lake)
        try:
            row = records.simulation(con, resume)
        finally:
            con.close()
        if row is None:
            click.echo(
                f"Error: no simulation {resume!r} in this lake (`spanscore simulations` "
                "lists them)",
                err=True,
            )
            sys.exit(EXIT_USAGE)
        options = stored_options(row, None)
        options.user_model.update({k: v for k, v in user.items() if v is not None})
    # A lake that cannot be opened is exit 3, before anything; with no collector named, the
    # private one creates the lake, as `serve` does.
    open_lake_or_fail(lake, create=endpoint is None).close()
    echo = (lambda line: click.echo(line, err=True)) if fmt == "json" else click.echo
    python_agent = not agent.startswith(("http://", "https://"))
    settings = HttpSettings(
        api=agent_api,  # type: ignore[arg-type]
        model=agent_model,
        request_template=request_template,
        reply_path=reply_path,
        headers=headers,
        timeout_s=turn_timeout,
    )
    try:
        # What cannot be simulated is refused before a collector starts or a module loads.
        simulated_scenarios(suite, options.scenarios)
        target = None if python_agent else make_target(agent, settings)
        if target is not None:
            asyncio.run(target.check())
        if endpoint is not None:  # else the agent's spans would be lost, silently
            asyncio.run(reachable(endpoint, "the collector"))
        check_user_model(user_model_config(suite, options.user_model), options.environ)
        with _span_route(lake, endpoint, echo) as route:
            target = target or _python_agent(agent, settings, route)
            result = simulate(lake, suite, target, options, resume=resume, echo=echo)
    except SuiteError as exc:
        click.echo(f"Error: the suite cannot be simulated:\n{exc}", err=True)
        sys.exit(EXIT_USAGE)
    except TargetError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    # The spans are in the lake now (flushed and committed): say which
    # finished conversations have none, since those can only fail when judged.
    con = open_lake_or_fail(lake, read_only=True)
    try:
        ran = [o.conversation_id for o in result.outcomes if o.turns]
        spanless = sorted(set(ran) - records.conversations_with_spans(con, ran))
    finally:
        con.close()
    result.warnings.extend(_spanless_warnings(result.outcomes, spanless, len(ran)))
    summary = _summary(result)
    code = result.exit_code
    if fmt == "text":
        _print_simulation(result, summary, suite_path, agent)
    run_result = None
    if then_evaluate and result.status != "interrupted":
        run_result = _evaluate(lake, suite, result.simulation_id, gates, judge, fmt, report_path)
        if not run_result.passed:
            code = max(code, 1)
    if fmt == "json":
        document = {"simulation": summary}
        if run_result is not None:
            document["evaluation"] = run_result.to_dict()
        click.echo(json.dumps(document, indent=2, default=str))
    if code:
        sys.exit(code)


@contextlib.contextmanager
def _span_route(lake: str, endpoint: str | None, echo: Callable[[str], object]) -> Iterator[str]:
    """Where the agent's spans go while the simulation runs (yielded): `endpoint`; else the
    collector already running on the lake; else a private collector on the lake, started here.
    On the way out, a Python agent's spans are flushed, and the private collector commits them
    before it stops."""
    import spanscore.instrumentation

    with contextlib.ExitStack() as stack:
        if endpoint is None:
            endpoint = _lake_collector(lake, stack, echo)
        instrumented = spanscore.instrumentation.is_instrumented()
        # The spans of an agent instrumented here (by its own `instrument()` or ours) go there.
        stack.enter_context(spanscore.instrumentation.redirect(endpoint))
        try:
            yield endpoint
        finally:
            if not instrumented:
                spanscore.instrumentation.uninstrument()  # flushes the spans


def _python_agent(agent: str, settings: Any, endpoint: str) -> Any:
    """Import a Python agent, its spans going to `endpoint` (`_span_route`). Its module is
    imported before the process is instrumented, so that its own `instrument()` call, if it
    makes one, sets the spans up as in production (the service name, the resource); an agent
    that makes none is instrumented after (the `openai` shim patches the client classes, so
    clients its module created are traced too)."""
    import spanscore.instrumentation
    from spanscore.evaluation.simulation.targets import make_target

    target = make_target(agent, settings)
    if not spanscore.instrumentation.is_instrumented():
        spanscore.instrumentation.instrument(endpoint=endpoint, protocol="http/protobuf")
    return target


def _lake_collector(lake: str, stack: contextlib.ExitStack, echo: Callable[[str], object]) -> str:
    """The OTLP/HTTP URL of the lake's collector: a private one started here (stopped with
    `stack`), or the one already running on the lake, where it says it listens. One that does
    not say, or asks for a token, is a `TargetError` that says to pass `--endpoint`."""
    from spanscore.collector import Collector, load_config
    from spanscore.evaluation.simulation.targets import TargetError, reachable
    from spanscore.lake import LakeHeld

    config = load_config(
        overrides={"lake": lake, "grpc_port": 0, "http_port": 0, "maintenance_interval_s": 0}
    )
    try:
        collector = stack.enter_context(Collector(config))
    except LakeHeld as exc:
        holder = exc.holder
        url = holder.get("http")
        running = f"a collector (pid {holder['pid']})" if "pid" in holder else "a collector"
        if url is None:
            raise TargetError(
                f"{running} is already running on the lake {lake}, and it does not record "
                "where it listens: pass --endpoint with its OTLP/HTTP URL (e.g. "
                "http://127.0.0.1:4318; `spanscore status --endpoint URL` checks it)"
            ) from None
        if holder.get("auth") == "yes" or url.startswith("https:"):
            raise TargetError(
                f"{running} is already running on the lake {lake}, at {url}, and asks for a "
                f"token or TLS: pass --endpoint {url}, with the token in "
                "OTEL_EXPORTER_OTLP_HEADERS (authorization=Bearer%20TOKEN) and its CA in "
                "OTEL_EXPORTER_OTLP_CERTIFICATE"
            ) from None
        asyncio.run(reachable(url, f"the lake's running collector (it records {url})"))
        echo(f"{running} is already running on the lake: the agent's spans go to it, at {url}")
        return url
    return f"http://127.0.0.1:{collector.http_port}"


# Stop reasons of a trial whose last turn the agent did not answer.
_AGENT_FAILED = ("agent_error", "timeout")


def _spanless_warnings(outcomes: list[Any], spanless: list[str], ran: int) -> list[str]:
    """What to say of the conversations with no span in the lake. One in which the agent
    failed (raised, timed out) on its first message recorded nothing because of that failure;
    one in which the agent answered at all should have spans: then its instrumentation, or the
    way to the collector, is at fault."""
    by_id = {o.conversation_id: o for o in outcomes}
    failed: dict[str, list[Any]] = {}
    silent = []
    for cid in spanless:
        outcome = by_id[cid]
        answered = outcome.turns - (outcome.stop_reason in _AGENT_FAILED)
        if answered == 0:
            failed.setdefault(outcome.stop_reason, []).append(outcome)
        else:
            silent.append(cid)
    warnings = []
    if failed:
        causes = "; ".join(
            f"{reason} in {len(them)} (e.g. {them[0].conversation_id}: {them[0].error})"
            for reason, them in sorted(failed.items())
        )
        count = sum(len(them) for them in failed.values())
        warnings.append(
            f"{count} of the {ran} simulated conversations have no spans in the lake because "
            f"the agent failed on their first message before any span of theirs was recorded: "
            f"{causes}. Their trials count as failed"
        )
    if silent:
        warnings.append(
            f"{len(silent)} of the {ran} simulated conversations have no spans in the lake "
            f"although the agent answered (e.g. {silent[0]}): is the agent instrumented, and "
            "do its spans reach the collector? Unscored trials count as failed"
        )
    return warnings


def _summary(result: Any) -> dict[str, Any]:
    return {
        "simulation_id": result.simulation_id,
        "suite": result.suite_name,
        "agent": result.target,
        "status": result.status,
        "exit_code": result.exit_code,
        "trials": len(result.outcomes),
        "completed": result.completed,
        "not_run": result.not_run,
        "stop_reasons": result.by_reason(),
        "user_model": result.user,
        "warnings": result.warnings,
        "elapsed_s": round(result.elapsed_s, 3),
        "conversations": [
            {
                "conversation_id": o.conversation_id,
                "scenario": o.scenario_id,
                "trial": o.trial,
                "attempt": o.attempt,
                "stop_reason": o.stop_reason,
                "turns": o.turns,
                "error": o.error,
            }
            for o in sorted(result.outcomes, key=lambda o: (o.scenario_id, o.trial))
        ],
    }


def _print_simulation(result: Any, summary: dict[str, Any], suite_path: str, agent: str) -> None:
    reasons = ", ".join(f"{k} {v}" for k, v in summary["stop_reasons"].items()) or "none"
    click.echo(
        f"simulation {result.simulation_id}: {result.status}, {len(result.outcomes)} "
        f"trial{'s' if len(result.outcomes) != 1 else ''} in {result.elapsed_s:.1f} s "
        f"({reasons})"
    )
    user = result.user
    cost = user.get("cost_usd")
    click.echo(
        f"user model {user.get('model')}: {user.get('calls', 0)} calls, "
        f"{user.get('cache_hits', 0)} replayed from the cache, "
        + ("cost unknown (no price for the model)" if cost is None else f"${cost:.4f}")
        + (f"; {user['throttled']} rate-limited answers (429)" if user.get("throttled") else "")
        + (
            f"; {user['skipped']} turns SKIPPED: the budget was spent"
            if user.get("skipped")
            else ""
        )
    )
    for warning in result.warnings:
        click.echo(f"warning: {warning}")
    # The hints run as printed from any folder (`runnable` adds the lake).
    suite = shlex.quote(os.path.abspath(suite_path))
    if result.not_run:
        click.echo(
            runnable(
                f"{result.not_run} trials did not run to an end (user model, budget or "
                f"interruption): `spanscore simulate --suite {suite} --agent "
                f"{shlex.quote(agent)} --resume {result.simulation_id}` runs them"
            )
        )
    if result.outcomes and not result.completed + result.earlier_completed:
        click.echo("no trial completed: the simulation measured nothing")
    click.echo(
        runnable(
            f"score it: `spanscore evaluate --suite {suite} --simulation {result.simulation_id}`"
        )
    )


def _evaluate(
    lake: str,
    suite: Any,
    simulation_id: str,
    gates: list[Any],
    judge: dict[str, Any],
    fmt: str,
    report_path: str | None,
) -> Any:
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate

    from .summaries import print_summary

    options = RunOptions(
        simulation=simulation_id, settle_s=0, gates=gates, judge=judge, now=dt.datetime.now(dt.UTC)
    )
    result = evaluate(lake, suite, options)
    if fmt == "text":
        click.echo("")
        print_summary(result)
    if report_path:
        from .report import write_report_file

        write_report_file(lake, report_path, result.run_id, err=fmt == "json")
    return result


_SIMULATION_COLUMNS = [
    "simulation_id",
    "suite_name",
    "status",
    "started_at",
    "trials",
    "target",
    "stop_reasons",
]


@click.command("simulations")
@lake_option()
@option(
    "--limit",
    envvar="SPANSCORE_SIMULATIONS_LIMIT",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Simulations to list.",
)
@format_option("simulations", ["table", "csv", "json"], "Output format.")
def simulations_command(lake: str, limit: int, fmt: str) -> None:
    """List the simulations (`spanscore simulate`) in the lake, newest first: id, suite,
    status, trials per scenario, the agent, and how its conversations ended.

    \b
    $ spanscore simulations --lake ./lake
    """
    from spanscore.evaluation.simulation import records

    from .query import write_rows

    con = open_lake_or_fail(lake, read_only=True)
    try:
        rows = [
            {
                "simulation_id": s.simulation_id,
                "suite_name": s.suite_name,
                "status": s.status,
                "started_at": s.started_at,
                "trials": s.trials,
                "target": s.target,
                "stop_reasons": ", ".join(
                    f"{k} {v}"
                    for k, v in records.counts_by_stop_reason(con, s.simulation_id).items()
                ),
            }
            for s in records.simulations(con, limit=limit)
        ]
    finally:
        con.close()
    write_rows(iter(rows), _SIMULATION_COLUMNS, fmt, sys.stdout)


__all__ = ["EXIT_INTERRUPTED", "simulate_command", "simulations_command"]
