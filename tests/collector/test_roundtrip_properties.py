"""Hypothesis: any attribute map survives span -> OTLP -> collector -> lake -> JSON exactly."""

from __future__ import annotations

import http.client
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1 import common_pb2

from spanscore.collector import Collector

from ..support import otlp_factory as f
from ..support.lake import query

keys = st.text(min_size=1, max_size=30)
scalars = st.one_of(
    st.text(max_size=200),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=8,
)


def _any(value: Any) -> common_pb2.AnyValue:
    out = common_pb2.AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list):
        out.array_value.values.extend(_any(v) for v in value)
    else:
        out.kvlist_value.values.extend(
            common_pb2.KeyValue(key=k, value=_any(v)) for k, v in value.items()
        )
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(attributes=st.dictionaries(keys, values, max_size=12), name=st.text(max_size=50))
def test_attributes_round_trip_exactly(
    collector: Collector, lake_dir: Path, attributes: dict[str, Any], name: str
) -> None:
    span = f.span(name)
    span.attributes.extend(common_pb2.KeyValue(key=k, value=_any(v)) for k, v in attributes.items())
    conn = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    conn.request(
        "POST", "/v1/traces", f.request([span]), {"Content-Type": "application/x-protobuf"}
    )
    assert conn.getresponse().status == 200
    rows = query(
        lake_dir,
        "SELECT name, attributes FROM spans WHERE span_id = ?",
        [span.span_id.hex()],
    )
    assert len(rows) == 1
    assert rows[0][0] == name
    assert _same(json.loads(rows[0][1]), attributes)
