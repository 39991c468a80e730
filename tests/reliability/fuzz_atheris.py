"""Longer fuzzing runs of the decoders and convention mappers with atheris (libFuzzer).

Not run by the test suite (CI runs the Hypothesis targets in `test_fuzz_decoders.py`, which
check the same contract). Coverage-guided, for hours if you like:

    $ pip install atheris
    $ python tests/reliability/fuzz_atheris.py --target spans -max_total_time=3600
    $ python tests/reliability/fuzz_atheris.py --write-seeds corpus-json --target raw-json
    $ python tests/reliability/fuzz_atheris.py --target raw-json corpus-json/ -runs=1000000

Targets:
- `spans`, `logs`: structure-aware; libFuzzer's bytes drive the Hypothesis strategies of
  `otlp_strategies` (valid framing, hostile content), sent as protobuf and as OTLP/JSON.
- `mappers`: the convention mappers on attribute values of any shape.
- `raw-protobuf`, `raw-json`: the bytes themselves as a request body (gzip when they start
  with gzip's magic), for both signals. Start them from seeds (`--write-seeds DIR` writes
  requests drawn from the strategies): the JSON parser is C, so from nothing libFuzzer sees
  no coverage to climb.

A crash is an exception other than the decoder's `BadRequest` (or a broken contract: an item
lost without a reason, an oversized message). Make every crash a case in
`test_fuzz_decoders.REGRESSIONS` or `test_hostile_input.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tests package, for the shared strategies and checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--target",
        choices=["spans", "logs", "mappers", "raw-protobuf", "raw-json"],
        default="spans",
    )
    parser.add_argument("--write-seeds", type=Path, help="write seed requests here, then exit")
    ours, libfuzzer_args = parser.parse_known_args()
    if ours.write_seeds is not None:
        write_seeds(ours.write_seeds, as_json=ours.target == "raw-json")
        return

    import atheris

    with atheris.instrument_imports():
        from hypothesis import given, settings

        from spanscore.collector import otlp
        from tests.support import decoder_contract as contract
        from tests.support.otlp_strategies import logs_requests, otlp_json, trace_requests

    import json

    def structured(signal: str) -> object:
        requests = trace_requests() if signal == "spans" else logs_requests()

        @settings(database=None, deadline=None)
        @given(request=requests)
        def check(request: object) -> None:
            sent = contract.items_in(request, signal)
            contract.check_contract(signal, request.SerializeToString(), False, sent)  # type: ignore[attr-defined]
            contract.check_contract(signal, json.dumps(otlp_json(request)).encode(), True, sent)

        return check.hypothesis.fuzz_one_input  # type: ignore[attr-defined]

    def raw(as_json: bool) -> object:
        def check(data: bytes) -> None:
            body = data
            if data[:2] == b"\x1f\x8b":
                try:
                    body = otlp.gunzip(data, 8 * 1024 * 1024)
                except otlp.BadRequest:
                    return
            for signal in ("spans", "logs"):
                contract.check_contract(signal, body, as_json)

        return check

    if ours.target in ("spans", "logs"):
        target = structured(ours.target)
    elif ours.target == "mappers":
        mappers = settings(database=None, deadline=None)(
            given(**contract.MAPPER_INPUTS)(contract.check_mappers)
        )
        target = mappers.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    else:
        target = raw(as_json=ours.target == "raw-json")
    atheris.Setup([sys.argv[0], *libfuzzer_args], target)
    atheris.Fuzz()


def write_seeds(directory: Path, as_json: bool, count: int = 200) -> None:
    import json

    from hypothesis import HealthCheck, given, settings

    from tests.support.otlp_strategies import logs_requests, otlp_json, trace_requests

    directory.mkdir(parents=True, exist_ok=True)
    written: list[int] = []

    @settings(
        max_examples=count, database=None, suppress_health_check=list(HealthCheck), deadline=None
    )
    @given(request=trace_requests() | logs_requests())
    def write(request: object) -> None:
        body = json.dumps(otlp_json(request)).encode() if as_json else request.SerializeToString()  # type: ignore[attr-defined]
        (directory / f"seed-{len(written):04d}").write_bytes(body)
        written.append(len(body))

    write()
    print(f"wrote {len(written)} seeds to {directory}")


if __name__ == "__main__":
    main()
