"""A null (length -1) where the schema forbids one is refused at decoding, as Kafka's
generated readers refuse it ("non-nullable field ... was serialized as null"; the broker then
closes the connection), for every advertised API and version and every array, string and
bytes field of its request at any depth; the cases come from the schemas. The codec alone
read such an array as None and the handler failed on it (issue 16, item 13: ListOffsets v1
with topics = null answered UNKNOWN_SERVER_ERROR after a TypeError).

The fast paths (OffsetCommit v8-v9, the steady ConsumerGroupHeartbeat) read frames without
the codec; for these frames they must step aside so that the codec refuses them.
"""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from groupcoord.coordinator.server.dispatch import build_dispatch
from groupcoord.coordinator.server.fast_paths import FAST_PATHS
from groupcoord.protocol.api import RequestError, decode_request, request_schema
from groupcoord.protocol.fast_frames import read_offset_commit_v8_v9, read_steady_consumer_heartbeat
from tests.schema_values import blank, encode_raw, entity_values, null_cases

_HANDLERS, SUPPORTED = build_dispatch()
ADVERTISED = sorted(
    (int(key), version)
    for key, (low, high) in SUPPORTED.items()
    for version in range(low, high + 1)
)
IDS = [f"{key}-v{version}" for key, version in ADVERTISED]


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    """A request frame (without the size prefix, as the decoder hands it over)."""
    cls = request_schema(api_key, version)
    assert cls is not None
    header = struct.pack(">hhih", api_key, version, 7, 4) + b"null"
    if cls.__header_schema__.__version__ >= 2:
        header += b"\x00"
    return header + body


def test_every_advertised_request_has_null_cases() -> None:
    """The enumeration is not vacuous: only requests of numbers and nullable fields
    (ApiVersions v0-v2, ListGroups v0-v3, InitProducerId, DescribeCluster, Metadata v10-v12,
    DescribeAcls v1-v3) have no field that must not be null."""
    counts = {
        (key, version): len(list(null_cases(request_schema(key, version))))
        for key, version in ADVERTISED
    }
    assert sum(counts.values()) > 400
    assert sum(1 for count in counts.values() if count == 0) == 21
    assert counts[(2, 1)] == 3  # ListOffsets v1: topics, topics[].name, topics[].partitions


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED, ids=IDS)
def test_null_where_the_schema_forbids_it_is_refused(api_key: int, version: int) -> None:
    cls = request_schema(api_key, version)
    assert cls is not None
    # The blank request itself decodes: the refusals below are the nulls'.
    decode_request(_frame(api_key, version, encode_raw(cls, blank(cls))), SUPPORTED)
    fast = FAST_PATHS.get((api_key, version))
    for path, value in null_cases(cls):
        frame = _frame(api_key, version, encode_raw(cls, value))
        if fast is not None:
            # Read without the codec: it must hand the frame on (None) before answering,
            # hence before touching the context.
            assert fast(None, frame) is None, path  # type: ignore[arg-type]
        with pytest.raises(RequestError, match="non-nullable field .* was serialized as null"):
            decode_request(frame, SUPPORTED)


@pytest.mark.parametrize(
    ("api_key", "version"), sorted(FAST_PATHS), ids=[f"{k}-v{v}" for k, v in sorted(FAST_PATHS)]
)
def test_fast_path_frames_with_a_null_are_refused(api_key: int, version: int) -> None:
    """The frames the fast paths take (short strings, small arrays), each with one field
    nulled where it must not be: handed on, then refused by the codec."""
    cls = request_schema(api_key, version)
    assert cls is not None
    if api_key == 68:  # the steady heartbeat: group and member id, the rest null
        nulls = ("instance_id", "rack_id", "subscribed_topic_names", "subscribed_topic_regex")
        steady: dict[str, Any] = dict.fromkeys((*nulls, "server_assignor", "topic_partitions"))
        steady.update(member_epoch=3, rebalance_timeout=datetime.timedelta(milliseconds=-1))
        base = blank(cls, group_id="g", member_id="m", **steady)
        cases = [
            ("group_id", blank(cls, group_id=None, member_id="m", **steady)),
            ("member_id", blank(cls, group_id="g", member_id=None, **steady)),
        ]
        taken = read_steady_consumer_heartbeat(_frame(api_key, version, encode_raw(cls, base)))
    else:
        base = _commit(cls, group_id="g", member_id="m", topic="t")
        cases = [
            ("group_id", _commit(cls, group_id=None, member_id="m", topic="t")),
            ("member_id", _commit(cls, group_id="g", member_id=None, topic="t")),
            ("topics[].name", _commit(cls, group_id="g", member_id="m", topic=None)),
            ("topics", _commit(cls, group_id="g", member_id="m", topic="t", topics=None)),
            ("partitions", _commit(cls, group_id="g", member_id="m", topic="t", partitions=None)),
        ]
        taken = read_offset_commit_v8_v9(
            _frame(api_key, version, encode_raw(cls, base)), lambda *p: p
        )
    assert taken is not None  # the well-formed frame is one the fast path reads
    decode_request(_frame(api_key, version, encode_raw(cls, base)), SUPPORTED)
    fast = FAST_PATHS[(api_key, version)]
    for path, value in cases:
        frame = _frame(api_key, version, encode_raw(cls, value))
        assert fast(None, frame) is None, path  # type: ignore[arg-type]
        with pytest.raises(RequestError, match="serialized as null"):
            decode_request(frame, SUPPORTED)


def _commit(cls: type[Any], group_id: Any, member_id: Any, topic: Any, **nulls: Any) -> Any:
    """An OffsetCommit v8-v9 with one topic of one partition, or with `topics` or the
    topic's `partitions` given (None)."""
    topic_cls = _array_type(cls, "topics")
    partition_cls = _array_type(topic_cls, "partitions")
    partitions = nulls.get("partitions", (blank(partition_cls, committed_offset=5),))
    topics = nulls.get("topics", (blank(topic_cls, name=topic, partitions=partitions),))
    return blank(cls, group_id=group_id, member_id=member_id, topics=topics)


def _array_type(cls: type[Any], name: str) -> type[Any]:
    from kio.serial._introspect import classify_field

    field = next(f for f in cls.__dataclass_fields__.values() if f.name == name)
    return classify_field(field).type_  # type: ignore[no-any-return]


# --- the raw encoder writes valid values exactly as kio does ---------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_raw_encoder_matches_the_codec_on_valid_values(data: st.DataObject) -> None:
    api_key, version = data.draw(st.sampled_from(ADVERTISED), label="api")
    cls = request_schema(api_key, version)
    value = data.draw(entity_values(cls, long=False, fuzz=True), label="value")
    buf = io.BytesIO()
    entity_writer(cls)(buf, value)
    assert encode_raw(cls, value) == buf.getvalue()
