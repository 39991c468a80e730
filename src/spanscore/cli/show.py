"""`spanscore show`: one conversation's trajectory as a tree."""

from __future__ import annotations

import json
from typing import Any

import click

from .options import lake_option, open_lake_or_fail, option


def _short(value: Any, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _ms(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "-"


def render_trajectory(trajectory: Any, width: int = 100) -> list[str]:
    """The lines `spanscore show` prints (also used by tests and the demo)."""
    from spanscore.evaluation import Handoff, ModelCall, ToolCall

    t = trajectory
    duration = (
        f"{(t.end_time - t.start_time).total_seconds() * 1000:.1f} ms"
        if t.start_time and t.end_time
        else "-"
    )
    lines = [
        f"conversation {t.conversation_id}",
        f"  agent {t.agent_name or '-'}  service {t.service_name or '-'}  "
        f"spans {t.span_count}  started {t.start_time:%Y-%m-%d %H:%M:%S}  lasted {duration}"
        if t.start_time
        else f"  agent {t.agent_name or '-'}  service {t.service_name or '-'}",
    ]
    for turn in t.turns:
        # Turns count from 1, as in the report (`turn.index` counts from 0).
        lines.append(f"turn {turn.index + 1}  user: {_short(turn.user_message or '-', width)}")
        steps = turn.steps
        group_sizes: dict[int, int] = {}
        for call in turn.tool_calls:
            if call.parallel_group is not None:
                group_sizes[call.parallel_group] = group_sizes.get(call.parallel_group, 0) + 1
        for i, step in enumerate(steps):
            branch = "└─" if i == len(steps) - 1 else "├─"
            cont = "  " if i == len(steps) - 1 else "│ "
            if isinstance(step, ModelCall):
                asked = f" → {', '.join(step.requested)}" if step.requested else ""
                error = f"  ERROR {step.error}" if step.error else ""
                lines.append(f"  {branch} model {step.name}  {_ms(step.latency_ms)}{asked}{error}")
            elif isinstance(step, ToolCall):
                parallel = group_sizes.get(step.parallel_group or 0, 0) > 1
                group = f"  [parallel group {step.parallel_group}]" if parallel else ""
                ident = f"  {step.call_id}" if step.call_id else ""
                lines.append(f"  {branch} tool {step.name}{ident}  {_ms(step.latency_ms)}{group}")
                lines.append(f"  {cont}    args   {_short(step.arguments, width)}")
                if step.error:
                    said = step.error_message
                    detail = f": {said}" if said and said != step.error else ""
                    lines.append(f"  {cont}    ERROR  {_short(step.error + detail, width)}")
                if step.result is not None:
                    lines.append(f"  {cont}    result {_short(step.result, width)}")
            elif isinstance(step, Handoff):
                lines.append(
                    f"  {branch} handoff {step.from_agent or '?'} → {step.to_agent or '?'}"
                )
        if turn.final_response is not None:
            lines.append(f"  answer: {_short(turn.final_response, width)}")
    for warning in t.warnings:
        lines.append(f"warning: {warning}")
    return lines


@click.command("show")
@lake_option()
@option(
    "--json",
    "as_json",
    envvar="SPANSCORE_SHOW_JSON",
    is_flag=True,
    help="Print the trajectory as JSON (the pydantic model).",
)
@click.argument("conversation_id")
def show_command(lake: str, as_json: bool, conversation_id: str) -> None:
    """Print a conversation's trajectory: turns, model calls, tool calls with arguments,
    results, errors and timings.

    \b
    $ spanscore show cs-cancel-2 --lake ./spanscore-demo
    """
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    # A cold `show` is mostly fixed costs: DuckDB opening the lake (its extensions, the
    # catalog) and planning the rules' query, and Python importing the trajectory model
    # (pydantic). DuckDB does its part without the GIL, so a thread imports the model while
    # this one opens the lake and reads the conversation's rows. The queries stay in the main
    # thread, where Ctrl-C interrupts them (a query interrupted in another thread aborted the
    # process as it exited).
    with ThreadPoolExecutor(max_workers=1) as pool:
        importing = pool.submit(importlib.import_module, "spanscore.evaluation.trajectory.load")
        from spanscore.evaluation.simulation import records
        from spanscore.evaluation.trajectory.rows import trajectory_rows

        con = open_lake_or_fail(lake)
        try:
            rows = trajectory_rows(con, conversation_ids=[conversation_id]).read_all()
            simulated = records.simulated_conversation(con, conversation_id)
        finally:
            con.close()
        load = importing.result()
    trajectory = next(iter(load.trajectories_from_rows(rows)), None)
    if trajectory is None and simulated is None:
        from spanscore.lake import LakeLocation

        where = LakeLocation.parse(lake).describe()  # no password
        raise click.ClickException(f"no conversation {conversation_id!r} in {where}")
    if as_json:
        click.echo(json.dumps(show_document(conversation_id, trajectory, simulated), indent=2))
        return
    if trajectory is not None:
        click.echo("\n".join(render_trajectory(trajectory)))
    if simulated is not None:
        click.echo("\n".join(render_simulation(*simulated, spans=trajectory is not None)))


def show_document(
    conversation_id: str, trajectory: Any, simulated: tuple[Any, list[Any]] | None
) -> dict[str, Any]:
    """`show --json`: the trajectory document, whatever the conversation; a simulated one has
    one more key, `simulation` (the trial and its turns as the simulator recorded them). With
    no span recorded, the trajectory is an empty one that says so, so `.turns` is always
    there."""
    if trajectory is None:
        from spanscore.evaluation import Trajectory

        trajectory = Trajectory(
            conversation_id=conversation_id,
            warnings=["the agent recorded no spans: `simulation.turns` has the turns"],
        )
    document: dict[str, Any] = json.loads(trajectory.model_dump_json())
    if simulated is not None:
        trial, turns = simulated
        document["simulation"] = json.loads(
            json.dumps({**vars(trial), "turns": [vars(t) for t in turns]}, default=str)
        )
    return document


def render_simulation(trial: Any, turns: list[Any], *, spans: bool) -> list[str]:
    """How a simulated conversation went, from the simulator's records: who drove it, why it
    ended, and, when the agent recorded no spans, the turns as the simulator saw them."""
    ended = trial.stop_reason or trial.status
    lines = [
        f"simulated: simulation {trial.simulation_id}, scenario {trial.scenario_id}, "
        f"trial {trial.trial}"
        + (f" (attempt {trial.attempt})" if trial.attempt > 1 else "")
        + f"; ended: {ended} after {trial.turn_count} user "
        f"message{'s' if trial.turn_count != 1 else ''}"
    ]
    if trial.error:
        lines.append(f"  ERROR  {trial.error}")
    if not spans:
        lines.append("  (the agent recorded no spans: the turns as the simulator saw them)")
        for turn in turns:
            lines.append(f"turn {turn.turn_index}  user: {_short(turn.user_message)}")
            said = turn.agent_reply if turn.agent_reply is not None else f"ERROR {turn.error}"
            lines.append(f"  answer: {_short(said)}")
    return lines
