"""Command-line benchmark: how long `spanscore --help`, `show`, `sql` and `report` take, each in a
fresh process as a user runs them, next to two baselines of the same run and lake:

- `python -c pass`: the interpreter alone;
- a bare DuckDB connection of the same lake, no spanscore (`import duckdb`, `duckdb.connect()`,
  the DuckLake extension loaded, the lake attached read-only), alone and with the query that
  `show` stands for: one conversation's spans (`SELECT * FROM spans WHERE conversation_id = ?`).
  That second one is `show`'s floor: what a cold `show` cannot avoid.

Python's bytecode: each command runs as an installed program does, its modules' bytecode
cached (in a directory of the benchmark's own, PYTHONPYCACHEPREFIX, filled by one unmeasured
round), whatever PYTHONDONTWRITEBYTECODE says. `--no-bytecode` times the worst case instead:
every module, the standard library's too, compiled from source in every process (an empty cache
that is never written).

The lakes: the demo's (what `spanscore demo` builds: a collector, the example agent, an
evaluation run; built once, under a minute), or `--lake DIR`; and with `--spans N` also a
synthetic lake of N spans (examples/synthetic.py: 10 spans per conversation, commits of 250,000
spans, not compacted; `--spans 5000000` is the issue's 5M-span lake, a few minutes to build).
`show` and `sql` ask for one conversation (`sql`: its tool calls, from the view); `report`
rewrites the latest run's report (only where the lake has a run).

Every command runs `--runs` times (default 5), round by round so that a change of the machine's
load hits them all alike; the medians are printed, with each command's ratio to `python -c pass`
and to the bare connection, and `show`'s to its floor. `--baseline REV` runs the same commands
from git revision REV's sources too (alternating with today's), and prints today / REV. The
targets (on a quiet 2-core machine: `--help` under 0.2 s, `show` under 0.5 s on the demo lake,
and `show` within 2x of its floor on every lake) are printed for context; nothing is asserted.

    .venv/bin/python bench/cli.py
    .venv/bin/python bench/cli.py --baseline HEAD~3 --runs 9
    .venv/bin/python bench/cli.py --spans 5000000
    .venv/bin/python bench/cli.py --no-bytecode
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ingest import revision_sources

from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect
from tests.support.lake import copy_lake

HELP_TARGET_S = 0.2
SHOW_TARGET_S = 0.5
SHOW_OVER_FLOOR_TARGET = 2.0
FLOOR = "floor: connect + query"
SPANS_PER_CONVERSATION = 10  # examples/synthetic.py
SPANS_PER_COMMIT = 250_000

# The baseline connection: what DuckDB alone does to open the lake (the extensions from their
# pinned wheels, as spanscore loads them, so that neither reaches the network).
BARE_CONNECT = """
import importlib.util, sys
from pathlib import Path
import duckdb
def extension(name):
    origin = Path(importlib.util.find_spec("duckdb_extension_" + name).origin).parent
    return origin / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
con = duckdb.connect()
con.execute(f"LOAD '{extension('sqlite_scanner')}'")
con.execute(f"LOAD '{extension('ducklake')}'")
con.execute(f"ATTACH 'ducklake:sqlite:{sys.argv[1]}/catalog.sqlite' AS lake (READ_ONLY)")
con.execute("USE lake")
if len(sys.argv) > 2:
    con.execute("SELECT * FROM spans WHERE conversation_id = ?", [sys.argv[2]]).fetchall()
