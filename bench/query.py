"""Query benchmark: how fast one conversation's spans come out of a big lake, and what compaction
does for a lake filled by many small commits.

The requirement it measures: "A query for one conversation's spans in a lake of 5 million spans
answers in under a second". What it does, in one run:

1. **Big lake**: builds a lake of ``--spans`` (5,000,000) synthetic agent spans in commits of
   ``--commit-rows`` (250,000; standing for the collector's group commits after compaction)
   with ``INSERT INTO spans ... SELECT ... FROM range(...)`` in DuckDB SQL. Every column of
   ``schema.SPANS`` gets a value of its type (or NULL where a real span has none):
   ~10 spans per conversation (``conv-<16 hex>`` ids, so ~500,000 conversations), 32/16-hex
   trace/span ids, ``invoke_agent``/``chat``/``execute_tool`` spans of six agents, four models and
   eight tools, ~200-byte tool arguments, ~500-byte tool results, ~850-byte attribute JSON, start
   times over 7 days and an increasing ``ingest_time``. Conversations interleave as in real
   traffic: by default a conversation's spans land anywhere in the lake (uniform random, the
   hardest case: every Parquet row group holds ~110,000 distinct conversation ids, too many for
   the Parquet writer's dictionaries and so for bloom filters); ``--in-flight N`` keeps only N
   conversations open at once (their spans then lie within N * 10 consecutive spans).
   Prints the build rate, data file count and size.
2. **Point queries** on that lake for one conversation picked at random (``--seed``):
   (a) ``SELECT * FROM spans WHERE conversation_id = ?``, (a') the same selecting only
   ``conversation_id`` (what finding the rows costs without fetching the wide columns),
   (b) ``SELECT * FROM tool_calls WHERE ...``, (c) ``SELECT * FROM conversations WHERE ...``
   and (d) ``SELECT * FROM turns WHERE ...`` (the views), plus the baseline, a full scan
   ``SELECT count(*), sum(length(attributes)) FROM spans``. Each is timed on ``--runs`` fresh
   ``spanscore.lake.connect()`` connections, like ``spanscore sql`` (the median ``connect()``
   time and query time are printed apart, and the verdict against 1 s uses their sum), and
   ``--runs`` times on one warm connection (after one untimed run). The full scan runs half as
   often, and a query whose first run takes over 2 s only 3 times. The operating system's page
   cache is warm in both cases (the lake fits in memory and was just written): these are not
   cold-disk figures.
3. **Fragmentation**: a second lake of ``--fragmented-spans`` (500,000) spans committed
   ``--small-commit-rows`` (512) at a time, the collector's small-traffic case (~1,000 commits,
   each one data file and one snapshot). Query (a), the views and the full scan are timed before
   and after ``spanscore.lake.maintain(con, expire_older_than_s=0, delete_older_than_s=0)``;
   data file and snapshot counts before and after, and how long ``maintain`` took, are
   printed (``--merge-spans``: compacted as a shared lake is, DuckLake's merge instead of
   the embedded lake's sorted rewrite). The lake the collector writes is this one:
   ``--fragmented-spans 5000000 --small-commit-rows 5000 --in-flight 10000`` is 5 million
   spans of 2,000 spans/s traffic
   with conversations that last a minute or so, after maintenance. Then ``--recent-commits``
   more commits are made (of ``--recent-commit-rows`` spans, by default as many as before)
   and (a) to (d) timed once more: the lake as the collector leaves it between two
   compactions, its past compacted and the commits since in small files (by default as many
   as the collector lets pile up: 5 minutes, its maintenance interval, of 2,000 spans/s, or
   fewer past its ``compact_after_commits``: 120 of 5,000 spans, 1,000 of 512; a list such as
   ``100,1000`` times each count in turn). Commits under 1,000 spans are then timed again
   after compaction's first stage, which the collector runs every
   ``compact_after_small_commits`` of them (``maintain(compact_only=True, early=True)``; its
   steps and their length are printed): the same commits before (as main's collector left
   them) and after, in the same run (``--no-early-stage``: not).
   Then **the collector's cadence**: a third lake, the same compacted past and the last count
   of ``--recent-commits``, but with the first stage after every
   ``compact_after_small_commits`` commits, as the collector runs it, so that the snapshots
   before each stage stay in the catalog with the files they saw (each point query reads the
   statistics of every such file). (a') and the views are timed with every snapshot kept, then
   after thinning them as the collector does (``snapshot_interval_s``, scaled to the
   benchmark's pace: as many commits to an interval as at 1,000 commits per maintenance
   interval); the catalog's file count is printed for both. ``--cadence-commits`` makes that
   lake's history longer than the recent commits, the regular compaction running every
   ``compact_after_commits`` of them as at the collector.
4. ``--log-records`` (off by default): last, the fragmented lake's model calls (the lake as
   the collector writes it) get their messages as GenAI log records too (two per call, as
   producers that send messages as events do, committed in time order as the collector
   would), and the views are timed again, as committed and after maintenance; one
   conversation's trajectory by the rules (``load_trajectories``, ``stored=False``) before
   and after, in the same run.
5. ``--row-groups-baseline`` (off by default): the big lake built once more in DuckDB's
   default row groups of 122,880 spans (how a lake created before its row groups were set at
   creation was written until its first maintenance) and its point queries timed beside the
   lake's, in the same run.
6. ``--baseline-views REV`` (off by default): the same views as defined at git revision REV
   (for example ``HEAD~1``), side by side with today's on the big lake, in the same run: one
   conversation (warm, median of ``--runs``) and a full read of each view into Arrow (twice each,
   alternating, so that a drift of the machine's speed hits both). What "no slower than before"
   is measured with when a view's definition changes.
7. ``--compare-retention-days N`` (off by default): the fragmented lake's phase (3) run once
   more with ``retention_days`` N applied by each of its maintenance runs, in the same run, its
   rows labelled ``retention Nd`` beside the phase's without it. The spans start at
   ``FIRST_ARRIVAL`` and cover ``DAYS`` days: a limit past their age deletes nothing and
   measures what checking costs every maintenance; a limit within them deletes the older ones.
   (``--retention-days N`` applies N to every phase instead.)

A summary table ends the run. Figures are printed, never asserted: the 1 s target is shown for
context only, next to the full scan of the same lake as a baseline.

Run (from the repository root)::

    .venv/bin/python bench/query.py                   # default: 5M-span lake, 3-4 min, 2 CPUs
    .venv/bin/python bench/query.py --quick           # 500k spans, smoke test
    .venv/bin/python bench/query.py --in-flight 250   # conversations close together in the lake
    .venv/bin/python bench/query.py --baseline-views HEAD~1   # views against an earlier version
    .venv/bin/python bench/query.py --compare-retention-days 3650   # retention's cost, same run
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import duckdb

from spanscore.collector.config import SMALL_COMMIT_SPANS, CollectorConfig
from spanscore.evaluation import load_trajectories
from spanscore.lake import connect, include_log_records_in_views, maintain, schema

TARGET_S = 1.0
# What the lake holds between two compactions at most: the commits of 5 minutes (the
# collector's maintenance interval) at 2,000 spans/s, or as many as the collector lets pile up
# before it compacts (its defaults: fewer when the commits are small), whichever is fewer.
RECENT_SPANS = 5 * 60 * 2_000
COMPACT_AFTER_COMMITS: int = CollectorConfig.model_fields["compact_after_commits"].default
COMPACT_AFTER_SMALL_COMMITS: int = CollectorConfig.model_fields[
    "compact_after_small_commits"
].default
MAINTENANCE_INTERVAL_S: float = CollectorConfig.model_fields["maintenance_interval_s"].default
SNAPSHOT_INTERVAL_S: float = CollectorConfig.model_fields["snapshot_interval_s"].default


def recent_commits(rows: int) -> int:
    """The commits of `rows` spans a lake holds at most between two compactions (the first
    stage, after `compact_after_small_commits` small ones, merges their files but is not one:
    the commits since are timed before and after it)."""
    return max(1, min(COMPACT_AFTER_COMMITS, RECENT_SPANS // rows))


def early_stage_applies(rows: int) -> bool:
    """Whether the collector runs compaction's first stage between commits of `rows` spans."""
    return bool(COMPACT_AFTER_SMALL_COMMITS) and rows < SMALL_COMMIT_SPANS


