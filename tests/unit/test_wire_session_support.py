"""The recorded wire session's own machinery (tests/wire_session.py), without a server:
normalization keeps the encoding (same sizes, placeholders in order of first appearance),
and a mismatch is reported by field name."""

from __future__ import annotations

import dataclasses
import struct
import uuid

from tests.wire_session import Entry, Normalizer, decode_response, describe_mismatch, load


def test_normalization_keeps_sizes_and_numbers_in_order_of_appearance() -> None:
    normalize = Normalizer("127.0.0.1", 40123)
    first, second = str(uuid.uuid4()).encode(), str(uuid.uuid4()).encode()
    topic = uuid.uuid4()
    normalize.learn(topic)
    frame = (
        b"m-"
        + second
        + b"|"
        + first
        + b"|"
        + second
        + topic.bytes
        + b"\x00\x0a127.0.0.1"
        + struct.pack(">i", 40123)
    )
    out = normalize(frame)
    assert len(out) == len(frame)
    one, two = b"00000000-0000-4000-8000-000000000001", b"00000000-0000-4000-8000-000000000002"
    assert out.startswith(b"m-" + one + b"|" + two + b"|" + one)
    assert uuid.UUID(int=1).bytes in out
    assert out.endswith(b"127.0.0.1" + struct.pack(">i", 9092))


def test_a_mismatch_names_the_fields_that_differ() -> None:
    entry = next(e for e in load() if e.label == "rebalance: A heartbeat while preparing")
    _, decoded, _ = decode_response(entry.api_key, entry.version, entry.response)
    assert decoded.error_code == 27  # REBALANCE_IN_PROGRESS
    # The error code is the last two bytes of a Heartbeat v4 response (then tagged fields).
    changed = dataclasses.replace(entry, response=entry.response[:-3] + b"\x00\x00\x00")
    report = describe_mismatch(entry, changed)
    assert ".error_code: expected <ErrorCode.rebalance_in_progress: 27>" in report
    assert isinstance(changed, Entry)
