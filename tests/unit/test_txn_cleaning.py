"""storage/txn_cleaning.py through storage/cleaner.py's `compact` on a real log (one batch
per segment): Kafka's transactional cleaning, pass by pass: aborted records go in the first
pass and their marker stays; the next pass stamps the marker with a delete horizon; a pass
past the horizon drops it (and reports an ABORT marker dropped); committed transactional
records are compacted like any other and never superseded by aborted ones; a producer's
latest batch (a marker) stays; without aborted_txns (the coordinator's logs) nothing
transactional changes. Also ProducerStates.marker_written and PendingOffsets.marker_written,
which a marker job resumed after a crash asks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from groupcoord.coordinator.groups.pending_offsets import PendingOffsets
from groupcoord.coordinator.topics.producers import ProducerStates
from groupcoord.protocol.batches import DELETE_HORIZON_MASK, parse_header, split_batches
from groupcoord.protocol.control_batches import marker_batch, marker_of
from groupcoord.storage import LogConfig, PartitionLog, prepare_compaction
from groupcoord.storage.cleaner import install_compaction
from tests.integration.txn_support import txn_batch
from tests.support import client_batch

NOW = 1_700_000_000_000
RETENTION = 1_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes_max=100))
    yield opened
    opened.close()


def _append(log: PartitionLog, data: bytes | bytearray) -> int:
    buf = bytearray(data)
    return log.append(buf, split_batches(buf))


def plain(log: PartitionLog, key: bytes, value: bytes) -> int:
    return _append(log, client_batch([(key, value, NOW)]))


def txn(log: PartitionLog, pid: int, seq: int, *records: tuple[bytes, bytes]) -> int:
    keys = [k for k, _ in records]
    return _append(log, txn_batch([v for _, v in records], pid, 0, seq, keys=keys))


def marker(log: PartitionLog, pid: int, commit: bool) -> int:
    buf, _ = marker_batch(pid, 0, 0, commit, NOW)
    return _append(log, buf)


def content(log: PartitionLog) -> tuple[list[bytes], list[tuple[int, int, bool, bool]]]:
    """(values of data records, (offset, producer id, commit, stamped) of markers)."""
    data = log.read(log.log_start_offset, 10**8)
    values: list[bytes] = []
    markers: list[tuple[int, int, bool, bool]] = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        batch = data[pos : pos + header.size_bytes]
        pos += header.size_bytes
        if header.is_control:
            found = marker_of(batch)
            assert found is not None
            stamped = bool(header.attributes & DELETE_HORIZON_MASK)
            markers.append((header.base_offset, header.producer_id, found[0], stamped))
        else:
            values.extend(r.value for r in DefaultRecordBatch(batch) if r.value is not None)
    return values, markers


def clean(
    log: PartitionLog, now_ms: int, aborted: Sequence[tuple[int, int, int]] | None
) -> list[tuple[int, int]]:
    """One pass over the log made durable; returns the ABORT markers it dropped."""
    log.flush()
    plan = prepare_compaction(log, now_ms, RETENTION, delete_horizon=True, aborted_txns=aborted)
    removed = plan.removed_abort_markers
    assert install_compaction(log, plan) is not None
    return removed


def test_aborted_records_go_then_their_marker_two_passes_later(log: PartitionLog) -> None:
    plain(log, b"K", b"a1")  # 0
    txn(log, 1, 0, (b"K", b"aborted"))  # 1
    marker(log, 1, False)  # 2
    txn(log, 2, 0, (b"K", b"k2"), (b"J", b"j1"))  # 3-4
    marker(log, 2, True)  # 5
    txn(log, 3, 0, (b"L", b"l1"))  # 6
    marker(log, 3, True)  # 7
    plain(log, b"L", b"l2")  # 8
    txn(log, 1, 1, (b"P", b"p1"))  # 9
    marker(log, 1, True)  # 10
    plain(log, b"Z", b"z")  # 11 (3's latest batch is its marker at 7: it stays)
    plain(log, b"Z", b"active")  # 12: the active segment
    aborted = [(1, 1, 2)]

    assert clean(log, NOW, aborted) == []
    values, markers = content(log)
    # a1 superseded by the committed k2 (the aborted record never supersedes), l1 by l2.
    assert values == [b"k2", b"j1", b"l2", b"p1", b"active"]
    # Pass 1 traversed the aborted batch and l1's batch: their markers stay unstamped.
    assert markers == [
        (2, 1, False, False),
        (5, 2, True, False),
        (7, 3, True, False),
        (10, 1, True, False),
    ]

    assert clean(log, NOW + 10, aborted) == []
    _, markers = content(log)
    # Pass 2: nothing of transactions 1 (aborted) and 3 left: stamped. 3's marker is its
    # producer's latest batch: it stays whole, unstamped.
    assert markers == [
        (2, 1, False, True),
        (5, 2, True, False),
        (7, 3, True, False),
        (10, 1, True, False),
    ]

    assert clean(log, NOW + 10 + RETENTION - 1, aborted) == []  # before the horizon
    assert len(content(log)[1]) == 4
    assert clean(log, NOW + 10 + RETENTION, aborted) == [(1, 2)]
    values, markers = content(log)
    assert values == [b"k2", b"j1", b"l2", b"p1", b"active"]
    assert markers == [(5, 2, True, False), (7, 3, True, False), (10, 1, True, False)]
    # The producer states rebuilt from the compacted log: nothing open, nothing aborted.
    rebuilt = ProducerStates.rebuild(log)
    assert not rebuilt.open_txns and len(rebuilt.aborted) == 0
    assert rebuilt.marker_written(1, 0, True) and not rebuilt.marker_written(1, 0, False)


def test_aborted_records_never_supersede_and_committed_ones_do(log: PartitionLog) -> None:
    plain(log, b"K", b"old")  # 0
    txn(log, 1, 0, (b"K", b"aborted"))  # 1
    marker(log, 1, False)  # 2
    plain(log, b"M", b"m")  # 3
    txn(log, 2, 0, (b"M", b"m-committed"))  # 4
    marker(log, 2, True)  # 5
    plain(log, b"Z", b"active")  # 6
    clean(log, NOW, [(1, 1, 2)])
    assert content(log)[0] == [b"old", b"m-committed", b"active"]


def test_without_aborted_txns_transactional_batches_stay_whole(log: PartitionLog) -> None:
    """The coordinator's rule (its logs are compacted without aborted_txns)."""
    txn(log, 1, 0, (b"K", b"aborted"))  # 0
    marker(log, 1, False)  # 1
    plain(log, b"K", b"k")  # 2
    plain(log, b"Z", b"active")  # 3
    clean(log, NOW, None)
    clean(log, NOW + 10 * RETENTION, None)
    values, markers = content(log)
    assert values == [b"aborted", b"k", b"active"]
    assert markers == [(1, 1, False, False)]