# Spans per row group of DuckDB's Parquet writer by default (`--row-groups-baseline`).
DUCKDB_ROW_GROUP_SPANS = 122_880

# Issue 12: one conversation from each view, warm and on a fresh connection (connect included).
VIEW_QUERIES = ("b", "c", "d")
VIEW_WARM_TARGET_S = 0.1
VIEW_FRESH_TARGET_S = 0.3
SLOW_S = 2.0  # a query slower than this on its first run is timed only SLOW_RUNS times
SLOW_RUNS = 3
SPANS_PER_CONVERSATION = 10
TURNS_PER_CONVERSATION = 3
DAYS = 7
FIRST_ARRIVAL = "2025-06-02 00:00:00+00"
MIB = 1 << 20

AGENTS = ("support", "billing", "returns", "travel-planner", "research", "sre-oncall")
MODELS = ("gpt-4.1-mini", "gpt-4o", "claude-sonnet-4", "gemini-2.5-flash")
TOOLS = (
    "get_order",
    "verify_customer",
    "cancel_order",
    "refund_payment",
    "search_kb",
    "update_address",
    "get_weather",
    "run_sql",
)
# Free text is a random slice of this, so that values differ but compress like real prose.
_PROSE = (
    "order shipped pending refund customer address parcel invoice warehouse carrier delayed "
    "tracking priority standard express return label policy exception verified account email "
    "payment card captured authorized region europe north south west east store online "
) * 8


# --- synthetic spans ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where each span of a lake goes: row i's conversation, turn, operation and times."""

    spans: int
    in_flight: int  # conversations open at once; 0 = all of them (uniform random spread)

    @property
    def window(self) -> int:
        """A conversation's spans lie within this many consecutive spans."""
        if self.in_flight <= 0:
            return max(SPANS_PER_CONVERSATION, self.spans)
        return max(SPANS_PER_CONVERSATION, min(self.spans, self.in_flight * SPANS_PER_CONVERSATION))

    @property
    def conversations_per_window(self) -> int:
        return self.window // SPANS_PER_CONVERSATION

    @property
    def step_us(self) -> float:
        """Microseconds between span arrivals, so that the lake covers `DAYS` days."""
        return DAYS * 86_400e6 / max(1, self.spans)


def _sql_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _pick(values: Sequence[str], key: str) -> str:
    """One of `values`, chosen by the UBIGINT expression `key`."""
    return f"{_sql_list(values)}[(1 + ({key}) % {len(values)})::BIGINT]"


def _prose(offset: str, length: int) -> str:
    return f"substr('{_PROSE}', 1 + ({offset}), {length})"


def _source_sql(layout: Layout, lo: int, hi: int) -> str:
    """A CTE `s` with one row per span i in [lo, hi) and the draws its columns are made of.

    Every draw is a hash of i (or of the conversation number), so any row can be recomputed.
    The constants are integers typed BIGINT on purpose: UBIGINT % BIGINT would be HUGEINT
    arithmetic, several times slower.
    """
    w = layout.window
    cpw = layout.conversations_per_window
    return f"""
WITH b AS (
    SELECT i,
           (i // {w}) * {cpw} + (hash(i, 'conv') % {cpw})::BIGINT AS conv,
           ((i % {w}) * {TURNS_PER_CONVERSATION}) // {w} AS turn,
           (hash(i, 'op') % 100)::BIGINT AS op_r,
           (hash(i, 'r') >> 1)::BIGINT AS r,
           TIMESTAMPTZ '{FIRST_ARRIVAL}' + to_microseconds((i * {layout.step_us!r})::BIGINT)
               AS arrived
    FROM range({lo}, {hi}) t(i)
), c AS (
    SELECT *,
        CASE WHEN op_r < 15 THEN 'invoke_agent' WHEN op_r < 55 THEN 'chat'
             ELSE 'execute_tool' END AS op,
        {_pick(AGENTS, "hash(conv, 'agent')")} AS agent,
        {_pick(MODELS, "hash(conv, 'model')")} AS model,
        {_pick(TOOLS, "r")} AS tool,
        'conv-' || printf('%016x', hash(conv, 'id')) AS conv_id,
        printf('%016x%016x', hash(conv, 'trace'), hash(conv, turn)) AS trace,
        'call_' || printf('%016x', hash(i, 'call')) AS call_id,
        (r >> 8) % 100 < 2 AS failed,
        CASE WHEN op_r < 15 THEN 2000000 + (r >> 16) % 20000000
             WHEN op_r < 55 THEN 400000 + (r >> 16) % 6000000
             ELSE 5000 + (r >> 16) % 900000 END AS dur_us,
        (r >> 24) % 400 AS off
    FROM b
), s AS (
    SELECT *, arrived - to_microseconds(dur_us + 1000000 + (r >> 32) % 3000000) AS st
    FROM c
)"""


