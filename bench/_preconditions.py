"""What a benchmark needs that may be missing here, checked before it starts.

`./run bench` installs the project with its dev extras; programs (haproxy, chromium) and
servers (PostgreSQL) are the machine's. A benchmark that cannot run says what it misses and how
to get it, and exits with `SKIPPED`, which `./run bench` reports apart from a failure.
(`./run bench` runs every `bench/*.py` but this one.)
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import NoReturn

SKIPPED = 77  # the exit status of a skipped test in automake's convention
DEV_EXTRAS = "the dev extras: .venv/bin/pip install -e '.[dev]' (./run bench installs them)"


def cannot_run(reason: str) -> NoReturn:
    print(f"{Path(sys.argv[0]).name} skipped: {reason}", file=sys.stderr, flush=True)
    sys.exit(SKIPPED)


def missing_package(exc: ImportError) -> NoReturn:
    """For `except ImportError` around a benchmark's imports of the dev extras."""
    cannot_run(f"the Python package {exc.name!r} is not installed; it is in {DEV_EXTRAS}")


def need_program(name: str, install: str) -> str:
    found = shutil.which(name)
    if found is None:
        cannot_run(f"{name} is not on PATH ({install})")
    return found


def need_postgres(uri: str) -> None:
    """`uri`: a server (no database), as the benchmarks take it."""
    try:
        import psycopg
    except ImportError as exc:
        missing_package(exc)
    try:
        psycopg.connect(f"{uri}/postgres", connect_timeout=5).close()
    except psycopg.Error as exc:
        cannot_run(f"no PostgreSQL server at {uri} ({str(exc).strip().splitlines()[0]})")


def need_packages(*names: str) -> None:
    """Python packages a benchmark imports later (in its children, or once it started)."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            cannot_run(f"the Python package {name!r} is not installed; it is in {DEV_EXTRAS}")
