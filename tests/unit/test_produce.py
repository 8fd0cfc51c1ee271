"""Produce (coordinator/topics/produce.py) against a failed partition log: that partition is
answered KAFKA_STORAGE_ERROR and the request's other partitions are answered normally. Why:
a LogFailed escaping the handler became a generic error response, and a ProduceResponse has
no top-level error code, so the client got no partition entries at all, while partitions
handled earlier in the request were appended but never acknowledged.

A real Server (group commit, fsync) in this process; only the socket is replaced by a
transport that records what the connection writes.

Record timestamps as Kafka's LogValidator treats them: a LogAppendTime topic stamps each
batch's header with the append time (also what ListOffsets finds), and a CreateTime topic
refuses a batch holding a record outside message.timestamp.before/after.max.ms with
INVALID_TIMESTAMP and record_errors."""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.util import calc_crc32c
from kio.serial import entity_reader

from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.server.connection import Connection
from groupcoord.coordinator.topics import produce as produce_module
from groupcoord.coordinator.topics.list_offsets import lookup
from groupcoord.coordinator.topics.timestamps import TimestampPolicy
from groupcoord.protocol.api import ApiKey, response_schema
from groupcoord.protocol.batches import record_timestamps, set_max_timestamp, split_batches
from groupcoord.protocol.errors import ErrorCode
from tests.support import client_batch, make_batch
from tests.unit.server_support import produce, produce_frame, started_server
from tests.unit.test_connection_limits import RecordingTransport

TOPIC = "produce"
VERSION = 11


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data"):
        srv.topics.create(TOPIC, 2, {})
        yield srv


def _produce_frame(correlation_id: int, partitions: tuple[int, ...]) -> bytes:
    return produce_frame(TOPIC, {p: make_batch(2) for p in partitions}, VERSION, correlation_id)


def _decode_response(written: bytes) -> Any:
    (size,) = struct.unpack_from(">i", written, 0)
    assert len(written) == 4 + size  # exactly one response
    frame = written[4:]
    # Response header v1: correlation id, then empty tagged fields.
    value, _ = entity_reader(response_schema(ApiKey.PRODUCE, VERSION))(frame, 5)
    return value


