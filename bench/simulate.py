"""Benchmark: `spanscore simulate`, the simulator itself, against an agent that answers at once.

A local OpenAI-compatible server in its own process (``spanscore.examples.llm_server
--users TURNS``) plays users who say ``--turns`` messages (their goal, then a fact they know
each) and then reach their goal; the agent is an async function in this process that answers at
once. Each run uses a new embedded lake (no cached user turn). Printed:

- simulated turns per second, and the simulator's CPU per turn (target < 2 ms): the CPU this
  process spends on the turns of a run of ``--trials`` trials a scenario beyond one of half as
  many, over the turns between them (so the lake's set-up, the extensions' loading and the last
  commit cancel out). The user model's client (``openai`` on the judge's transport) is part of
  it; beside it, in the same run, that client alone asking the same number of questions of the
  same shape, as many at once, and the simulator's own share above it;
- against a user-model server that answers after ``--latency-ms`` and refuses with 429 past
  ``--capacity`` questions in flight, the user model's questions per second as a share of the
  server's capacity (capacity / latency; target >= 90 %): over the whole run, and in its steady
  state (the middle 80 % of the turns' send times, without the first conversations' ramp-up and
  the last ones' tail); and the 429s received.

Figures are printed, nothing is asserted.

    .venv/bin/python bench/simulate.py
    .venv/bin/python bench/simulate.py --trials 400 --turns 5 --capacity 32 --latency-ms 200
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanscore.evaluation import load_suite
from spanscore.evaluation.simulation.simulate import SimulationOptions, SimulationResult, simulate
from spanscore.evaluation.simulation.targets import CallableTarget
from spanscore.evaluation.simulation.user_model import next_turn_request
from spanscore.lake import connect

# Free ports come from the tests' helpers; a script run as `python bench/simulate.py` has
# bench/ on sys.path, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.ports import free_port

SCENARIOS = 10


def start_users(turns: int, capacity: int | None, latency_ms: int) -> tuple[Any, str]:
    port = free_port()
    args = [
        sys.executable, "-m", "spanscore.examples.llm_server", "--users", str(turns),
        "--quiet", "--port", str(port), "--delay-ms", str(latency_ms),
    ]  # fmt: skip
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=1):
                return process, url
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit("the user-model server did not start") from None
            time.sleep(0.05)


def facts(turns: int) -> list[str]:
    """What a user knows: the users say their goal, then a fact a message (`ScenarioUsers`)."""
    return [f"fact {j}" for j in range(1, turns)]


def suite_file(directory: Path, turns: int) -> Path:
    path = directory / "suite.yaml"
    path.write_text(
        "name: simulate-bench\nscenarios:\n"
        + "".join(
            f"  - {{id: s{i}, user: {{goal: 'goal {i}', profile: 'a user of the benchmark', "
            f"knowledge: {facts(turns)}}}}}\n"
            for i in range(SCENARIOS)
        )
    )
    return path


async def agent(message: str) -> str:
    return f"done: {message}"


@dataclass
class Run:
    result: SimulationResult
    cpu_s: float  # this process's CPU over `simulate`, set-up and last commit included
    active_s: float  # from the first trial's start to the last one's end
    steady_turns_per_s: float  # turns sent in the middle 80 % of the turns' send times

    @property
    def turns(self) -> int:
        return sum(o.turns for o in self.result.outcomes)

    @property
    def questions(self) -> int:
        return int(self.result.user.get("calls", 0))


def run(directory: Path, url: str, trials: int, concurrency: int, turns: int) -> Run:
    """One simulation on a new lake."""
    lake = directory / f"lake-{time.monotonic_ns()}"
    connect(lake, create=True).close()
    suite = load_suite(suite_file(directory, turns))
    options = SimulationOptions(
        trials=trials,
        max_turns=1000,
        concurrency=concurrency,
        user_model={"base_url": url, "concurrency": 256, "max_attempts": 10},
    )
    cpu = time.process_time()
    result = simulate(str(lake), suite, CallableTarget(agent, "bench agent"), options)
    cpu = time.process_time() - cpu
    con = connect(lake)
    try:
        row = con.execute(
            "SELECT epoch(max(finished_at)) - epoch(min(started_at)) FROM simulated_conversations"
        ).fetchone()
        sent = con.execute(
            "SELECT quantile_cont(epoch(sent_at), [0.1, 0.9]), count(*) FROM simulated_turns"
        ).fetchone()
    finally:
        con.close()
    active = float(row[0]) if row and row[0] else result.elapsed_s
    (p10, p90), count = sent if sent and sent[0] else ((0.0, 0.0), 0)
    steady = 0.8 * count / (p90 - p10) if p90 > p10 else 0.0
    return Run(result, cpu, active, steady)


def floor_cpu_per_call(url: str, calls: int, concurrency: int, turns: int) -> float:
    """CPU ms per call of the user model's client alone (the `openai` client on the judge's
    transport, as the simulator uses it) asking user-model questions of the same shape (a
    history of `turns` / 2 messages), `concurrency` at once."""
    import orjson
    from openai import AsyncOpenAI

    from spanscore.evaluation.llm.http import judge_http_client
    from spanscore.evaluation.suites.users import SimulatedUser

    user = SimulatedUser(goal="goal 0", profile="a user of the benchmark", knowledge=facts(turns))
    history = [(f"message {i}", f"done: message {i}") for i in range(turns // 2)]
    request = next_turn_request(user, history, scenario_id="s0", seed=0, trial=1)
    body = orjson.dumps(
        {
            "model": "gpt-4.1-mini",
            "messages": [{"role": r, "content": c} for r, c in request.messages],
            "temperature": 0.7,
            "max_tokens": 300,
            "seed": 1,
        }
    )

    async def main() -> float:
        client = AsyncOpenAI(
            base_url=url, api_key="bench", max_retries=0, http_client=judge_http_client(url, 600)
        )
        slots = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with slots:
                await client.post("/chat/completions", cast_to=object, content=body)

        cpu = time.process_time()
        await asyncio.gather(*(one() for _ in range(calls)))
        spent = time.process_time() - cpu
        await client.close()
        return spent

    return asyncio.run(main()) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per scenario (200)")
    parser.add_argument("--turns", type=int, default=4, help="user messages per conversation")
    parser.add_argument("--concurrency", type=int, default=64, help="conversations at once")
    parser.add_argument("--capacity", type=int, default=32, help="the limited server's capacity")
    parser.add_argument("--latency-ms", type=int, default=200, help="the limited server's latency")
    args = parser.parse_args()
    if args.trials < 2:  # else the two runs are the same size, and nothing is measured
        parser.error(
            "--trials must be at least 2: CPU per turn is the difference between a "
            "run of half the trials and a run of all of them"
        )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        # 1. The simulator's own speed and CPU, the user model answering at once.
        server, url = start_users(args.turns, None, 0)
        try:
            half = run(directory, url, max(1, args.trials // 2), args.concurrency, args.turns)
            whole = run(directory, url, args.trials, args.concurrency, args.turns)
            extra_questions = whole.questions - half.questions
            floor = floor_cpu_per_call(url, extra_questions, args.concurrency, args.turns)
        finally:
            server.terminate()
            server.wait()
        extra_turns = whole.turns - half.turns
        per_turn = (whole.cpu_s - half.cpu_s) / extra_turns * 1000
        client = floor * extra_questions / extra_turns
        print(
            f"{len(whole.result.outcomes)} conversations ({SCENARIOS} scenarios x {args.trials} "
            f"trials), {whole.turns} simulated turns and {whole.questions} user-model questions "
            f"in {whole.active_s:.1f} s: {whole.turns / whole.active_s:.0f} turns/s "
            f"({whole.result.elapsed_s:.1f} s with the lake's set-up and the last commit)"
        )
        print(
            f"  CPU per turn: {per_turn:.3f} ms (target < 2 ms; the {extra_turns} turns beyond a "
            f"run of {len(half.result.outcomes)} conversations), the user "
            f"model's client included; that client alone for the same questions: {client:.3f} ms "
            f"a turn, so the simulator's own share: {per_turn - client:.3f} ms"
        )
        # 2. Against a provider with a capacity limit: the share of its capacity used.
        server, url = start_users(args.turns, args.capacity, args.latency_ms)
        try:
            trials = max(1, (args.capacity * 40) // SCENARIOS)
            limited = run(directory, url, trials, args.capacity * 4, args.turns)
        finally:
            server.terminate()
            server.wait()
        calls = limited.questions
        ceiling = args.capacity / (args.latency_ms / 1000)
        rate = calls / limited.active_s
        steady = limited.steady_turns_per_s * calls / max(1, limited.turns)
        print(
            f"user model against a server of capacity {args.capacity} and {args.latency_ms} ms "
            f"latency ({ceiling:.0f} questions/s at most): {calls} questions in "
            f"{limited.active_s:.1f} s = {rate:.0f}/s = {rate / ceiling:.1%} of its capacity over "
            f"the whole run; {steady:.0f}/s = {steady / ceiling:.1%} in its steady state (target "
            f">= 90 %); {limited.result.user.get('throttled', 0)} answers were 429s"
        )


if __name__ == "__main__":
    main()
