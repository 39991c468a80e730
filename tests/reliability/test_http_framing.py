"""HTTP framing cannot be used to skip a limit or lose data (issue 16, items 4 and 12): the
Content-Length is read strictly, and every gzip member is read and counted.

Every test runs the real collector on loopback ports over a real lake on disk.
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from spanscore.collector import Collector

from ..support.otlp_wire import (
    PROTOBUF,
    Reply,
    assert_clean_success,
    assert_mentions,
    hexes,
    make_span,
    post,
    post_raw,
    span_ids,
    still_serving,
    trace_request,
)

# --- item 12: gzip members -------------------------------------------------------------------


def _members(body: bytes, *cuts: int) -> bytes:
    """`body` as a multi-member gzip stream (RFC 1952 2.2), split at `cuts`."""
    bounds = [0, *cuts, len(body)]
    return b"".join(gzip.compress(body[a:b]) for a, b in itertools.pairwise(bounds))


def test_every_gzip_member_is_read(collector: Collector, lake_dir: Path) -> None:
    # Concatenated gzip members are one stream; the second member used to be dropped silently
    # (answered 200). Protobuf messages concatenate as a merge, so cutting anywhere is valid.
    spans = [make_span(f"member span {i}") for i in range(6)]
    body = trace_request(spans).SerializeToString()
    reply = post(
        collector, _members(body, len(body) // 3, 2 * len(body) // 3),
        headers={"Content-Encoding": "gzip"},
    )  # fmt: skip
    assert_clean_success(reply)
    assert span_ids(lake_dir) == hexes(spans)


def test_a_body_of_countless_gzip_members_is_refused(collector: Collector, lake_dir: Path) -> None:
    # 400,000 empty members in 8 MiB: reading them all costs time quadratic in their number
    # (zlib copies what follows each member). More than GZIP_MEMBERS is refused at once.
    empty = gzip.compress(b"")
    reply = post(collector, empty * 400_000, headers={"Content-Encoding": "gzip"})
    assert reply.status == 400, reply
    assert_mentions(reply.message, "more than 64 members")
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


GZIP_TAILS = {
    # Bytes after the last member that are not a gzip member.
    "trailing-garbage": (b"not gzip", "not valid gzip"),
    # A second member cut short.
    "truncated-member": (gzip.compress(b"\x0a\x00")[:-6], "truncated"),
    # Zero padding (as gzip(1) allows), then something else.
    "garbage-after-padding": (b"\0" * 8 + b"x", "after the zero padding"),
}


@pytest.mark.parametrize("case", list(GZIP_TAILS), ids=list(GZIP_TAILS))
def test_a_bad_gzip_tail_is_refused_not_ignored(
    collector: Collector, lake_dir: Path, case: str
) -> None:
    tail, fragment = GZIP_TAILS[case]
    body = gzip.compress(trace_request([make_span("head")]).SerializeToString()) + tail
    reply = post(collector, body, headers={"Content-Encoding": "gzip"})
    assert reply.status == 400, reply
    assert_mentions(reply.message, fragment)
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving


def test_gzip_members_add_up_against_the_size_limit(
    make_collector: Callable[..., Collector], lake_dir: Path
) -> None:
    collector = make_collector(max_request_bytes=4096)
    member = gzip.compress(trace_request([make_span("m")]).SerializeToString())
    reply = post(collector, member * 200, headers={"Content-Encoding": "gzip"})
    assert reply.status == 413, reply
    assert_mentions(reply.message, "over the limit of 4096 bytes")
    assert span_ids(lake_dir) == set()


# --- item 4: Content-Length cannot skip the size limit ---------------------------------------

BAD_LENGTHS = {
    # A negative length read the body to the end of the stream, past the size limit.
    "negative": b"-1",
    # int() accepts these; HTTP does not (RFC 9110 8.6: 1*DIGIT).
    "plus-sign": b"+5",
    "underscore": b"1_0",
    "spaces-inside": b"1 0",
    "hex": b"0x10",
    # Two different lengths: which one is the body? (RFC 9112 6.3)
    "conflicting": b"5\r\nContent-Length: 6",
}


@pytest.mark.parametrize("case", list(BAD_LENGTHS), ids=list(BAD_LENGTHS))
def test_a_malformed_content_length_is_refused(
    make_collector: Callable[..., Collector], lake_dir: Path, case: str
) -> None:
    collector = make_collector(max_request_bytes=4096)
    body = trace_request([make_span("x", attributes={"blob": "b" * 8000})]).SerializeToString()
    request = (
        b"POST /v1/traces HTTP/1.1\r\nHost: c\r\nContent-Type: " + PROTOBUF.encode() + b"\r\n"
        b"Content-Length: " + BAD_LENGTHS[case] + b"\r\n\r\n" + body
    )
    reply: Reply = post_raw(collector, request)
    assert reply.status == 400, reply
    assert_mentions(reply.message, "Content-Length")
    assert reply.headers.get("connection") == "close"
    serving = still_serving(collector)
    assert span_ids(lake_dir) == serving