# Column name -> SQL expression over `s`. A column of schema.SPANS missing here is NULL (and
# the run says so); an entry for a column the schema does not have is unused.
VALUES: dict[str, str] = {
    "trace_id": "trace",
    "span_id": "printf('%016x', hash(i, 'span'))",
    "parent_span_id": (
        "CASE WHEN op = 'invoke_agent' THEN NULL ELSE printf('%016x', hash(conv, turn, 'root')) END"
    ),
    "trace_state": "NULL",
    "flags": "257",
    "name": (
        "CASE op WHEN 'invoke_agent' THEN 'invoke_agent ' || agent "
        "WHEN 'chat' THEN 'chat ' || model ELSE 'execute_tool ' || tool END"
    ),
    "kind": "CASE op WHEN 'chat' THEN 'CLIENT' ELSE 'INTERNAL' END",
    "start_time": "st",
    "end_time": "st + to_microseconds(dur_us)",
    "start_time_unix_nano": "epoch_us(st) * 1000 + r % 1000",
    "end_time_unix_nano": "(epoch_us(st) + dur_us) * 1000 + r % 1000",
    "duration_ms": "dur_us / 1000.0",
    "status_code": "CASE WHEN failed THEN 'ERROR' WHEN op = 'chat' THEN 'UNSET' ELSE 'OK' END",
    "status_message": "CASE WHEN failed THEN 'upstream timeout after 30s' END",
    "service_name": "'agent-' || agent",
    "resource": (
        """'{"service.name":"agent-' || agent || '","service.version":"1.4.2",'"""
        """ || '"deployment.environment":"prod","telemetry.sdk.language":"python",'"""
        """ || '"telemetry.sdk.name":"opentelemetry","telemetry.sdk.version":"1.27.0",'"""
        """ || '"host.name":"worker-' || (hash(conv, 'host') % 16) || '"}'"""
    ),
    "scope_name": "'opentelemetry.instrumentation.openai_agents'",
    "scope_version": "'0.3.1'",
    "scope_attributes": "NULL",
    "schema_url": "'https://opentelemetry.io/schemas/1.28.0'",
    "attributes": (
        """'{"gen_ai.operation.name":"' || op || '","gen_ai.system":"openai",'"""
        """ || '"gen_ai.conversation.id":"' || conv_id || '","gen_ai.agent.name":"' || agent"""
        """ || '","gen_ai.request.model":"' || model || '","gen_ai.response.model":"' || model"""
        """ || '-2025-04-14","gen_ai.response.id":"resp_' || printf('%016x', r)"""
        """ || '","gen_ai.usage.input_tokens":' || (r % 4000)"""
        """ || ',"gen_ai.usage.output_tokens":' || ((r >> 12) % 800)"""
        """ || ',"gen_ai.request.temperature":0.2,"gen_ai.response.finish_reasons":["'"""
        """ || CASE WHEN op = 'chat' THEN 'tool_calls' ELSE 'stop' END"""
        """ || '"],"server.address":"api.openai.com","server.port":443,"app.tenant":"tenant-'"""
        """ || (hash(conv, 'tenant') % 200) || '","app.note":"' || """
        + _prose("off", 300)
        + """ || '"' || CASE WHEN op = 'execute_tool' THEN ',"gen_ai.tool.name":"' || tool"""
        """ || '","gen_ai.tool.call.id":"' || call_id || '"' ELSE '' END || '}'"""
    ),
    "events": (
        """CASE WHEN failed THEN '[{"name":"exception","time_unix_nano":'"""
        """ || ((epoch_us(st) + dur_us) * 1000) || ',"attributes":{'"""
        """ || '"exception.type":"TimeoutError",'"""
        """ || '"exception.message":"upstream timeout after 30s"},"dropped_attributes_count":0}]'"""
        """ END"""
    ),
    "links": "NULL",
    "dropped_attributes_count": "0",
    "dropped_events_count": "0",
    "dropped_links_count": "0",
    "conversation_id": "conv_id",
    "agent_name": "agent",
    "operation": "op",
    "tool_name": "CASE WHEN op = 'execute_tool' THEN tool END",
    "tool_call_id": "CASE WHEN op = 'execute_tool' THEN call_id END",
    "tool_arguments": (
        """CASE WHEN op = 'execute_tool' THEN '{"order_id":"ORD-' || (r % 1000000)"""
        """ || '","customer_id":"cus_' || printf('%08x', hash(conv, 'customer') % 4294967295)"""
        """ || '","reason":"' || """ + _prose("off", 120) + """ || '","priority":"standard"}' END"""
    ),
    "tool_result": (
        """CASE WHEN op = 'execute_tool' THEN '{"status":"ok","order":{"id":"ORD-'"""
        """ || (r % 1000000)"""
        """ || '","state":"shipped","carrier":"dhl","items":' || (1 + r % 5)"""
        """ || ',"total_eur":' || ((r % 50000) / 100.0) || '},"notes":"' || """
        + _prose("(r >> 40) % 400", 400)
        + """ || '"}' END"""
    ),
    "user_message": (
        "CASE WHEN op = 'chat' THEN 'Hi, ' || " + _prose("(r >> 44) % 400", 90) + " || '?' END"
    ),
    "tool_calls_requested": (
        """CASE WHEN op = 'chat' AND (r >> 4) % 10 < 6 THEN '[{"id":"call_'"""
        """ || printf('%016x', hash(i, 'requested')) || '","name":"' || tool"""
        """ || '","arguments":{"order_id":"ORD-' || (r % 1000000) || '"}}]' END"""
    ),
    "tool_results": (
        """CASE WHEN op = 'chat' AND (r >> 6) % 10 < 5 THEN '[{"id":"call_'"""
        """ || printf('%016x', hash(i, 'previous')) || '","result":"status ok; ' || """
        + _prose("(r >> 48) % 400", 200)
        + """ || '"}]' END"""
    ),
    "response_text": (
        "CASE WHEN op = 'chat' THEN 'Your order ' || " + _prose("(r >> 52) % 400", 160) + " END"
    ),
    "error_type": "CASE WHEN failed THEN 'TimeoutError' END",
    "convention": "'genai'",
    "ingest_notes": "NULL",
    "ingest_time": "arrived",
}


def unfilled_columns() -> list[str]:
    return [c.name for c in schema.SPANS if c.name not in VALUES]


def insert_sql(layout: Layout, lo: int, hi: int) -> str:
    names = ", ".join(schema.quote_identifier(c.name) for c in schema.SPANS)
    select = ",\n    ".join(
        f"CAST({VALUES.get(c.name, 'NULL')} AS {c.sql_type})" for c in schema.SPANS
    )
    return f"INSERT INTO spans ({names})\n{_source_sql(layout, lo, hi)}\nSELECT {select}\nFROM s"


def conversation_at(con: duckdb.DuckDBPyConnection, layout: Layout, i: int) -> str:
    """The conversation id of span i (recomputed, no lake scan)."""
    return str(_one(con, f"{_source_sql(layout, i, i + 1)} SELECT conv_id FROM s")[0])


@dataclass
class Built:
    seconds: float
    commits: int

    def rate(self, spans: int) -> float:
        return spans / self.seconds if self.seconds else 0.0


def build_lake(
    lake_dir: Path,
    layout: Layout,
    commit_rows: int,
    label: str,
    *,
    spans: range | None = None,
    row_groups: int | None = None,
) -> Built:
    """Fill a lake (new, or go on with one) with the layout's `spans` (all of them by default),
    one DuckLake transaction (one data file) per `commit_rows` spans; `row_groups`: spans per
    row group of its files, instead of what the lake sets."""
    spans = spans if spans is not None else range(layout.spans)
    con = connect(lake_dir, create=True)
    if row_groups is not None:
        con.execute(
            f"CALL lake.set_option('parquet_row_group_size', '{row_groups}', table_name => 'spans')"
        )
    commits = 0
    started = time.perf_counter()
    next_report = started + 15.0
    try:
        for lo in range(spans.start, spans.stop, commit_rows):
            hi = min(spans.stop, lo + commit_rows)
            con.execute(insert_sql(layout, lo, hi))
            commits += 1
            if time.perf_counter() > next_report:
                done = hi - spans.start
                print(f"  {label}: {done:,} spans in {commits:,} commits so far", flush=True)
                next_report += 15.0
    finally:
        con.close()
    return Built(time.perf_counter() - started, commits)