async def test_a_failed_log_answers_its_partition_and_the_others_normally(
    server: Server,
) -> None:
    topic = server.topics.get(TOPIC)
    assert topic is not None
    # As after a failed fsync: the log refuses writes until it is reopened (LogFailed).
    topic.partitions[0].log.mark_failed(OSError(5, "Input/output error"))
    conn = Connection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)
    conn.data_received(_produce_frame(1, (1, 0)) + _produce_frame(2, (0, 1)))
    await transport.answered(2)
    assert transport.correlation_ids() == [1, 2]
    first_size = 4 + struct.unpack_from(">i", transport.written, 0)[0]
    for written, expected_base in (
        (bytes(transport.written[:first_size]), 0),
        (bytes(transport.written[first_size:]), 2),
    ):
        response = _decode_response(written)
        assert [t.name for t in response.responses] == [TOPIC]
        answers = {p.index: p for p in response.responses[0].partition_responses}
        assert sorted(answers) == [0, 1]  # both partitions answered, in any order asked
        assert answers[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert answers[0].base_offset == -1
        assert answers[1].error_code == ErrorCode.NONE
        assert answers[1].base_offset == expected_base
    # Partition 1 took both appends and made them durable; partition 0 took none.
    assert topic.partitions[1].log.durable_offset == 4
    assert topic.partitions[0].log.next_offset == 0
    conn.close()


# Record timestamps (message.timestamp.type / before.max.ms / after.max.ms) ------------------

HOUR_MS = 3_600_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _batch(timestamps: list[int], compression: int = 0, seq: int = -1, pid: int = -1) -> bytes:
    """A batch whose records carry `timestamps` (aiokafka's builder, as the clients)."""
    return client_batch(
        [(b"k%d" % i, b"v" * 50, ts) for i, ts in enumerate(timestamps)],
        producer_id=pid,
        epoch=0 if pid >= 0 else -1,
        seq=seq,
        compression=compression,
    )


def _ms(value: datetime.datetime | None) -> int:
    return -1 if value is None else round(value.timestamp() * 1000)


def _stored(server: Server, topic: str) -> list[tuple[Any, bytes]]:
    """(header, bytes) of every batch stored in partition 0 of `topic`, CRC-checked."""
    log = server.topics.get(topic).partitions[0].log  # type: ignore[union-attr]
    data = log.read(0, 10**8) if log.next_offset else b""
    headers = split_batches(data)
    out, pos = [], 0
    for header in headers:
        out.append((header, data[pos : pos + header.size_bytes]))
        pos += header.size_bytes
    return out


async def test_log_append_time_stamps_the_batch_and_is_what_lookups_use(server: Server) -> None:
    server.topics.create("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    old = 1_000_000_000_000  # 2001: an explicit, old producer timestamp
    sent = _batch([old, old + 5, old + 9])
    before = _now_ms()
    answer = await produce(server, "lat", sent)
    after = _now_ms()
    assert answer.error_code == ErrorCode.NONE
    append_time = _ms(answer.log_append_time)
    assert before <= append_time <= after
    ((header, stored),) = _stored(server, "lat")
    # The header says LogAppendTime at the append time; the CRC was recomputed (split_batches
    # checked it); the base timestamp and the records are as sent.
    assert header.is_log_append_time and header.attributes & 0x08
    assert header.max_timestamp == append_time
    assert header.base_timestamp == old
    assert stored[61:] == sent[61:]
    assert [ts for _, ts in record_timestamps(stored)] == [append_time] * 3
    # ListOffsets and the time index see the append time, not the producer's timestamps.
    partition = server.topics.get("lat").partitions[0]  # type: ignore[union-attr]
    assert lookup(partition, old) == (append_time, 0)
    assert lookup(partition, append_time) == (append_time, 0)
    assert lookup(partition, append_time + 1) == (-1, -1)
    assert lookup(partition, -3) == (append_time, 0)  # MAX_TIMESTAMP


async def test_log_append_time_leaves_a_compressed_batch_compressed(server: Server) -> None:
    server.topics.create("lat-gzip", 1, {"message.timestamp.type": "LogAppendTime"})
    sent = _batch([5, 6, 7, 8], compression=1)
    answer = await produce(server, "lat-gzip", sent)
    assert answer.error_code == ErrorCode.NONE
    ((header, stored),) = _stored(server, "lat-gzip")
    assert header.compression == 1 and header.is_log_append_time
    assert stored[61:] == sent[61:]  # the gzip payload untouched, only the header rewritten
    assert [ts for _, ts in record_timestamps(stored)] == [_ms(answer.log_append_time)] * 4


async def test_create_time_answers_no_log_append_time_and_stores_as_sent(server: Server) -> None:
    now = _now_ms()
    sent = _batch([now - 10, now])
    answer = await produce(server, TOPIC, sent)
    assert answer.error_code == ErrorCode.NONE
    assert answer.log_append_time is None  # -1 on the wire
    ((header, stored),) = _stored(server, TOPIC)
    assert not header.is_log_append_time
    # Only the base offset and the leader epoch (0, as Kafka's leader stamps it) are the
    # log's; both sit outside the CRC.
    assert (
        header.partition_leader_epoch == 0 and split_batches(sent)[0].partition_leader_epoch == -1
    )
    assert stored[8:12] == sent[8:12] and stored[16:] == sent[16:]


async def test_a_record_too_far_ahead_fails_its_batch_with_invalid_timestamp(
    server: Server,
) -> None:
    server.topics.create("strict", 1, {"message.timestamp.after.max.ms": "1000"})
    now = _now_ms()
    answer = await produce(server, "strict", _batch([now, now + HOUR_MS, now]))
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert answer.base_offset == -1
    assert answer.error_message == (
        "One or more records have been rejected due to invalid timestamp"
    )
    (record_error,) = answer.record_errors
    assert record_error.batch_index == 1
    assert f"Timestamp {now + HOUR_MS} of message with offset 1 is out of range" in (
        record_error.batch_index_error_message
    )
    assert _stored(server, "strict") == []  # nothing appended
    # Within the bound it is accepted.
    assert (await produce(server, "strict", _batch([now]))).error_code == ErrorCode.NONE


async def test_kafka_4_defaults_refuse_an_hour_ahead_and_accept_any_past(server: Server) -> None:
    now = _now_ms()
    assert (await produce(server, TOPIC, _batch([1]))).error_code == ErrorCode.NONE
    assert (await produce(server, TOPIC, _batch([-1, now]))).error_code == ErrorCode.NONE
    late = await produce(server, TOPIC, _batch([now + 2 * HOUR_MS]))
    assert late.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in late.record_errors] == [0]


async def test_a_record_too_old_fails_with_before_max_ms(server: Server) -> None:
    server.topics.create("recent", 1, {"message.timestamp.before.max.ms": "60000"})
    now = _now_ms()
    answer = await produce(server, "recent", _batch([now, now - HOUR_MS, now - 2 * HOUR_MS]))
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1, 2]


