"""Property tests of the partition log: whatever sequence of appends, rolls, reopens
(clean or after a crash) and torn tail files happens, the log reads back exactly the
surviving batches, in order, with consecutive offsets, and its end offset is the last
record's offset + 1."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.protocol.batches import parse_header, split_batches
from groupcoord.storage import LogConfig, OffsetOutOfRange, PartitionLog


def build_batch(timestamps: list[int], value_size: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**7,
    )
    for delta, ts in enumerate(timestamps):
        builder.append(delta, timestamp=ts, key=b"k", value=b"v" * value_size, headers=[])
    return bytes(builder.build())


@dataclass
class Model:
    """What the log must contain: the original batches and each record's timestamp."""

    batches: list[bytes]
    timestamps: list[list[int]]

    @property
    def record_count(self) -> int:
        return sum(len(ts) for ts in self.timestamps)


records = st.lists(st.integers(0, 2_000), min_size=1, max_size=5)
batch_specs = st.lists(st.tuples(records, st.integers(0, 300)), min_size=1, max_size=3)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), batch_specs),
        st.tuples(st.just("flush")),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("crash")),
        st.tuples(st.just("tear"), st.integers(0, 2**32), st.binary(max_size=40)),
    ),
    min_size=1,
    max_size=25,
)


def file_batch_sizes(data: bytes) -> list[int]:
    sizes = []
    pos = 0
    while pos < len(data):
        size = parse_header(data, pos).size_bytes
        sizes.append(size)
        pos += size
    return sizes


def tear_tail(directory: Path, model: Model, cut_seed: int, garbage: bytes) -> None:
    """Cut the last segment file at a random byte and append garbage, updating the model
    to the batches that are still whole."""
    tail = max(p for p in directory.iterdir() if p.name.endswith(".log"))
    data = tail.read_bytes()
    sizes = file_batch_sizes(data)
    cut = cut_seed % (len(data) + 1)
    surviving = 0
    end = 0
    for size in sizes:
        if end + size > cut:
            break
        end += size
        surviving += 1
    dropped = len(sizes) - surviving
    if dropped:
        del model.batches[-dropped:]
        del model.timestamps[-dropped:]
    tail.write_bytes(data[:cut] + garbage)


def check(log: PartitionLog, model: Model) -> None:
    data = log.read(log.log_start_offset, 1 << 30)
    pos = 0
    expected_offset = 0
    for original in model.batches:
        header = parse_header(data, pos)
        assert header.base_offset == expected_offset
        # The log stamps the base offset and the leader epoch (0, as Kafka's leader), both
        # outside the CRC; the rest is stored as sent.
        assert header.partition_leader_epoch == 0
        assert data[pos + 8 : pos + 12] == original[8:12]
        assert data[pos + 16 : pos + header.size_bytes] == original[16:]
        expected_offset = header.last_offset + 1
        pos += header.size_bytes
    assert pos == len(data)
    # The high watermark is the last record's offset + 1, not the last base offset + 1.
    assert log.next_offset == expected_offset == model.record_count
    assert [h.base_offset for h in log.batch_headers()] == [
        h.base_offset for h in split_batches(data)
    ]

    flat = [ts for batch in model.timestamps for ts in batch]
    for offset in range(0, len(flat), 3):
        header = parse_header(log.read(offset, 1))
        assert header.base_offset <= offset <= header.last_offset
    assert log.read(len(flat), 100) == b""
    try:
        log.read(len(flat) + 1, 100)
    except OffsetOutOfRange:
        pass
    else:  # pragma: no cover
        raise AssertionError("read beyond the end did not raise")
    for target in (0, 500, 1_000, 1_500, 2_000, 2_001):
        expected = next(((o, t) for o, t in enumerate(flat) if t >= target), None)
        assert log.offset_for_timestamp(target) == expected
    if flat:
        best = max(flat)
        assert log.max_timestamp() == (flat.index(best), best)
    else:
        assert log.max_timestamp() is None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    segment_bytes_max=st.integers(150, 2_000),
    index_interval_bytes=st.integers(0, 500),
    ops=operations,
)
def test_log_survives_appends_reopens_and_torn_tails(
    segment_bytes_max: int, index_interval_bytes: int, ops: list[tuple[object, ...]]
) -> None:
    config = LogConfig(
        segment_bytes_max=segment_bytes_max, index_interval_bytes=index_interval_bytes
    )
    model = Model([], [])
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "partition"
        log = PartitionLog.open(directory, config)
        try:
            for op in ops:
                kind = op[0]
                if kind == "append":
                    specs = op[1]
                    assert isinstance(specs, list)
                    originals = [build_batch(ts, size) for ts, size in specs]
                    buf = bytearray(b"".join(originals))
                    base = log.append(buf, split_batches(buf))
                    assert base == model.record_count
                    model.batches.extend(originals)
                    model.timestamps.extend(ts for ts, _ in specs)
                elif kind == "flush":
                    assert log.flush() == log.next_offset == log.durable_offset
                elif kind == "reopen":
                    log.close()
                    log = PartitionLog.open(directory, config)
                    assert log.recovered_truncated_bytes == 0
                elif kind == "crash":
                    # No close(): index files of the active segment are never written.
                    log._close_all()
                    log = PartitionLog.open(directory, config)
                    assert log.recovered_truncated_bytes == 0
                else:
                    log._close_all()
                    cut_seed, garbage = op[1], op[2]
                    assert isinstance(cut_seed, int) and isinstance(garbage, bytes)
                    tear_tail(directory, model, cut_seed, garbage)
                    log = PartitionLog.open(directory, config)
                check(log, model)
            # Appends keep working after whatever happened.
            extra = build_batch([7, 8], 10)
            buf = bytearray(extra)
            assert log.append(buf, split_batches(buf)) == model.record_count
            model.batches.append(extra)
            model.timestamps.append([7, 8])
            check(log, model)
        finally:
            log.close()