# --- measuring ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LakeState:
    files: int
    data_bytes: int
    snapshots: int
    spans: int
    row_groups: int
    row_groups_with_bloom: int  # row groups whose conversation_id column has a bloom filter
    catalog_files: int  # spans files any snapshot kept sees: each point query reads their stats


def lake_state(con: duckdb.DuckDBPyConnection) -> LakeState:
    files, data_bytes = _one(
        con,
        "SELECT count(*), coalesce(sum(data_file_size_bytes), 0) "
        "FROM ducklake_list_files('lake', 'spans')",
    )
    (snapshots,) = _one(con, "SELECT count(*) FROM ducklake_snapshots('lake')")
    (spans,) = _one(con, "SELECT count(*) FROM spans")
    (catalog_files,) = _one(
        con,
        "SELECT count(*) FROM __ducklake_metadata_lake.ducklake_data_file "
        "WHERE table_id = (SELECT table_id FROM __ducklake_metadata_lake.ducklake_table "
        "WHERE table_name = 'spans' AND end_snapshot IS NULL)",
    )
    listing = con.execute("SELECT data_file FROM ducklake_list_files('lake', 'spans')")
    paths = [str(r[0]) for r in listing.fetchall()]
    row_groups = with_bloom = 0
    if paths:
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
        row_groups, with_bloom = _one(
            con,
            "SELECT count(*), count(*) FILTER (WHERE bloom_filter_offset IS NOT NULL) "
            f"FROM parquet_metadata([{listed}]) WHERE path_in_schema = 'conversation_id'",
        )
    return LakeState(
        int(files),
        int(data_bytes),
        int(snapshots),
        int(spans),
        int(row_groups),
        int(with_bloom),
        int(catalog_files),
    )


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...]:
    row = con.execute(sql).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {sql}")
    return tuple(row)


@dataclass(frozen=True)
class Query:
    key: str
    label: str
    sql: str
    point: bool  # a one-conversation query (False: the full-scan baseline)


QUERIES = (
    Query("a", "spans", "SELECT * FROM spans WHERE conversation_id = ?", True),
    Query(
        "a'",
        "spans, id column only",
        "SELECT conversation_id FROM spans WHERE conversation_id = ?",
        True,
    ),
    Query("b", "tool_calls view", "SELECT * FROM tool_calls WHERE conversation_id = ?", True),
    Query("c", "conversations view", "SELECT * FROM conversations WHERE conversation_id = ?", True),
    Query("d", "turns view", "SELECT * FROM turns WHERE conversation_id = ?", True),
    Query("scan", "full scan", "SELECT count(*), sum(length(attributes)) FROM spans", False),
)
QUERY = {q.key: q for q in QUERIES}


@dataclass(frozen=True)
class Timing:
    scenario: str
    query: Query
    rows: int
    files: int
    connect_s: float  # median connect() on a fresh connection
    fresh_s: float  # median query time on a fresh connection (without connect)
    warm_s: float  # median query time on a warm connection

    @property
    def fresh_total_s(self) -> float:
        return self.connect_s + self.fresh_s


def _run(con: duckdb.DuckDBPyConnection, query: Query, conversation: str) -> tuple[float, int]:
    params = [conversation] if query.point else []
    started = time.perf_counter()
    rows = con.execute(query.sql, params).fetchall()
    return time.perf_counter() - started, len(rows)


