"""Codec wrappers: framing, request headers, decoding at every served version, responses."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from groupcoord.protocol import batches
from groupcoord.protocol.api import (
    RequestError,
    UnknownApi,
    UnsupportedVersion,
    decode_request,
    encode_response,
    error_response,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.framing import FrameDecoder, FrameTooLarge, frame
from tests.rawclient import encode_request
from tests.support import make_batch

SUPPORTED = {3: (0, 12), 18: (0, 4)}


def test_frame_decoder_splits_and_joins_pieces() -> None:
    decoder = FrameDecoder(1024)
    data = frame(b"abc") + frame(b"") + frame(b"xyz" * 10)
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
    frames = []
    while (f := decoder.next_frame()) is not None:
        frames.append(f)
    assert frames == [b"abc", b"", b"xyz" * 10]
    assert decoder.buffered_bytes == 0


def test_frame_decoder_rejects_oversized_and_negative_sizes() -> None:
    decoder = FrameDecoder(100)
    decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    decoder = FrameDecoder(100)
    decoder.feed(struct.pack(">i", -5))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    # A good frame and then a bad size in one chunk: the frame first, then the error.
    decoder = FrameDecoder(100)
    decoder.feed(frame(b"ok") + struct.pack(">i", 101) + b"x" * 101)
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_decode_flexible_request_with_header_v2() -> None:
    body = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="t"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    data = encode_request(3, 12, 7, body, client_id="me")
    request = decode_request(data[4:], SUPPORTED)
    assert request.header.correlation_id == 7
    assert request.header.client_id == "me"
    assert request.body == body


def test_unsupported_version_carries_header() -> None:
    body = MetadataRequest(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    data = encode_request(3, 12, 9, body)
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(data[4:], {3: (0, 11)})
    assert info.value.header.correlation_id == 9


def test_unknown_api_key_and_garbage() -> None:
    with pytest.raises(UnknownApi):
        decode_request(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00", SUPPORTED)
    with pytest.raises(RequestError):
        decode_request(b"\x00\x03", SUPPORTED)
    data = encode_request(
        18, 3, 1, ApiVersionsRequest(client_software_name="a", client_software_version="1")
    )
    with pytest.raises(RequestError):
        decode_request(data[4:-3], SUPPORTED)


def test_api_versions_beyond_codec_is_unsupported_not_unknown() -> None:
    # KIP-511: a client newer than us sends ApiVersions vN; we must answer at v0.
    raw = struct.pack(">hhi", 18, 99, 5) + struct.pack(">h", 1) + b"x" + b"\x00" * 8
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(raw, SUPPORTED)
    assert info.value.header.correlation_id == 5


def test_error_response_encodes_at_every_version() -> None:
    for version in range(0, 13):
        data = encode_response(
            3, version, 1, error_response(3, version, ErrorCode.UNSUPPORTED_VERSION)
        )
        assert struct.unpack_from(">i", data, 0)[0] == len(data) - 4


def _batch(count: int, base_ts: int = 1000, producer_id: int = -1, seq: int = -1) -> bytearray:
    epoch = 0 if producer_id >= 0 else -1
    return bytearray(
        make_batch(count, producer_id=producer_id, epoch=epoch, seq=seq, start_ts_ms=base_ts)
    )


def test_batch_header_validation_and_offset_stamping() -> None:
    one = _batch(3)
    two = _batch(2, producer_id=7, seq=5)
    payload = bytearray(one + two)
    headers = batches.split_batches(payload)
    assert [h.records_count for h in headers] == [3, 2]
    assert headers[1].last_sequence == 6
    batches.set_base_offset(payload, 0, 100)
    assert batches.split_batches(payload)[0].base_offset == 100  # CRC still valid
    assert [o for o, _ in batches.record_timestamps(bytes(payload[: len(one)]))] == [100, 101, 102]


def test_set_max_timestamp_rewrites_the_header_and_crc_only() -> None:
    sent = bytes(_batch(2) + _batch(3))  # the second batch, at an offset, is rewritten
    payload = bytearray(sent)
    first, second = batches.split_batches(payload)
    pos = first.size_bytes
    same = batches.set_max_timestamp(payload, pos, second, False, second.max_timestamp)
    assert same is second and payload == sent  # already so: nothing written
    stamped = batches.set_max_timestamp(payload, pos, second, True, 5_000)
    assert batches.split_batches(payload) == [first, stamped]  # CRC valid
    assert stamped.is_log_append_time and stamped.max_timestamp == 5_000
    assert stamped.base_timestamp == second.base_timestamp
    assert payload[pos + 61 :] == sent[pos + 61 :]  # records untouched
    # Kafka's DefaultRecordBatch reads every record of a LogAppendTime batch at its max.
    batch = bytes(payload[pos:])
    assert [ts for _, ts in batches.record_timestamps(batch)] == [5_000] * 3
    # Back to CreateTime: the records' own timestamps again.
    back = batches.set_max_timestamp(payload, pos, stamped, False, second.max_timestamp)
    assert back == second and payload == sent


def test_batch_corruption_is_detected() -> None:
    payload = _batch(3)
    payload[-1] ^= 0xFF
    with pytest.raises(batches.InvalidBatch):
        batches.split_batches(payload)
    with pytest.raises(batches.InvalidBatch):
        batches.split_batches(_batch(3)[:-1])
    bad_magic = _batch(1)
    bad_magic[16] = 1
    with pytest.raises(batches.InvalidBatch):
        batches.split_batches(bad_magic)


@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_frame_decoder_reassembles_any_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=30)))
    decoder = FrameDecoder(1000)
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        decoder.feed(stream[start:end])
        while (f := decoder.next_frame()) is not None:
            got.append(f)
    assert got == payloads
    assert decoder.buffered_bytes == 0


def test_encoded_response_frames_exactly_as_the_codec() -> None:
    """An Encoded response (a body encoded once, reused) frames byte for byte as the codec
    frames the response it was made from, for flexible and non-flexible versions."""
    import datetime

    from groupcoord.protocol.api import Encoded, encode_response, response_types

    for api_key, version, values in (
        (
            68,
            1,
            dict(
                throttle_time=datetime.timedelta(0),
                error_code=0,
                error_message=None,
                member_id="member-1",
                member_epoch=7,
                heartbeat_interval=datetime.timedelta(milliseconds=5000),
                assignment=None,
            ),
        ),
        (12, 0, dict(error_code=0)),
    ):
        m = response_types(api_key, version)
        cls = m.ConsumerGroupHeartbeatResponse if api_key == 68 else m.HeartbeatResponse
        response = cls(**values)
        encoded = Encoded(response, api_key, version)
        for correlation_id in (0, 1, 123456):
            assert encode_response(api_key, version, correlation_id, encoded) == encode_response(
                api_key, version, correlation_id, response
            )
        assert encoded.error_code == 0
