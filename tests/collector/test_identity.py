"""The identity of a stored row (`spanscore.collector.identity`): the same for an incoming batch
and for the row read back from the lake, so a retry after a restart is recognised."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spanscore.collector import identity
from spanscore.collector.flatten import LOGS_SCHEMA
from spanscore.lake import connect


def _logs(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=LOGS_SCHEMA)


def test_a_span_is_its_trace_and_span_id() -> None:
    spans = pa.table(
        {
            "trace_id": ["t1", "t1", "t1", "t2"],
            "span_id": ["s1", "s1", "s2", "s1"],
            "name": ["a", "another name", "a", "a"],
        }
    )
    keys = identity.keys(spans, "spans")
    assert keys[0] == keys[1]  # only the ids count
    assert len({keys[0], keys[2], keys[3]}) == 3


def test_a_log_record_without_a_time_has_no_identity() -> None:
    base = {"trace_id": "t", "span_id": "s", "event_name": "e", "body": "b"}
    logs = _logs(
        [
            {**base, "time_unix_nano": 0, "observed_time_unix_nano": 0},
            {**base, "time_unix_nano": 1, "observed_time_unix_nano": 0},
            {**base, "time_unix_nano": 0, "observed_time_unix_nano": 1},
            {**base, "time_unix_nano": 1, "observed_time_unix_nano": 0, "body": "other"},
        ]
    )
    keys = identity.keys(logs, "logs")
    assert keys[0] is None
    assert None not in keys[1:]
    assert len(set(keys[1:])) == 3


def test_rows_read_back_from_the_lake_have_the_keys_they_were_written_with(
    tmp_path: Path,
) -> None:
    logs = _logs(
        [
            {
                "trace_id": f"t{i % 3}",
                "span_id": "s",
                "time_unix_nano": i,
                "observed_time_unix_nano": 0,
                "event_name": None if i % 2 else "gen_ai.choice",
                "body": f'"body {i}"' if i % 4 else None,  # JSON text, as the flattener writes
                "conversation_id": "c",
            }
            for i in range(1, 40)
        ]
    )
    con = connect(tmp_path / "lake", create=True)
    try:
        con.register("incoming", logs)
        con.execute("INSERT INTO lake.logs BY NAME SELECT * EXCLUDE (ingest_time) FROM incoming")
        columns = ", ".join(identity.LOG_IDENTITY)
        back = con.execute(f"SELECT {columns} FROM lake.logs ORDER BY time_unix_nano")
        read = identity.keys_of_batches(back.to_arrow_reader(7), "logs")
    finally:
        con.close()
    assert read == identity.keys(logs, "logs")
