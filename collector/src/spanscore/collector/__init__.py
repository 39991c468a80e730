"""spanscore collector: receives OTLP spans and logs and commits them to the lake.

Usage::

    $ spanscore serve --lake ./lake            # gRPC 127.0.0.1:4317, HTTP 127.0.0.1:4318

    from spanscore.collector import Collector, load_config
    with Collector(load_config(overrides={"lake": "./lake", "grpc_port": 0})) as c:
        print(c.grpc_port, c.http_port)

An export is answered only after its spans are committed to the lake (group commit: exports
arriving together share one commit). When the write path falls behind, exports are refused
with OTLP's retryable codes (gRPC RESOURCE_EXHAUSTED with RetryInfo, HTTP 429 with
Retry-After) instead of queueing without bound.

Configuration: every setting of `CollectorConfig` is a command-line option, an environment
variable `SPANSCORE_<NAME>` and a key of the `--config` file, in that order of precedence; see
docs/collector.md, and docs/reference.md for the full list.
"""

from .config import CollectorConfig, ConfigError, load_config
from .flatten import Flattener, Limits
from .server import Collector
from .stats import Stats
from .writer import GroupCommitWriter, Pending, QueueFull, WriterClosed

__all__ = [
    "Collector",
    "CollectorConfig",
    "ConfigError",
    "Flattener",
    "GroupCommitWriter",
    "Limits",
    "Pending",
    "QueueFull",
    "Stats",
    "WriterClosed",
    "load_config",
]
