"""`spanscore mcp`: the lake to a coding agent over the Model Context Protocol (the official
SDK), on stdio or streamable HTTP.

- `server`: the tools (runs, a run, two runs compared, failing conversations, one conversation
  summarised and in full, its spans and labels, the judge's agreement, read-only SQL) and the
  resources (the tables' reference, each run's suite file), over the review read layer;
- `fit`: results sized for a model's context, their limits stated, marked as untrusted data;
- `http`: the streamable HTTP app behind the review app's token rule.
"""

from spanscore.mcp.server import LakeServer, create_server

__all__ = ["LakeServer", "create_server"]
