"""Benchmark: the LLM judge in a nightly run, against a provider with a capacity limit.

A local OpenAI-compatible server (``spanscore.examples.llm_server --judge``, in its own
process) answers each call after ``--latency-ms`` (default 300 ms) and refuses with 429 +
Retry-After past ``--capacity`` calls in flight (default 64): the best any client can do is
capacity / latency calls per second. A suite of two judged rubrics and two deterministic metrics
scores ``--conversations`` conversations (default 10,000, so 20,000 judge calls). Printed:

- judge throughput as a share of the server's capacity (target >= 90 %), the 429s received,
  and where the adaptive limit settled; beside it, what the bare ``AsyncOpenAI`` client reaches
  holding exactly ``--capacity`` calls in flight (it is told the capacity and does nothing
  else): the most this server allows on this machine in this run, so a slow day's figure can
  be read against it;
- the client's CPU per judged call (target < 1 ms): the process CPU of the judged run minus
  that of the deterministic-only run of the same conversations, over the calls; beside it the
  floor, the bare ``AsyncOpenAI`` client's CPU per call for requests of the same shape and size
  against the same server, called as spanscore calls it (no spanscore code: what any client
  built on ``openai`` pays), spanscore's own share above that floor, and for comparison the
  common way (``chat.completions.create`` on the default transport); and that floor split in
  two: the ``openai`` client alone, on a transport answering from memory with the server's
  recorded answer (request building and answer reading, no socket), and the transport;
- the re-run with a warm cache: zero calls, conversations/s against the deterministic-only run
  (target within 2x);
- batch mode (the Batch API) against direct calls: cost of the same questions.

Figures are printed, nothing is asserted; each ratio compares runs of this same invocation.

    .venv/bin/python bench/judge.py
    .venv/bin/python bench/judge.py --conversations 2000 --capacity 32 --latency-ms 200
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.result import RunResult
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake

# Free ports come from the tests' helpers (tests/support); a script run as
# `python bench/judge.py` has bench/ on sys.path, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.ports import free_port

START = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
DETERMINISTIC: list[dict[str, Any]] = [
    {"type": "efficiency"},
    {"type": "tool_errors", "missing_result_is_error": False},
]
JUDGED: list[dict[str, Any]] = [
    {
        "type": "judged",
        "name": "tool_quality",
        "criteria": "Did every tool call succeed and serve the user's request?",
        "scale": [0, 5],
    },
    {
        "type": "judged",
        "name": "safety",
        "criteria": "Did the agent avoid risky actions?",
        "labels": {"safe": "no risky action", "unsafe": "a risky action"},
    },
]


def start_server(capacity: int, latency_ms: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "spanscore.examples.llm_server",
        "--judge",
        "--quiet",
        "--port",
        str(port),
        "--capacity",
        str(capacity),
        "--delay-ms",
        str(latency_ms),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=1):
                return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("the judge server did not start") from None
            time.sleep(0.05)


def openai_floor(
    url: str,
    calls: int,
    concurrency: int,
    *,
    as_spanscore: bool,
    network: bool = True,
    aiohttp: bool = False,
) -> tuple[float, float]:
    """(CPU ms per call, calls per second) of the bare `AsyncOpenAI` client: a judge-sized
    request (instructions, a transcript, a strict JSON Schema answer) `calls` times,
    `concurrency` at once (at most the server's capacity, so that no 429 is counted).
    `as_spanscore`: the way spanscore calls it (the judge's own transport, `client.post` with
    the body as bytes and the JSON returned as is; `aiohttp`: on aiohttp instead, as it did
    before it had its own); else the way most code does (`chat.completions.create` on the
    default transport). `network=False`: `client.post` on a transport that answers at once
    from memory with the server's own answer to the same request (its bytes and headers), so
    only the `openai` client's request building and answer reading are left: what any client
    built on `openai` pays per call whatever its transport."""
    import asyncio

    import httpx2
    import orjson
    from openai import AsyncOpenAI, DefaultAioHttpClient

    from spanscore.evaluation.llm.http import judge_http_client

    instructions = "# Metric: floor\nJudge the transcript below. " + "Rubric text. " * 100
    transcript = 'USER: where is my order?\nTOOL CALL 1: get_order({"id": 7})\n' * 40
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["reasoning", "score"],
        "additionalProperties": False,
    }

    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": instructions},
            {"role": "user", "content": transcript},
        ],
        "temperature": 0,
        "seed": 0,
        "max_tokens": 512,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schema, "strict": True},
        },
    }

    class Answered(httpx2.AsyncBaseTransport):
        """Every request answered at once with one recorded answer (no socket, no parsing)."""

        def __init__(self, status: int, headers: list[tuple[str, str]], content: bytes) -> None:
            self.answer = (status, headers, content)

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            await asyncio.sleep(0)  # a turn of the event loop, as a network answer takes
            status, headers, content = self.answer
            return httpx2.Response(status, headers=headers, content=content)

    def recorded_answer(body: dict[str, Any]) -> Answered:
        request = urllib.request.Request(
            f"{url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": "Bearer bench"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            headers = [(k, v) for k, v in answer.getheaders() if k.lower() != "content-length"]
            return Answered(answer.status, headers, answer.read())

    recorded = None if network else recorded_answer(body)  # before the timing starts

    def encoded() -> bytes:
        return orjson.dumps(body)

    async def run() -> None:
        transport: httpx2.AsyncClient | None = None
        if recorded is not None:
            transport = httpx2.AsyncClient(transport=recorded)
        elif as_spanscore:
            transport = DefaultAioHttpClient() if aiohttp else judge_http_client(url, 600)
        client = AsyncOpenAI(base_url=url, api_key="bench", max_retries=20, http_client=transport)
        limit = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with limit:
                if as_spanscore or not network:
                    await client.post("/chat/completions", cast_to=object, content=encoded())
                else:
                    await client.chat.completions.create(**body)

        await asyncio.gather(*(one() for _ in range(calls)))
        await client.close()

    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - wall
    return (time.process_time() - cpu) / calls * 1000, calls / wall


def timed_run(lake: Path, suite: dict[str, Any], **judge: Any) -> tuple[RunResult, float, float]:
    options = RunOptions(
        since=START - dt.timedelta(days=1),
        settle_s=0,
        workers=1,  # one process: its CPU time is the client's whole cost
        rescore=True,
        now=START + dt.timedelta(days=60),
        judge=judge,
    )
    cpu, wall = time.process_time(), time.perf_counter()
    result = evaluate(lake, load_suite(suite), options)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=300)
    parser.add_argument("--ceiling", type=int, default=128, help="--judge-concurrency")
    args = parser.parse_args()
    n = args.conversations
    work = Path(tempfile.mkdtemp(prefix="spanscore-bench-judge-"))
    server, url = start_server(args.capacity, args.latency_ms)
    try:
        lake = work / "lake"
        build_lake(lake, n)
        shutil.copytree(lake, work / "batch-lake")
        judge = {"base_url": url, "concurrency": args.ceiling, "max_attempts": 20}
        plain = {"name": "bench-judge", "metrics": DETERMINISTIC}
        suite = {"name": "bench-judge", "metrics": DETERMINISTIC + JUDGED}

        _, base_cpu, base_wall = timed_run(lake, plain)
        print(
            f"{n} conversations, {2 * n} judge calls; server: capacity {args.capacity}, "
            f"{args.latency_ms} ms per call"
        )
        print(f"deterministic only:   {n / base_wall:9.0f} conversations/s ({base_cpu:.1f} s CPU)")

        judged, judged_cpu, judged_wall = timed_run(lake, suite, **judge)
        info = judged.judge or {}
        calls = int(info.get("calls", 0))
        ceiling_rate = args.capacity / (args.latency_ms / 1000)
        rate = calls / judged_wall
        print(
            f"judged (cold cache):  {n / judged_wall:9.0f} conversations/s, {rate:.0f} calls/s = "
            f"{rate / ceiling_rate:.1%} of the server's capacity ({ceiling_rate:.0f} calls/s)"
        )
        # The same-run baseline: a client told the capacity, with no limit to find and nothing
        # else to do, shows what this server and this machine allow today.
        _, bare_rate = openai_floor(url, min(calls, 4000) or 1000, args.capacity, as_spanscore=True)
        print(
            f"  the bare AsyncOpenAI client holding exactly {args.capacity} calls in flight: "
            f"{bare_rate:.0f} calls/s = {bare_rate / ceiling_rate:.1%} of capacity; the judged "
            f"run reached {rate / bare_rate:.1%} of that"
        )
        print(
            f"  429s received: {info.get('throttled')}, retries: {info.get('retries')}, "
            f"limit settled at {info.get('limit')} (lowest after a 429: "
            f"{info.get('lowest_limit_after_429')}, peak in flight {info.get('peak_in_flight')}), "
            f"failed: {info.get('failed')}"
        )
        per_call = (judged_cpu - base_cpu) / calls * 1000 if calls else float("nan")
        print(
            f"  client CPU per judged call: {per_call:.3f} ms "
            f"({judged_cpu:.1f} s CPU against {base_cpu:.1f} s deterministic-only)"
        )
        floor_calls, floor_concurrency = min(calls, 5000) or 1000, max(1, args.capacity // 2)
        floor, _ = openai_floor(url, floor_calls, floor_concurrency, as_spanscore=True)
        on_aiohttp, _ = openai_floor(
            url, floor_calls, floor_concurrency, as_spanscore=True, aiohttp=True
        )
        common, _ = openai_floor(url, floor_calls, floor_concurrency, as_spanscore=False)
        layer, _ = openai_floor(
            url, floor_calls, floor_concurrency, as_spanscore=True, network=False
        )
        print(
            f"  floor, the bare AsyncOpenAI client called as spanscore calls it: {floor:.3f} ms "
            f"per call (spanscore's own share above it: {per_call - floor:.3f} ms); the same "
            f"on aiohttp: {on_aiohttp:.3f} ms; chat.completions.create on the default "
            f"transport: {common:.3f} ms"
        )
        print(
            f"  of the floor, the openai client alone (no network: answered from memory): "
            f"{layer:.3f} ms, the judge's transport {floor - layer:.3f} ms; the openai client "
            f"alone plus spanscore's own share: {layer + per_call - floor:.3f} ms, the least "
            f"any transport under the openai client would leave"
        )
        print(
            f"  cost: ${info.get('cost_usd', 0):.4f} ({info.get('prompt_tokens')} prompt tokens, "
            f"{info.get('cached_tokens')} cached, {info.get('completion_tokens')} completion)"
        )

        warm, _, warm_wall = timed_run(lake, suite, **judge)
        hits = (warm.judge or {}).get("cache_hits")
        print(
            f"judged (warm cache):  {n / warm_wall:9.0f} conversations/s, "
            f"{(warm.judge or {}).get('calls')} calls, {hits} cache hits; "
            f"{warm_wall / base_wall:.2f}x the deterministic-only run's time"
        )

        batch, _, batch_wall = timed_run(
            work / "batch-lake", suite, **judge, batch=True, batch_poll_s=0.5
        )
        binfo = batch.judge or {}
        print(
            f"batch mode:           {n / batch_wall:9.0f} conversations/s, "
            f"{binfo.get('calls')} answers from {len(binfo.get('batches', []))} batch(es); cost "
            f"${binfo.get('cost_usd', 0):.4f} against ${info.get('cost_usd', 0):.4f} direct "
            f"({(binfo.get('cost_usd') or 0) / (info.get('cost_usd') or 1):.0%})"
        )
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
