"""The stored form of a coordinator shard's snapshot (cluster/shard_store.py): one LZ4
frame of its batches; a takeover gets the snapshot's batches then the tail's back as one
buffer, also from a snapshot stored before compression (plain batches)."""

from __future__ import annotations

from groupcoord.coordinator.cluster.shard_store import ShardImage, compress_snapshot

BATCHES = [bytes(70), b"\x01" * 70, b"offset commit records" * 50]


def test_a_snapshot_is_stored_compressed_and_restored_with_its_tail() -> None:
    stored = compress_snapshot(BATCHES)
    assert len(stored) < len(b"".join(BATCHES)) // 4
    image = ShardImage(stored, [b"tail-1", b"tail-2"], next_seq=9, snapshot_seq=6)
    assert image.batches() == b"".join(BATCHES) + b"tail-1tail-2"
    assert image.tail_batches == 2


def test_a_plain_or_missing_snapshot() -> None:
    plain = ShardImage(b"".join(BATCHES), [b"tail"], next_seq=3, snapshot_seq=1)
    assert plain.batches() == b"".join(BATCHES) + b"tail"
    assert ShardImage(b"", [b"tail"], next_seq=1, snapshot_seq=-1).batches() == b"tail"