def time_query(
    lake_dir: Path, scenario: str, query: Query, conversation: str, runs: int, files: int
) -> Timing:
    runs = runs if query.point else max(1, (runs + 1) // 2)
    connects: list[float] = []
    fresh: list[float] = []
    rows = 0
    while len(fresh) < runs:
        started = time.perf_counter()
        con = connect(lake_dir, read_only=True)  # as `spanscore sql` opens it
        connects.append(time.perf_counter() - started)
        try:
            seconds, rows = _run(con, query, conversation)
        finally:
            con.close()
        fresh.append(seconds)
        if fresh[0] > SLOW_S:
            runs = min(runs, SLOW_RUNS)  # enough for a median of a slow query
    warm: list[float] = []
    con = connect(lake_dir, read_only=True)
    try:
        _run(con, query, conversation)  # warm-up, untimed
        for _ in range(runs):
            seconds, rows = _run(con, query, conversation)
            warm.append(seconds)
    finally:
        con.close()
    timing = Timing(
        scenario,
        query,
        rows,
        files,
        statistics.median(connects),
        statistics.median(fresh),
        statistics.median(warm),
    )
    print(
        f"  ({query.key:<4}) {query.label:<22} {rows:>9,} rows  fresh: connect "
        f"{_ms(timing.connect_s):>6} + query {_ms(timing.fresh_s):>7} = "
        f"{_ms(timing.fresh_total_s):>7}   warm: {_ms(timing.warm_s):>7}   "
        f"(median of {runs})",
        flush=True,
    )
    return timing


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _print_state(what: str, state: LakeState) -> None:
    print(
        f"  {what}: {state.spans:,} spans, {state.files:,} data files "
        f"({state.data_bytes / MIB:,.0f} MiB), {state.snapshots:,} snapshots seeing "
        f"{state.catalog_files:,} data files in all; "
        f"{state.row_groups:,} row groups, {state.row_groups_with_bloom:,} of them with a "
        "conversation_id bloom filter",
        flush=True,
    )


def open_state(lake_dir: Path) -> LakeState:
    con = connect(lake_dir)
    try:
        return lake_state(con)
    finally:
        con.close()


# `--retention-days`: the retention every maintenance of the run applies (None: none).
RETENTION_DAYS: list[float | None] = [None]


def run_maintain(
    lake_dir: Path,
    *,
    sort_spans: bool = True,
    compact_only: bool = False,
    early: bool = False,
    snapshot_interval_s: float | None = None,
) -> tuple[float, dict[str, int]]:
    con = connect(lake_dir)
    try:
        started = time.perf_counter()
        done = maintain(
            con,
            expire_older_than_s=0,
            delete_older_than_s=0,
            sort_spans=sort_spans,
            retention_days=RETENTION_DAYS[0],
            compact_only=compact_only,
            early=early,
            snapshot_interval_s=snapshot_interval_s,
        )
        return time.perf_counter() - started, done
    finally:
        con.close()


def pick_conversation(lake_dir: Path, layout: Layout, rng: random.Random) -> str:
    con = connect(lake_dir)
    try:
        return conversation_at(con, layout, rng.randrange(layout.spans))
    finally:
        con.close()


# --- scenarios ----------------------------------------------------------------------------------


def big_lake(
    args: argparse.Namespace, workdir: Path, rng: random.Random
) -> tuple[list[Timing], Path, Layout, str]:
    layout = Layout(args.spans, args.in_flight)
    lake_dir = workdir / "big"
    print(
        f"\n== lake of {layout.spans:,} spans in commits of {args.commit_rows:,} "
        f"(a conversation's spans within {layout.window:,} consecutive spans)",
        flush=True,
    )
    built = build_lake(lake_dir, layout, args.commit_rows, "big lake")
    state = open_state(lake_dir)
    print(
        f"  built in {built.seconds:.1f}s: {built.rate(layout.spans):,.0f} spans/s, "
        f"{built.commits:,} commits",
        flush=True,
    )
    _print_state("lake", state)
    conversation = pick_conversation(lake_dir, layout, rng)
    print(f"  conversation {conversation}:", flush=True)
    timings = [
        time_query(lake_dir, "big", q, conversation, args.runs, state.files) for q in QUERIES
    ]
    if args.row_groups_baseline:
        # The same lake as a lake created before its row groups were set from the start
        # wrote it (DuckDB's default, until the first maintenance), in the same run.
        baseline_dir = workdir / "big-baseline"
        print(
            f"\n== the same lake in row groups of {DUCKDB_ROW_GROUP_SPANS:,} spans (DuckDB's "
            "default: lakes created before their row groups were set at creation)",
            flush=True,
        )
        built = build_lake(
            baseline_dir, layout, args.commit_rows, "baseline", row_groups=DUCKDB_ROW_GROUP_SPANS
        )
        print(f"  built in {built.seconds:.1f}s: {built.rate(layout.spans):,.0f} spans/s")
        state = open_state(baseline_dir)
        _print_state("lake", state)
        timings += [
            time_query(baseline_dir, "big, 122,880/rg", q, conversation, args.runs, state.files)
            for q in QUERIES
            if q.point
        ]
        shutil.rmtree(baseline_dir, ignore_errors=True)
    return timings, lake_dir, layout, conversation


def time_trajectory(lake_dir: Path, conversation: str, runs: int) -> float:
    """Median seconds `load_trajectory` takes for the conversation on a warm connection, read
    by the rules (`stored=False`: what the builder does for a conversation not yet settled)."""
    con = connect(lake_dir, read_only=True)
    try:
        load = partial(load_trajectories, con, conversation_ids=[conversation], stored=False)
        list(load())  # warm-up, untimed
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            found = list(load())
            seconds.append(time.perf_counter() - started)
        assert len(found) == 1, found
        return statistics.median(seconds)
    finally:
        con.close()


def add_log_records(lake_dir: Path, spans_per_commit: int) -> tuple[int, int]:
    """Two GenAI log records per model call of the lake (its user message, its answer), as
    producers that send messages as events do, stored as the collector stores them: in time
    order, in commits of the records of `spans_per_commit` model calls, each record with its
    span's conversation (`schema.RESOLVE_RECORDS`); the first commit also gives the lake the
    views that read them, as the collector's writer does. Returns (records, commits)."""
    con = connect(lake_dir)
    try:
        con.execute(
            """CREATE TEMP TABLE model_calls AS
            SELECT *, row_number() OVER (ORDER BY start_time_unix_nano, span_id) - 1 AS i
            FROM spans WHERE operation = 'chat'"""
        )
        calls = int(_one(con, "SELECT count(*) FROM model_calls")[0])
        commits = 0
        for first in range(0, calls, spans_per_commit):
            con.execute("BEGIN")
            con.execute(
                f"""INSERT INTO logs BY NAME
                SELECT start_time AS time, start_time_unix_nano + n AS time_unix_nano,
                       start_time_unix_nano AS observed_time_unix_nano, trace_id, span_id,
                       ['gen_ai.user.message', 'gen_ai.choice'][n + 1] AS event_name,
                       service_name, conversation_id,
                       CASE WHEN n = 0 THEN user_message END AS user_message,
                       CASE WHEN n = 1 THEN response_text END AS response_text,
                       now() AS ingest_time
                FROM model_calls, range(2) r(n)
                WHERE i >= {first} AND i < {first + spans_per_commit}
                    AND CASE WHEN n = 0 THEN user_message ELSE response_text END IS NOT NULL
                ORDER BY start_time_unix_nano, span_id, n"""
            )
            if not commits:
                include_log_records_in_views(con)
            con.execute("COMMIT")
            commits += 1
        return int(_one(con, "SELECT count(*) FROM logs")[0]), commits
    finally:
        con.close()


def log_records_phase(
    args: argparse.Namespace, lake_dir: Path, conversation: str
) -> tuple[list[Timing], tuple[float, float]]:
    """The lake's views and one conversation's trajectory again, once its model calls'
    messages are also log records: the views then join them; as committed (small files, in
    time order), then after maintenance (sorted by conversation). The trajectory, before and
    after, in the same run."""
    before = time_trajectory(lake_dir, conversation, args.runs)
    started = time.perf_counter()
    records, commits = add_log_records(lake_dir, args.small_commit_rows * 2)
    print(
        f"\n== the fragmented lake with {records:,} GenAI log records (two per model call) "
        f"added in {commits:,} commits, {time.perf_counter() - started:.1f}s",
        flush=True,
    )
    files = open_state(lake_dir).files
    timings = [
        time_query(lake_dir, "+log records", QUERY[k], conversation, args.runs, files)
        for k in VIEW_QUERIES
    ]
    seconds, done = run_maintain(lake_dir)
    print(
        f"  maintain took {seconds:.1f}s: log_files_sorted {done['log_files_sorted']:,}, "
        f"sort_steps {done['sort_steps']:,}",
        flush=True,
    )
    files = open_state(lake_dir).files
    timings += [
        time_query(lake_dir, "+log records, maintained", QUERY[k], conversation, args.runs, files)
        for k in (*VIEW_QUERIES, "scan")
    ]
    after = time_trajectory(lake_dir, conversation, args.runs)
    print(
        f"  one conversation's trajectory (load_trajectory, by the rules, warm): "
        f"{_ms(before)} without log records, {_ms(after)} with them",
        flush=True,
    )
    return timings, (before, after)


def fragmented_lake(
    args: argparse.Namespace, workdir: Path, rng: random.Random
) -> tuple[list[Timing], Path, str]:
    layout = Layout(args.fragmented_spans, args.in_flight)
    lake_dir = workdir / "fragmented"
    print(
        f"\n== fragmented lake: {layout.spans:,} spans in commits of {args.small_commit_rows:,}",
        flush=True,
    )
    built = build_lake(lake_dir, layout, args.small_commit_rows, "fragmented lake")
    print(
        f"  built in {built.seconds:.1f}s: {built.rate(layout.spans):,.0f} spans/s, "
        f"{built.commits:,} commits ({built.commits / built.seconds:,.0f} commits/s)",
        flush=True,
    )
    conversation = pick_conversation(lake_dir, layout, rng)
    before = open_state(lake_dir)
    _print_state("before maintain", before)
    print(f"  conversation {conversation}:", flush=True)
    timings = [
        time_query(lake_dir, "fragmented", QUERY[k], conversation, args.runs, before.files)
        for k in ("a", "b", "c", "d", "scan")
    ]
    seconds, done = run_maintain(lake_dir, sort_spans=not args.merge_spans)
    print(
        f"  maintain(expire_older_than_s=0, delete_older_than_s=0) took {seconds:.1f}s: "
        + ", ".join(f"{k} {v:,}" for k, v in done.items()),
        flush=True,
    )
    after = open_state(lake_dir)
    _print_state("after maintain", after)
    timings += [
        time_query(lake_dir, "compacted", QUERY[k], conversation, args.runs, after.files)
        for k in ("a", "b", "c", "d", "scan")
    ]
    # What a lake looks like between two compactions: the compacted past, and the commits
    # since (none of them holds the conversation, and each must be looked into), timed at
    # each count of --recent-commits in turn, the commits adding up.
    made = 0
    for commits in args.recent_commits:
        start = layout.spans + made * args.recent_commit_rows
        recent = range(start, start + (commits - made) * args.recent_commit_rows)
        build_lake(lake_dir, layout, args.recent_commit_rows, "recent", spans=recent)
        made = commits
        state = open_state(lake_dir)
        _print_state(
            f"with {commits:,} commits of {args.recent_commit_rows:,} since maintenance", state
        )
        timings += [
            time_query(
                lake_dir, f"+{commits} recent", QUERY[k], conversation, args.runs, state.files
            )
            for k in ("a", "a'", "b", "c", "d")
        ]
        if not early_stage_applies(args.recent_commit_rows) or args.no_early_stage:
            continue
        # The collector runs compaction's first stage every `compact_after_small_commits`
        # small commits; here once over all of them, which leaves the same files (each step
        # takes the oldest small files, up to EARLY_FILE_BYTES): the same commits, timed
        # before (above: as the collector left them without it) and after.
        seconds, done = run_maintain(
            lake_dir, sort_spans=not args.merge_spans, compact_only=True, early=True
        )
        steps = max(1, done.get("early_steps", done.get("merge_steps", 1)))
        print(
            f"  compaction's first stage took {seconds:.1f}s in {steps} steps "
            f"(the longest {done['longest_step_ms']:,} ms; the collector runs one or two every "
            f"{COMPACT_AFTER_SMALL_COMMITS} small commits): early_files_sorted "
            f"{done.get('early_files_sorted', 0):,}",
            flush=True,
        )
        state = open_state(lake_dir)
        _print_state("after the first stage", state)
        timings += [
            time_query(
                lake_dir,
                f"+{commits} recent, 1st stage",
                QUERY[k],
                conversation,
                args.runs,
                state.files,
            )
            for k in ("a", "a'", "b", "c", "d")
        ]
    return timings, lake_dir, conversation


def cadence_lake(args: argparse.Namespace, workdir: Path, seed: int) -> list[Timing]:
    """The recent commits as the collector leaves them: the fragmented lake's compacted past,
    then the last `--recent-commits` count of commits with compaction's first stage after
    every `compact_after_small_commits` of them, as the collector runs it. Each first stage
    leaves the snapshots before it in the catalog, and with them the files they saw; timed
    with every snapshot kept (as before `snapshot_interval_s`), then thinned as the collector
    thins them.

    The commits come faster here than at the collector's pace the issue sets (its
    `compact_after_commits` in its `maintenance_interval_s`): the interval is scaled by that
    ratio, so that as many commits fall in one as would at the collector."""
    commits = args.cadence_commits or args.recent_commits[-1]
    rows = args.recent_commit_rows
    layout = Layout(args.fragmented_spans, args.in_flight)
    lake_dir = workdir / "cadence"
    print(
        f"\n== the collector's cadence: {layout.spans:,} spans compacted, then {commits:,} "
        f"commits of {rows:,} with the first stage every {COMPACT_AFTER_SMALL_COMMITS} and "
        f"the regular compaction every {COMPACT_AFTER_COMMITS:,}",
        flush=True,
    )
    build_lake(lake_dir, layout, args.small_commit_rows, "cadence lake")
    run_maintain(lake_dir)
    conversation = pick_conversation(lake_dir, layout, random.Random(seed))
    started = time.perf_counter()
    start, made = layout.spans, 0
    while made < commits:
        n = min(COMPACT_AFTER_SMALL_COMMITS, commits - made)
        build_lake(lake_dir, layout, rows, "cadence", spans=range(start, start + n * rows))
        start, made = start + n * rows, made + n
        if made % COMPACT_AFTER_COMMITS < n and made < commits:
            run_maintain(lake_dir, compact_only=True)  # the regular compaction
        else:
            run_maintain(lake_dir, compact_only=True, early=True)
    pace = commits / (time.perf_counter() - started)
    collector_pace = COMPACT_AFTER_COMMITS / MAINTENANCE_INTERVAL_S
    interval_s = SNAPSHOT_INTERVAL_S * collector_pace / pace
    state = open_state(lake_dir)
    _print_state(f"with {commits:,} commits at {pace:,.1f} commits/s, every snapshot kept", state)
    label = f"+{commits} cadence"
    timings = [
        time_query(lake_dir, f"{label}, all kept", QUERY[k], conversation, args.runs, state.files)
        for k in ("a'", "b", "c", "d")
    ]
    seconds, done = run_maintain(
        lake_dir, compact_only=True, early=True, snapshot_interval_s=interval_s
    )
    print(
        f"  snapshots thinned to one per {interval_s:.1f} s here ({SNAPSHOT_INTERVAL_S:.0f} s "
        f"at the collector's {collector_pace:.1f} commits/s): {done.get('snapshots_thinned', 0):,}"
        f" expired in {seconds:.1f}s",
        flush=True,
    )
    state = open_state(lake_dir)
    _print_state("after thinning", state)
    timings += [
        time_query(lake_dir, f"{label}, thinned", QUERY[k], conversation, args.runs, state.files)
        for k in ("a'", "b", "c", "d")
    ]
    return timings


def compare_retention(
    args: argparse.Namespace, workdir: Path, picks: tuple[Any, ...]
) -> list[Timing]:
    """The fragmented lake's phase again, in the same run, with `--compare-retention-days`
    applied by each of its maintenance runs (instead of `--retention-days`): the same spans,
    commits and conversation, so that its timings and its maintenance's compare with the
    phase's above, on the same machine at the same time."""
    days = args.compare_retention_days
    print(f"\n== the same, with retention_days {days:g}", flush=True)
    saved, RETENTION_DAYS[0] = RETENTION_DAYS[0], days
    try:
        rng = random.Random()
        rng.setstate(picks)  # the conversation the phase without it queried
        (workdir / "retention").mkdir(exist_ok=True)
        timings, lake_dir, _ = fragmented_lake(args, workdir / "retention", rng)
    finally:
        RETENTION_DAYS[0] = saved
    shutil.rmtree(lake_dir, ignore_errors=True)
    return [replace(t, scenario=f"{t.scenario}, retention {days:g}d") for t in timings]


# --- the views against an earlier definition ---------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def baseline_views(rev: str, *, log_records: bool = True) -> dict[str, str]:
    """`schema.VIEWS` as it was at git revision `rev` (without `log_records`, its
    `VIEWS_WITHOUT_LOG_RECORDS` where it has them: the views a lake without log records about
    spans has), each reading the others under a `baseline_` name (a view may read another
    one)."""
    # The views live in schema/rules.py (a module that imports nothing of spanscore's), and
    # in schema.py before the schema became a package.
    for path in ("lake/src/spanscore/lake/schema/rules.py", "lake/src/spanscore/lake/schema.py"):
        shown = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True
        )
        if shown.returncode == 0:
            break
    if shown.returncode != 0:
        raise RuntimeError(f"--baseline-views {rev}: {shown.stderr.strip()}")
    module = types.ModuleType("baseline_schema")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(shown.stdout, f"{rev}:schema.py", "exec"), module.__dict__)
    views: dict[str, str] = module.VIEWS
    if not log_records:
        views = getattr(module, "VIEWS_WITHOUT_LOG_RECORDS", views)
    renamed = {}
    for name, body in views.items():
        for other in views:
            body = body.replace(f"FROM {other}\n", f"FROM baseline_{other}\n").replace(
                f"FROM {other} ", f"FROM baseline_{other} "
            )
        renamed[name] = body
    return renamed