"""


@dataclass(frozen=True)
class Lake:
    name: str
    directory: Path
    conversation: str  # the one `show` and `sql` ask for
    spans: int
    data_files: int
    has_run: bool


def describe(name: str, directory: Path) -> Lake:
    con = connect(directory, read_only=True)
    try:
        spans, conversation = con.execute(
            "SELECT count(*), min(conversation_id) FROM spans"
        ).fetchone() or (0, None)
        files = con.execute(
            "SELECT count(*) FROM ducklake_list_files('lake', 'spans')"
        ).fetchone() or (0,)
        runs = con.execute("SELECT count(*) FROM eval_runs").fetchone() or (0,)
    finally:
        con.close()
    if conversation is None:
        raise SystemExit(f"cli benchmark: the lake {directory} holds no spans")
    return Lake(name, directory, str(conversation), spans, files[0], runs[0] > 0)


def commands(lake: Lake, workdir: Path) -> dict[str, list[str]]:
    """The command lines timed on `lake`, by label (the baselines first)."""
    python = sys.executable
    spanscore = [python, "-c", "import sys; from spanscore.cli import main; sys.exit(main())"]
    where = ["--lake", str(lake.directory)]
    timed = {
        "python -c pass": [python, "-c", "pass"],
        "bare DuckDB connect": [python, "-c", BARE_CONNECT, str(lake.directory)],
        FLOOR: [
            *(python, "-c", BARE_CONNECT, str(lake.directory), lake.conversation),
        ],
        "spanscore --help": [*spanscore, "--help"],
        "spanscore show": [*spanscore, "show", *where, lake.conversation],
        "spanscore sql": [
            *(*spanscore, "sql", *where),
            f"SELECT * FROM tool_calls WHERE conversation_id = '{lake.conversation}'",
        ],
    }
    if lake.has_run:
        report = workdir / f"report-{lake.name}.html"
        timed["spanscore report"] = [*spanscore, "report", "latest", *where, "-o", str(report)]
    return timed


def bytecode_environment(workdir: Path, cached: bool) -> dict[str, str]:
    """The environment the timed processes run in: their bytecode cached in a directory of the
    benchmark's own (`cached`), or compiled from source every time (an empty cache that is never
    written)."""
    env = dict(os.environ)
    env["PYTHONPYCACHEPREFIX"] = str(workdir / ("bytecode" if cached else "no-bytecode"))
    if cached:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_once(argv: Sequence[str], pythonpath: str, base_env: dict[str, str]) -> float:
    env = dict(base_env)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"cli benchmark: {' '.join(argv[:4])}... exited {done.returncode}: "
            f"{done.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return elapsed


def measure(
    timed: dict[str, dict[str, list[str]]],
    versions: dict[str, str],
    runs: int,
    env: dict[str, str],
) -> dict[tuple[str, str], float]:
    """Median seconds by (label, version) of the command lines `timed[version]`; versions
    alternate within each round, after one unmeasured round (which fills the bytecode cache)."""
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(runs + 1):
        for label in timed["today"]:
            baseline = not label.startswith("spanscore")
            for version, pythonpath in versions.items():
                if baseline and version != "today":
                    continue  # the baselines do not depend on spanscore's revision
                elapsed = run_once(timed[version][label], pythonpath, env)
                if round_ > 0:
                    times.setdefault((label, version), []).append(elapsed)
    return {key: statistics.median(values) for key, values in times.items()}


def report(lake: Lake, medians: dict[tuple[str, str], float], rev: str | None) -> None:
    interpreter = medians[("python -c pass", "today")]
    bare = medians[("bare DuckDB connect", "today")]
    print(
        f"\n== {lake.name} lake: {lake.spans:,} spans in {lake.data_files} data files "
        f"(conversation {lake.conversation})"
    )
    head = f"  {'':24}{'median':>9}{'x pass':>8}{'x bare':>8}"
    if rev:
        head += f"{rev:>12}{'today/' + rev:>14}"
    print(head)
    for label in dict.fromkeys(label for label, _ in medians):
        today = medians[(label, "today")]
        line = f"  {label:24}{today * 1000:7.0f}ms{today / interpreter:8.1f}{today / bare:8.2f}"
        if rev and (label, rev) in medians:
            before = medians[(label, rev)]
            line += f"{before * 1000:10.0f}ms{today / before:14.2f}"
        print(line)
    show = medians[("spanscore show", "today")]
    floor = medians[(FLOOR, "today")]
    versus = ""
    if rev and ("spanscore show", rev) in medians:
        versus = f" ({rev}: {medians[('spanscore show', rev)] / floor:.2f})"
    print(
        f"  show / floor {show / floor:.2f}{versus} (target < {SHOW_OVER_FLOOR_TARGET}); "
        f"targets (quiet 2-core machine): --help {medians[('spanscore --help', 'today')]:.2f}"
        f" s (< {HELP_TARGET_S} s), show {show:.2f} s (< {SHOW_TARGET_S} s on the demo lake)",
        flush=True,
    )


def demo_lake(directory: Path) -> Path:
    from spanscore.examples.demo import run_demo

    started = time.perf_counter()
    run_demo(directory, echo=lambda line: None)
    print(f"demo lake built in {time.perf_counter() - started:.0f} s", flush=True)
    return directory


def synthetic_lake(directory: Path, spans: int) -> Path:
    conversations = max(1, spans // SPANS_PER_CONVERSATION)
    per_commit = SPANS_PER_COMMIT // SPANS_PER_CONVERSATION
    seconds = build_lake(directory, conversations, per_commit)
    print(f"synthetic lake of {spans:,} spans built in {seconds:.0f} s", flush=True)
    return directory


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (median)")
    parser.add_argument("--lake", type=Path, help="time on this lake instead of the demo's")
    parser.add_argument(
        "--spans", type=int, default=0, help="also time on a synthetic lake of this many spans"
    )
    parser.add_argument("--baseline", metavar="REV", help="also time git revision REV's CLI")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="compile every module from source in every process (no bytecode cache)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-bench-cli-"))
    try:
        print(
            f"spanscore command-line benchmark: median of {args.runs} fresh processes per "
            f"command; {os.cpu_count()} CPUs; "
            + ("no bytecode cache" if args.no_bytecode else "bytecode cached"),
            flush=True,
        )
        env = bytecode_environment(workdir, cached=not args.no_bytecode)
        versions = {"today": ""}
        if args.baseline:
            versions[args.baseline] = revision_sources(args.baseline, workdir)
        lakes = [
            describe("given", args.lake)
            if args.lake
            else describe("demo", demo_lake(workdir / "demo"))
        ]
        if args.spans:
            lakes.append(describe("synthetic", synthetic_lake(workdir / "synthetic", args.spans)))
        for lake in lakes:
            # Each revision on a copy of the lake of its own: a command that opens the lake
            # read-write repairs views another revision's rules made, which would cost each
            # revision every time in turn.
            timed = {
                version: commands(
                    lake
                    if version == "today"
                    else replace(
                        lake,
                        directory=copy_lake(lake.directory, workdir / f"{lake.name}-{version}"),
                    ),
                    workdir,
                )
                for version in versions
            }
            report(lake, measure(timed, versions, args.runs, env), args.baseline)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
