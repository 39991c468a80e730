"""Benchmark: a nightly evaluation run, end to end.

Builds the lake of bench/trajectories.py (``--conversations`` conversations of 10 spans each;
default 100,000 = 1,000,000 spans), then runs ``spanscore.evaluation.runs.run.evaluate``
with a suite holding every deterministic assertion kind (tool_calls in two modes; custom
metrics aside): rebuild + score + store, in batches, on all cores.
Prints conversations/s and the peak memory of the run, next to the baseline of the same run:
rebuilding the trajectories alone (one process of its own, no scoring, nothing stored); then
the same run again once maintenance has stored the rebuilt rows (``spanscore.lake.stored``).

Targets (issues): >= 2,000 conversations/s on 2 cores; the run at >= 0.5 of rebuilding alone;
memory set by --batch-size, not by the window (100k within 1.2x of 20k).
Figures are printed, nothing is asserted.

    .venv/bin/python bench/evaluate.py                  # 100,000 conversations
    .venv/bin/python bench/evaluate.py --conversations 20000 --workers 2
    .venv/bin/python bench/evaluate.py --skip tool_call_rubric   # without Arcade's rubric
    .venv/bin/python bench/evaluate.py --only turn_count   # next to no scoring: the ratio's most
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from _preconditions import missing_package
from trajectories import SPANS_PER_CONVERSATION, build_lake

try:
    import psutil  # the run's memory, its worker processes' included
except ImportError as exc:
    missing_package(exc)

from spanscore.evaluation import load_suite, load_trajectories
from spanscore.evaluation.runs.options import Progress, RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.evaluation.runs.store import run_row
from spanscore.lake import connect
from spanscore.lake.stored import store_trajectories

ORDER_CALL = {
    "name": "get_order",
    "arguments": {"n": 0},
    "match": "partial",
    "rules": {"order_id": {"pattern": "ORD-\\d+"}},
}
SUITE: dict[str, Any] = {
    "name": "bench",
    "tools": [
        {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "email": {"type": "string"},
                    "reason": {"type": "string"},
                    "n": {"type": "integer"},
                },
                "required": ["order_id"],
            },
        }
        for name in (
            "get_order",
            "lookup_customer",
            "search_products",
            "verify_customer",
            "cancel_order",
        )
    ],
    "metrics": [
        {
            "type": "tool_calls",
            "name": f"calls_{mode}",
            "mode": mode,
            "expected": [
                [ORDER_CALL, "lookup_customer"],
                "search_products",
                "verify_customer",
                {"name": "cancel_order", "optional": True},
            ],
        }
        for mode in ("strict", "unordered")
    ]
    + [
        {"type": "forbidden", "calls": ["delete_account"]},
        {"type": "order", "before": "verify_customer", "after": "cancel_order"},
        {"type": "response", "keywords": ["shipped"], "pattern": "ORD-\\d+"},
        {
            "type": "goals",
            "goals": {"a": ["b"], "b": ["c"]},
            "goal_details": [
                {
                    "type": "tool_call",
                    "name": "a",
                    "tool_name": "get_order",
                    "args": {"n": 0},
                    "arg_matching": {"order_id": "ignore", "email": "ignore", "reason": "fuzzy"},
                    "match": "partial",
                },
                {"type": "tool_call", "name": "b", "tool_name": "search_products"},
                {"type": "text", "name": "c", "keywords": ["shipped"]},
            ],
        },
        {"type": "tool_call_validity"},
        {"type": "tool_errors"},
        {"type": "efficiency"},
        {
            "type": "correctness",
            "mode": "names_and_order",
            "expected": ["get_order", "lookup_customer", "search_products"],
        },
        {"type": "tool_name_reliability"},
        {"type": "tool_description_reliability"},
        {"type": "turn_count", "max_turns": 3},
        {"type": "latency", "max_total_ms": 10_000},
        {"type": "token_usage"},
        {
            "type": "tool_call_rubric",
            "expected": [
                {"name": "get_order", "arguments": {"n": 0, "reason": "delivery window"}},
                "lookup_customer",
                "search_products",
                "verify_customer",
                "cancel_order",
            ],
            "critics": [
                {"type": "binary", "field": "n", "weight": 0.5},
                {"type": "similarity", "field": "reason", "weight": 0.5},
            ],
        },
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=0, help="0: one per CPU")
    parser.add_argument("--batch-size", type=int, default=2_000)
    parser.add_argument(
        "--skip", action="append", default=[], metavar="TYPE", help="leave out an assertion type"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TYPE",
        help="keep only this assertion type (repeatable): `--only turn_count` is the run with "
        "next to no scoring, the most the ratio to rebuilding alone can be",
    )
    args = parser.parse_args()
    types = list(dict.fromkeys(m["type"] for m in SUITE["metrics"]))
    unknown = sorted({*args.skip, *args.only} - set(types))
    if unknown:
        parser.error(f"no assertion type {', '.join(unknown)} in the suite: {', '.join(types)}")
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-bench-"))
    try:
        lake = workdir / "lake"
        kept = [
            m
            for m in SUITE["metrics"]
            if m["type"] not in args.skip and (not args.only or m["type"] in args.only)
        ]
        if not kept:
            parser.error("--skip and --only leave no assertion to score")
        suite = load_suite({**SUITE, "metrics": kept})
        assertions = len(suite.suite.metrics)
        # Built and rebuilt in a process of its own: what they allocate (and the allocators
        # keep) is not counted in the run's memory.
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            built, rebuilt, baseline_s, baseline_cpu = pool.submit(
                build_and_rebuild, lake, args.conversations, suite.attribute_keys()
            ).result()
        spans = args.conversations * SPANS_PER_CONVERSATION
        print(f"built {spans:,} spans ({args.conversations:,} conversations) in {built:.1f}s")

        rss: list[float] = []
        me = psutil.Process()

        def sample_memory(progress: Progress) -> None:
            total = me.memory_info().rss + sum(
                c.memory_info().rss for c in me.children(recursive=True)
            )
            rss.append(total / 2**20)

        cpu_before = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = evaluate(
            lake,
            suite,
            RunOptions(settle_s=0, workers=args.workers, batch_size=args.batch_size),
            progress=sample_memory,
        )
        run_s = time.perf_counter() - started
        # CPU seconds of this process (the queries, cutting and shipping chunks, the commits)
        # and of the workers (rebuild, score, Arrow conversion), counted once they are gone.
        self_cpu = _cpu_s(resource.RUSAGE_SELF) - cpu_before[0]
        workers_cpu = _cpu_s(resource.RUSAGE_CHILDREN) - cpu_before[1]
        peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        con = connect(lake)
        row = run_row(con, result.run_id)
        con.close()
        write_s = float(row.facts.get("write_s", 0.0)) if row is not None else 0.0

        # The same run once maintenance has stored the rebuilt rows (`spanscore.lake.stored`),
        # as the collector does for conversations that have settled before a nightly run.
        con = connect(lake)
        started = time.perf_counter()
        stored = store_trajectories(con, settled_after_s=0)["conversations_stored"]
        store_s = time.perf_counter() - started
        first_span = con.execute("SELECT min(start_time) FROM spans").fetchone()
        con.close()
        assert first_span is not None
        started = time.perf_counter()
        again = evaluate(
            lake,
            suite,
            RunOptions(
                settle_s=0,
                workers=args.workers,
                batch_size=args.batch_size,
                since=first_span[0],  # the same window: every conversation again
                rescore=True,
            ),
        )
        stored_run_s = time.perf_counter() - started
        assert again.scored == result.scored, (again.scored, result.scored)
        print(
            f"run {result.status}: {result.scored:,} conversations, {result.score_count:,} "
            f"scores ({assertions} assertions each), {result.error_count} errors, {run_s:.1f}s"
        )
        print()
        print(f"{'':44}{'conversations/s':>16}")
        print(f"{'rebuild alone, 1 process (baseline)':44}{rebuilt / baseline_s:>16,.0f}")
        print(f"{'rebuild + score + store (the run)':44}{result.scored / run_s:>16,.0f}")
        print(f"{'the run, from stored rows':44}{again.scored / stored_run_s:>16,.0f}")
        print(
            f"(maintenance stored {stored:,} conversations' rows beforehand in {store_s:.1f}s: "
            f"{stored / store_s:,.0f} conversations/s)"
        )
        # On a machine that other work loads, the CPU each conversation costs says more than
        # conversations/s: on 2 idle cores the ratio is at most 2 x rebuild / run.
        per = 1000 / max(1, result.scored)
        print(
            f"CPU per conversation: rebuild alone {baseline_cpu * 1000 / max(1, rebuilt):.2f} ms;"
            f" the run {(self_cpu + workers_cpu) * per:.2f} ms (this process "
            f"{self_cpu * per:.2f}, workers {workers_cpu * per:.2f})"
        )
        ratio = result.scored / run_s / (rebuilt / baseline_s)
        print(
            f"ratio of the run to rebuilding alone: {ratio:.2f} (target >= 0.5)"
            f"; CPU: this process {self_cpu:.1f}s (of which committing scores {write_s:.1f}s "
            f"wall), workers {workers_cpu:.1f}s, over {run_s:.1f}s"
        )
        if rss:
            quarter = max(1, len(rss) // 4)
            print(
                f"memory (this process + workers): {rss[quarter - 1]:,.0f} MiB after the first "
                f"quarter of the batches, {rss[-1]:,.0f} MiB at the end, peak {max(rss):,.0f} MiB"
                f" (this process alone peaked at {peak_self:,.0f} MiB)"
            )
        print("target: >= 2,000 conversations/s on 2 cores (printed, not asserted)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def build_and_rebuild(
    lake: Path, conversations: int, attributes: list[str]
) -> tuple[float, int, float, float]:
    """The lake built (seconds), then every trajectory rebuilt in this process alone, no
    scoring, nothing stored: (build seconds, trajectories, rebuild seconds, its CPU seconds)."""
    built = build_lake(lake, conversations, 25_000)
    con = connect(lake)
    cpu = _cpu_s(resource.RUSAGE_SELF)
    started = time.perf_counter()
    rebuilt = sum(1 for _ in load_trajectories(con, attributes=attributes))
    baseline_s = time.perf_counter() - started
    cpu = _cpu_s(resource.RUSAGE_SELF) - cpu
    con.close()
    return built, rebuilt, baseline_s, cpu


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
