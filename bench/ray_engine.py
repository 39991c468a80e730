"""Benchmark: an evaluation run on Ray (`--engine ray`) against the local engine, same run.

Builds the lake of bench/trajectories.py (``--conversations`` conversations of 10 spans each),
scores it with the suite of bench/evaluate.py on the local engine (one process per CPU), then
scores it again (`rescore`) on a Ray cluster the benchmark starts on this machine with one CPU
per core, and prints conversations/s for both, their ratio, the cluster's start-up time (not in
the ratio), and whether both runs gave identical `scores` rows.

On a one-machine cluster Ray adds work (task scheduling, each shard's own query of the lake, each
shard's own commit, the object store) and brings no extra core: the ratio shows that overhead,
not the speed-up of a cluster of several machines. Figures are printed, nothing is asserted.

    .venv/bin/python bench/ray_engine.py
    .venv/bin/python bench/ray_engine.py --conversations 50000 --batch-size 2000
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from _preconditions import need_packages
from evaluate import SUITE
from trajectories import build_lake

from spanscore.evaluation import load_suite
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.lake import connect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=1_000)
    args = parser.parse_args()
    need_packages("ray")
    import ray

    cpus = os.cpu_count() or 1
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-bench-"))
    try:
        lake = workdir / "lake"
        built = build_lake(lake, args.conversations, 25_000)
        print(f"built {args.conversations:,} conversations in {built:.1f}s")
        suite = load_suite(SUITE)
        options = RunOptions(settle_s=0, workers=0, batch_size=args.batch_size)

        started = time.perf_counter()
        local = evaluate(lake, suite, options)
        local_s = time.perf_counter() - started

        started = time.perf_counter()
        ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            _temp_dir=str(workdir / "ray"),
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
        startup_s = time.perf_counter() - started
        try:
            started = time.perf_counter()
            on_ray = evaluate(
                lake,
                suite,
                RunOptions(
                    settle_s=0,
                    engine="ray",
                    batch_size=args.batch_size,
                    rescore=True,
                    since=dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
                ),
            )
            ray_s = time.perf_counter() - started
        finally:
            ray.shutdown()

        con = connect(lake, read_only=True)
        try:
            columns = (
                "conversation_id, scenario_id, metric, value, label, passed, threshold, "
                "explanation, details::VARCHAR, error"
            )
            row = con.execute(
                f"SELECT count(*) FROM ((SELECT {columns} FROM scores WHERE run_id = ? "
                f"EXCEPT ALL SELECT {columns} FROM scores WHERE run_id = ?) UNION ALL "
                f"(SELECT {columns} FROM scores WHERE run_id = ? "
                f"EXCEPT ALL SELECT {columns} FROM scores WHERE run_id = ?))",
                [local.run_id, on_ray.run_id, on_ray.run_id, local.run_id],
            ).fetchone()
        finally:
            con.close()
        differing = row[0] if row else -1

        for name, result in (("local", local), ("ray", on_ray)):
            print(f"{name} run {result.status}: {result.scored:,} conversations, "
                  f"{result.score_count:,} scores")  # fmt: skip
        print()
        local_rate, ray_rate = local.scored / local_s, on_ray.scored / ray_s
        print(f"{'':48}{'conversations/s':>16}")
        print(f"{'local engine, one process per CPU (baseline)':48}{local_rate:>16,.0f}")
        print(f"{'ray engine, one task per CPU at a time':48}{ray_rate:>16,.0f}")
        print(
            f"ratio (ray / local): {ray_rate / local_rate:.2f} on "
            f"{cpus} cores, one machine: Ray's overhead, not a cluster's speed-up"
        )
        print(f"ray cluster start-up (not in the ratio): {startup_s:.1f}s")
        print(f"scores rows differing between the two runs: {differing}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
