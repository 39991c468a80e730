"""What decoding any OTLP request must do, whatever its content (the contract the fuzzers check:
`tests/reliability/test_fuzz_decoders.py` with Hypothesis, `fuzz_atheris.py` for longer runs):

- a request is refused whole only with `BadRequest` (a clear 400), never another exception;
- otherwise every item is either stored or rejected with a reason (nothing vanishes), and
  the partial-success message stays small.
"""

from __future__ import annotations

from typing import Any

from spanscore.collector import otlp
from spanscore.collector.flatten import Flattener, Limits, summarize
from spanscore.collector.pool import flatten_request

FLATTENER = Flattener(Limits(max_attributes=6, max_value_length=64, max_key_length=40))


def items_in(request: Any, signal: str) -> int:
    """How many spans ("spans") or log records ("logs") `request` holds."""
    if signal == "spans":
        return sum(len(s.spans) for g in request.resource_spans for s in g.scope_spans)
    return sum(len(s.log_records) for g in request.resource_logs for s in g.scope_logs)


def check_contract(signal: str, body: bytes, as_json: bool, sent: int | None = None) -> None:
    """Decode and flatten `body` as the collector does; the contract above."""
    try:
        flat = flatten_request(FLATTENER, signal, body, as_json)
    except otlp.BadRequest as exc:
        refusal = str(exc)
        assert len(otlp.client_message(refusal)) <= otlp.MESSAGE_BYTES
        return
    assert not flat.unexpected, flat.unexpected  # a rejection no rule foresaw is a bug
    if sent is not None:
        assert flat.rows + flat.rejected == sent
    assert len(flat.problems) >= flat.rejected
    assert len(summarize(flat.problems).encode()) <= otlp.MESSAGE_BYTES
