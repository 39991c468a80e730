"""What a run is asked to do (`RunOptions`) and the settings derived from it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanscore.evaluation.llm.types import JudgeConfig
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Gate

UTC = dt.UTC


@dataclass
class RunOptions:
    """What to evaluate and how; the `spanscore evaluate` options."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    sample: float | None = None  # fraction of conversations, by hash
    max_conversations: int | None = None
    seed: int = 0
    stratify_by: str | None = None  # agent_name, service_name or a span attribute key
    services: Sequence[str] = ()
    agents: Sequence[str] = ()
    scenarios: Sequence[str] = ()  # conversations whose scenario.id is one of these
    rescore: bool = False
    settle_s: float = 600.0
    workers: int = 0  # 0: one per CPU
    engine: str = "local"  # local (processes of this host) or ray (tasks on a Ray cluster)
    ray_address: str | None = None  # the Ray cluster to join (None: RAY_ADDRESS, else start one)
    batch_size: int = 500  # conversations per committed batch; it sets the run's memory
    # Conversations per sorted query; None: one batch per worker. A query's rows are held
    # while the next query runs, so memory follows this, not the window (`engines.local`).
    query_conversations: int | None = None
    gates: Sequence[Gate] = ()  # on top of the suite's
    min_conversations: int | None = None  # over the suite's `min_conversations`
    strict: bool | None = None  # over the suite's `strict`: warnings fail the run
    now: dt.datetime | None = None  # for tests: the run's notion of now
    judge: Mapping[str, Any] = field(default_factory=dict)  # JudgeConfig fields over the suite's
    judge_environ: Mapping[str, str] | None = None  # for tests: the judge's environment
    # Score this simulation's conversations (every finished trial, whatever its time, each
    # time) instead of production traffic, which leaves simulated conversations out.
    simulation: str | None = None


@dataclass
class Progress:
    done: int
    total: int
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None


class NothingNew(Exception):
    """The previous run of this suite looked past now minus the settle time (it ran with a
    shorter --settle, or a follower did): no conversation can be new yet. Nothing was
    recorded."""


class WindowError(ValueError):
    """The window cannot be evaluated (its start is after its end); nothing was recorded."""


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spanscore-evaluation")
    except PackageNotFoundError:
        return "unknown"


# A run allocates many objects that form no cycles (rows, trajectories, scores, the judge's
# requests and answers) and keeps some alive for a while (trajectories waiting for the judge):
# with the default thresholds the collector ran every 700 allocations and rescanned them, and
# everything the process had loaded, again and again (measured: a third of a warm judged run's
# time above a deterministic one).
RUN_GC_THRESHOLD = (50_000, 50, 100)


def judge_settings(suite: LoadedSuite, options: RunOptions) -> JudgeConfig:
    """The suite's judge block with the run's options over it."""
    base = suite.judge_config().model_dump(exclude_unset=True)
    return JudgeConfig.model_validate({**base, **options.judge})