@dataclass(frozen=True)
class ViewComparison:
    view: str
    point_s: tuple[float, float]  # (baseline, today): one conversation, warm, median
    scan_s: tuple[list[float], list[float]]  # full read into Arrow, each run
    rows: tuple[int, int]  # rows of the full read: the two definitions must agree


def compare_views(lake_dir: Path, conversation: str, rev: str, runs: int) -> list[ViewComparison]:
    print(f"\n== the views against their definitions at {rev} (same lake, same run)", flush=True)
    con = connect(lake_dir)
    results = []
    try:
        # today's views, as the lake has them: with the log records where some say something
        # about a span; the baseline's likewise
        (records,) = con.execute(
            f"SELECT EXISTS (SELECT 1 FROM logs WHERE {schema.LOG_RECORD_CONTENT})"
        ).fetchone() or (False,)
        baseline = baseline_views(rev, log_records=bool(records))
        for name, body in baseline.items():
            con.execute(f"CREATE TEMP VIEW baseline_{name} AS {body}")
        for name in schema.VIEWS:
            columns = [c[0] for c in con.execute(f"SELECT * FROM {name} LIMIT 0").description]
            if name not in baseline or "conversation_id" not in columns:
                continue  # the simulations' views: no one conversation to query
            point = []
            for view in (f"baseline_{name}", name):
                sql = f"SELECT * FROM {view} WHERE conversation_id = ?"
                con.execute(sql, [conversation]).fetchall()  # warm-up, untimed
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    con.execute(sql, [conversation]).fetchall()
                    times.append(time.perf_counter() - started)
                point.append(statistics.median(times))
            scans: tuple[list[float], list[float]] = ([], [])
            rows = [0, 0]
            for _ in range(2):
                for i, view in enumerate((f"baseline_{name}", name)):
                    started = time.perf_counter()
                    rows[i] = con.execute(f"SELECT * FROM {view}").to_arrow_table().num_rows
                    scans[i].append(time.perf_counter() - started)
            comparison = ViewComparison(name, (point[0], point[1]), scans, (rows[0], rows[1]))
            results.append(comparison)
            print(
                f"  {name:<14} one conversation (warm): {_ms(point[0])} at {rev}, "
                f"{_ms(point[1])} today   full read: "
                f"{', '.join(_ms(x) for x in scans[0])} at {rev}, "
                f"{', '.join(_ms(x) for x in scans[1])} today "
                f"({rows[0]:,} / {rows[1]:,} rows)",
                flush=True,
            )
    finally:
        con.close()
    return results


