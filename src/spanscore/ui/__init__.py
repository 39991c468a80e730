"""spanscore's review app (`spanscore ui`): run history and comparison, conversations filtered
and read as trajectories, review queues, human labels and the judge's agreement with them,
over a lake, while the collector ingests.

    $ spanscore ui --lake ./lake            # http://127.0.0.1:8765/

Everything it shows comes from `spanscore.evaluation.review`, which the MCP server and the CLI
read too; everything it writes is a label or a review queue.
"""

from .app import create_app

__all__ = ["create_app"]