async def test_compressed_batches_are_checked_record_by_record(server: Server) -> None:
    server.topics.create("strict-zstd", 1, {"message.timestamp.after.max.ms": "0"})
    now = _now_ms()
    answer = await produce(server, "strict-zstd", _batch([now - 5, now + HOUR_MS], 4))
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1]


async def test_log_append_time_topics_skip_the_bounds(server: Server) -> None:
    server.topics.create(
        "lat-strict",
        1,
        {"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "0"},
    )
    answer = await produce(server, "lat-strict", _batch([_now_ms() + 10 * HOUR_MS]))
    assert answer.error_code == ErrorCode.NONE


async def test_a_batch_the_producer_marked_log_append_time(server: Server) -> None:
    server.topics.create("lat2", 1, {"message.timestamp.type": "LogAppendTime"})
    now = _now_ms()
    marked = bytearray(_batch([now, now]))
    set_max_timestamp(marked, 0, split_batches(marked)[0], True, now)
    # A LogAppendTime topic refuses it, every record (Kafka's LogValidator.validateTimestamp).
    refused = await produce(server, "lat2", bytes(marked))
    assert refused.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in refused.record_errors] == [0, 1]
    # A CreateTime topic takes it as CreateTime (Kafka rewrites the type).
    assert (await produce(server, TOPIC, bytes(marked))).error_code == ErrorCode.NONE
    ((header, _),) = _stored(server, TOPIC)
    assert not header.is_log_append_time and header.max_timestamp == now


class _ProduceTime:
    """The produce handler's `time` module, with a wall clock the test moves."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000


async def test_a_retried_batch_answers_its_original_append_time(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _ProduceTime(_now_ms())
    monkeypatch.setattr(produce_module, "time", clock)
    server.topics.create("lat-idem", 1, {"message.timestamp.type": "LogAppendTime"})
    batch = _batch([1, 2], pid=7, seq=0)
    first = await produce(server, "lat-idem", batch)
    assert _ms(first.log_append_time) == clock.now_ms
    clock.now_ms += 10
    retried = await produce(server, "lat-idem", batch)
    assert (retried.error_code, retried.base_offset) == (ErrorCode.NONE, first.base_offset)
    assert _ms(retried.log_append_time) == _ms(first.log_append_time)
    assert len(_stored(server, "lat-idem")) == 1


@pytest.mark.parametrize("version", [3, 7])
async def test_older_produce_versions_answer_log_append_time(server: Server, version: int) -> None:
    # v3-v7 have log_append_time but no record_errors.
    server.topics.create(f"lat-v{version}", 1, {"message.timestamp.type": "LogAppendTime"})
    answer = await produce(server, f"lat-v{version}", _batch([1]), version=version)
    assert answer.error_code == ErrorCode.NONE and _ms(answer.log_append_time) > 0
    late = await produce(server, TOPIC, _batch([_now_ms() + 2 * HOUR_MS]), version=version)
    assert late.error_code == ErrorCode.INVALID_TIMESTAMP


async def test_undecodable_records_are_invalid_record(server: Server) -> None:
    broken = bytearray(_batch([_now_ms()] * 3))
    broken[-5:] = b"\xff" * 5  # records garbled; the CRC made to match
    struct.pack_into(">I", broken, 17, calc_crc32c(bytes(broken[21:])))
    answer = await produce(server, TOPIC, bytes(broken))
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert _stored(server, TOPIC) == []


def test_bounds_are_compared_in_java_long_arithmetic() -> None:
    now = 1_700_000_000_000
    long_max = 2**63 - 1
    extreme = _batch([-(2**63) + 5])
    (header,) = split_batches(extreme)
    # Kafka computes now - timestamp as a Java long: here it wraps, and the record passes
    # although it is far below now - before.max.ms in exact arithmetic.
    wide = TimestampPolicy(False, long_max - 1, long_max)
    assert wide.record_errors(extreme, 0, header, now)[0] == []
    # The same wrap makes it "after" the clock: an after bound refuses it, as in Kafka.
    errors, _ = TimestampPolicy(False, long_max, 0).record_errors(extreme, 0, header, now)
    assert [index for index, _ in errors] == [0]
    # No timestamp (-1) is never checked, unless the producer marked the batch LogAppendTime.
    unstamped = _batch([-1, now])
    (header,) = split_batches(unstamped)
    narrow = TimestampPolicy(False, 1000, 1000)
    assert narrow.record_errors(unstamped, 0, header, now) == ([], now)
