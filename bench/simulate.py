"""Benchmark: `spanscore simulate`, the simulator itself, against an agent that answers at once.

A local OpenAI-compatible server in its own process (``spanscore.examples.llm_server
--users TURNS``) plays users who say ``--turns`` messages and then reach their goal; the agent
is an async function in this process that answers at once. Each run uses a new embedded lake
(no cached user turn). Printed:

- simulated turns per second, and the simulator's own CPU per turn (target < 2 ms): this
  process's CPU over the simulation, over the turns; beside it, in the same run, the floor: the
  bare ``AsyncOpenAI`` client asking the same number of user-model questions of the same
  shape, the same number at once (what any simulator built on ``openai`` pays), and the
  simulator's share above it;
- against a user-model server that answers after ``--latency-ms`` and refuses with 429 past
  ``--capacity`` questions in flight, the user model's questions per second as a share of the
  server's capacity (capacity / latency; target >= 90 %), the 429s received and where the
  adaptive limit settled.

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


def suite_file(directory: Path) -> Path:
    path = directory / "suite.yaml"
    path.write_text(
        "name: simulate-bench\nscenarios:\n"
        + "".join(
            f"  - {{id: s{i}, user: {{goal: 'goal {i}', profile: 'a user of the benchmark'}}}}\n"
            for i in range(SCENARIOS)
        )
    )
    return path


async def agent(message: str) -> str:
    return f"done: {message}"


def run(
    directory: Path, url: str, trials: int, concurrency: int
) -> tuple[SimulationResult, float, float]:
    """One simulation on a new lake: (result, process CPU seconds spent in it, seconds from the
    first trial's start to the last one's end: the lake's set-up and the final commit left
    out)."""
    lake = directory / f"lake-{time.monotonic_ns()}"
    connect(lake, create=True).close()
    suite = load_suite(suite_file(directory))
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
    finally:
        con.close()
    return result, cpu, float(row[0]) if row and row[0] else result.elapsed_s


def floor_cpu_per_call(url: str, calls: int, concurrency: int, turns: int) -> float:
    """CPU ms per call of the bare AsyncOpenAI client asking user-model questions of the same
    shape (a history of `turns` / 2 messages), `concurrency` at once."""
    import orjson
    from openai import AsyncOpenAI

    from spanscore.evaluation.suites.users import SimulatedUser

    user = SimulatedUser(goal="goal 0", profile="a user of the benchmark")
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
        client = AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
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
    parser.add_argument("--trials", type=int, default=200, help="trials per scenario (10)")
    parser.add_argument("--turns", type=int, default=4, help="user messages per conversation")
    parser.add_argument("--concurrency", type=int, default=64, help="conversations at once")
    parser.add_argument("--capacity", type=int, default=32, help="the limited server's capacity")
    parser.add_argument("--latency-ms", type=int, default=200, help="the limited server's latency")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        # 1. The simulator's own speed and CPU, the user model answering at once.
        server, url = start_users(args.turns, None, 0)
        try:
            result, cpu, active = run(directory, url, args.trials, args.concurrency)
            turns = sum(o.turns for o in result.outcomes)
            questions = result.user.get("calls", 0)
            floor = floor_cpu_per_call(url, questions, args.concurrency, args.turns)
        finally:
            server.terminate()
            server.wait()
        per_turn = cpu / turns * 1000
        print(
            f"{len(result.outcomes)} conversations ({SCENARIOS} scenarios x {args.trials} "
            f"trials), {turns} simulated turns and {questions} user-model questions in "
            f"{active:.1f} s: {turns / active:.0f} turns/s ({result.elapsed_s:.1f} s with the "
            "lake's set-up and the last commit)"
        )
        print(
            f"  simulator CPU per turn: {per_turn:.3f} ms (target < 2 ms), including the user "
            f"model's client; the bare AsyncOpenAI client's floor for the same questions: "
            f"{floor * questions / turns:.3f} ms per turn, so the simulator's own share above "
            f"it: {per_turn - floor * questions / turns:.3f} ms"
        )
        # 2. Against a provider with a capacity limit: the share of its capacity used.
        server, url = start_users(args.turns, args.capacity, args.latency_ms)
        try:
            trials = max(1, (args.capacity * 20) // SCENARIOS)
            result, _, active = run(directory, url, trials, args.capacity * 4)
        finally:
            server.terminate()
            server.wait()
        calls = result.user.get("calls", 0)
        ceiling = args.capacity / (args.latency_ms / 1000)
        rate = calls / active
        print(
            f"user model against a server of capacity {args.capacity} and {args.latency_ms} ms "
            f"latency ({ceiling:.0f} questions/s at most): {calls} questions in "
            f"{active:.1f} s = {rate:.0f}/s = {rate / ceiling:.1%} of its capacity "
            f"(target >= 90 %); {result.user.get('throttled', 0)} answers were 429s"
        )


if __name__ == "__main__":
    main()