def test_marker_written_knows_the_last_marker_of_a_producer() -> None:
    states = ProducerStates()
    buf, header = marker_batch(5, 3, 0, True, NOW)
    assert not states.marker_written(5, 3, True)  # a producer never seen
    states.record(parse_header(txn_batch([b"v"], 5, 3, 0)), 0)
    assert not states.marker_written(5, 3, True)  # its transaction is open
    states.record_marker(header, 1, 0, True)
    assert states.marker_written(5, 3, True)
    assert not states.marker_written(5, 3, False)  # another result
    assert not states.marker_written(5, 4, True)  # another epoch
    states.record(parse_header(txn_batch([b"w"], 5, 3, 1)), 2)
    assert not states.marker_written(5, 3, True)  # a new transaction opened since
    assert buf


def test_pending_offsets_know_the_last_marker_of_a_producer() -> None:
    """The offsets shard's side of the same question (groups/pending_offsets.py)."""
    pending = PendingOffsets()
    assert not pending.marker_written(5, 3, True)  # a producer never seen
    pending.add(5, 3, "g", "t", 0, b"entry")
    assert not pending.marker_written(5, 3, True)  # its offsets are pending
    pending.end(5, 3, True)
    assert pending.marker_written(5, 3, True)
    assert not pending.marker_written(5, 3, False) and not pending.marker_written(5, 4, True)
    pending.add(5, 3, "g", "t", 0, b"entry")
    assert not pending.marker_written(5, 3, True)  # a new transaction's offsets since
