"""Helpers the tests share (and the benchmarks in bench/ too): one module per job.

Test modules and conftest.py import from here, never from each other; `conftest.py` keeps only
fixtures, which call these helpers. `tests/test_harness.py` checks that no file under tests/
imports a test module or a conftest.

- `polling`: wait for a condition with a deadline, never a bare sleep.
- `ports`: a free loopback port for a child process that needs a fixed one.
- `lake`: read a lake from a fresh connection, as another process would.
- `collector`: the collector in-process on port 0, or `spanscore serve` as a child process.
- `s3`: moto's S3-compatible server on a loopback port, with one bucket.
- `postgres`: the PostgreSQL server the shared-lake tests use, and whether it is there.
- `otlp_factory`: hand-built OTLP spans and export requests (ids, sizes, bytes on the wire).
- `otlp_wire`: raw OTLP exports over HTTP and gRPC, their replies read and checked.
- `otlp_http`: post spans or log records to a collector over OTLP/HTTP.
- `conversation_spans`: the spans and log records of an agent's conversation, built by hand.
- `agreement`: the SQL views and the Python trajectory builder agree on conversations.
- `otlp_strategies`: Hypothesis strategies of hostile OTLP requests.
- `decoder_contract`: what decoding any request must do (the fuzzers' contract).
- `netutil`: a TCP proxy a test can cut.
- `catalog_lock`: another process holding an embedded lake's catalog lock.
- `tls`: a self-signed certificate for loopback.
- `evaluation_runs`: the synthetic lake's suite and evaluation runs over it.
- `agents_conversation`: a two-turn conversation of the OpenAI Agents SDK.
- `example_lake`: a lake of the example agent's conversations, recorded for real.
- `report_lake`: a real evaluated lake for the report tests.
"""
