"""The lake's tables and views: the one package that defines them.

- `tables`: the tables (each a tuple of `Column`s), their DDL and migrations;
- `rules`: the conversation rules, written once in SQL, and the views made of them;
- `trajectory`: the rows the trajectory builder reads, and the stored rows maintenance keeps.

Table and column names are the user-facing SQL interface: renaming one is a breaking change and
needs a migration. Each table is a tuple of `Column`s so that the DDL, the Arrow schema the
collector appends with, and the table reference (docs/reference.md) come from the same definition.

Schema versions: `SCHEMA_VERSION` is the version this code writes. `MIGRATIONS[n]` holds the
statements that take a lake from version n - 1 to n (`MIGRATIONS[1]` creates everything). Views
carry a mark of their definition and are recreated wherever it differs (`migrate.
_ensure_views`): a view change needs no new version.
"""

from __future__ import annotations

from spanscore.lake.schema.rules import (
    AGENT_OPERATIONS,
    CONVERSATION_SUMMARIES,
    ERROR_MESSAGE_SQL,
    KNOWN_CONVERSATION_AGGREGATE,
    KNOWN_CONVERSATIONS,
    LOG_RECORD_CONTENT,
    MODEL_CALL_SQL,
    RESOLVE_ALL_CONVERSATIONS,
    RESOLVE_CONVERSATIONS,
    RESOLVE_RECORDS,
    SPAN_ORDER,
    SPANS_WITH_EVENTS,
    UNRESOLVED_RECORDS,
    UNRESOLVED_SPANS,
    VIEWS,
    VIEWS_WITHOUT_LOG_RECORDS,
    Source,
    span_order,
    views,
)
from spanscore.lake.schema.simulation import (
    AGENT_FAILURES,
    COMPLETED_STOP_REASONS,
    COUNTED_STOP_REASONS,
    SIMULATION_STOP_REASONS,
    SIMULATOR_METRIC_PREFIX,
)
from spanscore.lake.schema.tables import (
    CONVERSATION_ATTRIBUTES,
    CONVERSATION_CONTENT,
    ERASURES,
    EVAL_RUNS,
    JUDGE_CACHE,
    LOGS,
    MIGRATIONS,
    SCHEMA_INFO,
    SCHEMA_VERSION,
    SCORES,
    SIMULATED_CONVERSATIONS,
    SIMULATED_TURNS,
    SIMULATIONS,
    SPANS,
    TABLES,
    TRAJECTORY_STEPS,
    Column,
    arrow_schema,
    create_table_sql,
    quote_identifier,
)
from spanscore.lake.schema.trajectory import (
    STORED_RULES,
    TOKEN_ATTRIBUTES,
    TRAJECTORY_COLUMNS,
    chosen_ids,
    fingerprints_sql,
    stale_stored_sql,
    store_rows_sql,
    stored_fingerprints_sql,
    stored_rows_sql,
    trajectory_rows_sql,
)

__all__ = [
    "AGENT_FAILURES",
    "AGENT_OPERATIONS",
    "COMPLETED_STOP_REASONS",
    "CONVERSATION_ATTRIBUTES",
    "CONVERSATION_CONTENT",
    "CONVERSATION_SUMMARIES",
    "COUNTED_STOP_REASONS",
    "ERASURES",
    "ERROR_MESSAGE_SQL",
    "EVAL_RUNS",
    "JUDGE_CACHE",
    "KNOWN_CONVERSATIONS",
    "KNOWN_CONVERSATION_AGGREGATE",
    "LOGS",
    "LOG_RECORD_CONTENT",
    "MIGRATIONS",
    "MODEL_CALL_SQL",
    "RESOLVE_ALL_CONVERSATIONS",
    "RESOLVE_CONVERSATIONS",
    "RESOLVE_RECORDS",
    "SCHEMA_INFO",
    "SCHEMA_VERSION",
    "SCORES",
    "SIMULATED_CONVERSATIONS",
    "SIMULATED_TURNS",
    "SIMULATIONS",
    "SIMULATION_STOP_REASONS",
    "SIMULATOR_METRIC_PREFIX",
    "SPANS",
    "SPANS_WITH_EVENTS",
    "SPAN_ORDER",
    "STORED_RULES",
    "TABLES",
    "TOKEN_ATTRIBUTES",
    "TRAJECTORY_COLUMNS",
    "TRAJECTORY_STEPS",
    "UNRESOLVED_RECORDS",
    "UNRESOLVED_SPANS",
    "VIEWS",
    "VIEWS_WITHOUT_LOG_RECORDS",
    "Column",
    "Source",
    "arrow_schema",
    "chosen_ids",
    "create_table_sql",
    "fingerprints_sql",
    "quote_identifier",
    "span_order",
    "stale_stored_sql",
    "store_rows_sql",
    "stored_fingerprints_sql",
    "stored_rows_sql",
    "trajectory_rows_sql",
    "views",
]