def print_view_comparison(results: list[ViewComparison], rev: str) -> None:
    print(f"\nViews today against {rev} (ratio = today / {rev}; under 1 is faster)")
    print(
        f"{'view':<16}{'point, ' + rev:>16}{'today':>10}{'ratio':>8}"
        f"{'full read, ' + rev:>22}{'today':>10}{'ratio':>8}"
    )
    for r in results:
        before, after = statistics.mean(r.scan_s[0]), statistics.mean(r.scan_s[1])
        print(
            f"{r.view:<16}{_ms(r.point_s[0]):>16}{_ms(r.point_s[1]):>10}"
            f"{r.point_s[1] / r.point_s[0]:>8.2f}{_ms(before):>22}{_ms(after):>10}"
            f"{after / before:>8.2f}" + ("" if r.rows[0] == r.rows[1] else "   ROWS DIFFER")
        )


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark one-conversation queries on a big lake, and what compaction "
        "does for a lake filled by many small commits.",
    )
    parser.add_argument(
        "--spans", type=int, default=5_000_000, help="spans in the big lake (default 5,000,000)"
    )
    parser.add_argument(
        "--commit-rows",
        type=int,
        default=250_000,
        help="spans per commit (= per data file) of the big lake (default 250,000)",
    )
    parser.add_argument(
        "--fragmented-spans",
        type=int,
        default=500_000,
        help="spans in the fragmented lake (default 500,000)",
    )
    parser.add_argument(
        "--small-commit-rows",
        type=int,
        default=512,
        help="spans per commit of the fragmented lake (default 512)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=0,
        help="conversations open at once; a conversation's spans lie within this many times "
        "10 consecutive spans (default 0: anywhere in the lake, uniformly)",
    )
    parser.add_argument(
        "--runs", type=int, default=5, help="timed runs per query and connection kind"
    )
    parser.add_argument("--seed", type=int, default=1, help="picks the conversation queried")
    parser.add_argument(
        "--cadence-commits",
        type=int,
        default=0,
        help="commits of the collector's-cadence lake (default: the last --recent-commits "
        "count; 6000 is half an hour at the collector's pace, of which the snapshots older "
        "than its snapshot_interval_s are thinned)",
    )
    parser.add_argument(
        "--retention-days",
        type=float,
        help="retention every maintenance applies (spans start at FIRST_ARRIVAL: a limit "
        "past its age deletes nothing and measures what checking costs)",
    )
    parser.add_argument(
        "--compare-retention-days",
        type=float,
        help="also run the fragmented lake's phase again with this retention, in the same run, "
        "and print both (spans start at FIRST_ARRIVAL, over DAYS days: a limit past their age "
        "deletes nothing and measures what checking costs; a limit within them deletes the "
        "older spans)",
    )
    parser.add_argument(
        "--baseline-views",
        metavar="REV",
        help="also time the views as defined at this git revision, beside today's",
    )
    parser.add_argument(
        "--recent-commits",
        type=_commit_counts,
        help="commits of --recent-commit-rows spans made to the fragmented lake after "
        "maintenance, before its point queries are timed once more; a comma-separated list "
        "times them at each count, the commits adding up (default: what the collector leaves "
        "between two compactions at most: 5 minutes of 2,000 spans/s, its maintenance "
        f"interval, or its compact_after_commits ({COMPACT_AFTER_COMMITS}) commits, "
        "whichever is fewer: 120 of 5,000 spans; 0: none)",
    )
    parser.add_argument(
        "--recent-commit-rows",
        type=int,
        help="spans per commit after maintenance (default: --small-commit-rows; an "
        "exporter's batch is 512)",
    )
    parser.add_argument(
        "--row-groups-baseline",
        action="store_true",
        help="also build the big lake in DuckDB's default row groups (122,880 spans), as a "
        "lake created before its row groups were set at creation was written until its first "
        "maintenance, and time its point queries beside the lake's",
    )
    parser.add_argument(
        "--no-early-stage",
        action="store_true",
        help="do not time the recent commits again after compaction's first stage (which the "
        "collector runs every compact_after_small_commits commits under "
        f"{SMALL_COMMIT_SPANS:,} spans)",
    )
    parser.add_argument(
        "--merge-spans",
        action="store_true",
        help="compact the fragmented lake's spans as a shared lake's maintenance does "
        "(DuckLake's merge, unsorted) instead of sorting them as an embedded lake's does",
    )
    parser.add_argument(
        "--log-records",
        action="store_true",
        help="last, give the big lake's model calls their messages as GenAI log records too "
        "(two per call, committed in time order as the collector does) and time the views "
        "and one conversation's trajectory again, before and after maintenance (with "
        "--baseline-views, compare the views again on that lake)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 500,000 + 100,000 spans, 3 runs"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.spans = min(args.spans, 500_000)
        args.commit_rows = min(args.commit_rows, 50_000)
        args.fragmented_spans = min(args.fragmented_spans, 100_000)
        args.recent_commits = tuple(min(n, 20) for n in args.recent_commits or (20,))
        args.runs = min(args.runs, 3)
    for name in ("spans", "commit_rows", "fragmented_spans", "small_commit_rows", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.in_flight < 0:
        parser.error("--in-flight must be 0 or more")
    if args.recent_commit_rows is None:
        args.recent_commit_rows = args.small_commit_rows
    if args.recent_commit_rows < 1:
        parser.error("--recent-commit-rows must be positive")
    if args.recent_commits is None:
        args.recent_commits = (recent_commits(args.recent_commit_rows),)
    return args


def _commit_counts(text: str) -> tuple[int, ...]:
    """`--recent-commits`: "120" or "100,1000" (increasing), "0" for none."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a count or counts like 100,1000: {text!r}"
        ) from None
    if any(n < 0 for n in counts) or list(counts) != sorted(set(counts)):
        raise argparse.ArgumentTypeError(f"counts must be 0 or more and increasing: {text!r}")
    return tuple(n for n in counts if n > 0)


def print_summary(timings: list[Timing], args: argparse.Namespace) -> None:
    width = max([34, *(len(f"{t.scenario} ({t.query.key}) {t.query.label}") + 2 for t in timings)])
    print()
    print(
        f"Summary ({args.spans:,}-span lake in {args.commit_rows:,}-span commits; fragmented "
        f"lake {args.fragmented_spans:,} spans in {args.small_commit_rows:,}-span commits; "
        f"median of {args.runs} runs; {os.cpu_count()} CPUs)"
    )
    print(
        f"{'lake / query':<{width}}{'rows':>11}{'files':>7}{'connect':>10}{'fresh':>10}"
        f"{'conn+fresh':>12}{'warm':>10}   target"
    )
    for t in timings:
        if t.query.key in VIEW_QUERIES:
            met = t.warm_s < VIEW_WARM_TARGET_S and t.fresh_total_s < VIEW_FRESH_TARGET_S
            verdict = "< 100 ms warm, < 300 ms fresh" if met else "OVER the view target"
        elif t.query.point and t.query.key != "a'":
            verdict = "< 1 s" if t.fresh_total_s < TARGET_S else "OVER 1 s"
        else:
            verdict = "(baseline)" if not t.query.point else "(diagnostic)"
        print(
            f"{t.scenario + ' (' + t.query.key + ') ' + t.query.label:<{width}}{t.rows:>11,}"
            f"{t.files:>7,}{_ms(t.connect_s):>10}{_ms(t.fresh_s):>10}"
            f"{_ms(t.fresh_total_s):>12}{_ms(t.warm_s):>10}   {verdict}"
        )
    print()
    print(
        "Target (for context; not asserted): a query for one conversation's spans in a lake of "
        "5 million spans answers in under a second (connect + query on a fresh connection, as "
        "`spanscore sql` does, Python start-up not counted); one conversation from a view "
        "(tool_calls, conversations, turns) in under 100 ms warm and 300 ms fresh."
    )


def _load() -> str:
    """The 1, 5 and 15 minute load averages, or '?' where the platform has none."""
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


_signals: list[int] = []  # signals received; DuckDB turns the KeyboardInterrupt into its own error


def _raise_interrupt(signum: int, frame: types.FrameType | None) -> None:
    _signals.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    RETENTION_DAYS[0] = args.retention_days
    signal.signal(signal.SIGTERM, _raise_interrupt)  # clean up on SIGTERM as on Ctrl-C
    workdir = Path(tempfile.mkdtemp(prefix="spanscore-query-bench-"))
    rng = random.Random(args.seed)
    try:
        started = time.perf_counter()
        print(
            f"spanscore query benchmark: DuckDB {duckdb.__version__}, {os.cpu_count()} CPUs, "
            f"{len(schema.SPANS)} span columns; load average {_load()}",
            flush=True,
        )
        unfilled = unfilled_columns()
        if unfilled:
            print(f"  columns this benchmark leaves NULL: {', '.join(unfilled)}")
        timings, lake_dir, _layout, conversation = big_lake(args, workdir, rng)
        picks = rng.getstate()
        fragmented, collectors_lake, its_conversation = fragmented_lake(args, workdir, rng)
        timings += fragmented
        if (
            args.recent_commits
            and early_stage_applies(args.recent_commit_rows)
            and not (args.no_early_stage or args.merge_spans)
        ):
            timings += cadence_lake(args, workdir, args.seed)
        if args.compare_retention_days is not None:
            timings += compare_retention(args, workdir, picks)
        comparison = (
            compare_views(lake_dir, conversation, args.baseline_views, args.runs)
            if args.baseline_views
            else []
        )
        trajectory: tuple[float, float] | None = None
        logged_comparison: list[ViewComparison] = []
        if args.log_records:
            logged, trajectory = log_records_phase(args, collectors_lake, its_conversation)
            timings += logged
            if args.baseline_views:  # the same lake with its log records, compacted
                logged_comparison = compare_views(
                    collectors_lake, its_conversation, args.baseline_views, args.runs
                )
        print_summary(timings, args)
        if comparison:
            print_view_comparison(comparison, args.baseline_views)
        if logged_comparison:
            print("\nWith the log records:", end="")
            print_view_comparison(logged_comparison, args.baseline_views)
        if trajectory is not None:
            print(
                f"One conversation's trajectory by the rules (warm): {_ms(trajectory[0])} "
                f"before the log records, {_ms(trajectory[1])} with them "
                f"(ratio {trajectory[1] / trajectory[0]:.1f})."
            )
        print(
            f"\n(total run time {time.perf_counter() - started:.0f}s; load average now {_load()}: "
            "other work on the machine shows up in these timings)"
        )
        return 0
    except (KeyboardInterrupt, duckdb.Error, RuntimeError) as exc:
        if isinstance(exc, KeyboardInterrupt) or _signals:
            print("\ninterrupted", file=sys.stderr)
            return 130
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
