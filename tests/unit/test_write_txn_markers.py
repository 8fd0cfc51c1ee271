"""WriteTxnMarkers (coordinator/server/write_txn_markers_api.py) in-process: data partitions
through topics/txn_markers.py, `__consumer_offsets` partitions through the group
coordinator's complete_transaction (a fake here: the txn-offsets branch implements it),
whose retriable shard errors become NOT_LEADER_OR_FOLLOWER as in Kafka's KafkaApis; and
write_txn_marker, the transaction coordinator's door, returning once the marker is durable."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from groupcoord.coordinator.server.write_txn_markers_api import handle_write_txn_markers
from groupcoord.coordinator.topics.txn_markers import write_txn_marker
from groupcoord.protocol.errors import ErrorCode
from tests.rawclient import request_class
from tests.unit.handler_contexts import NoGroupCoordinator, handler_context, settings


class FakeOffsets(NoGroupCoordinator):
    def __init__(self, answers: dict[int, ErrorCode]) -> None:
        self.answers = answers
        self.calls: list[tuple[int, int, int, bool]] = []

    async def _answer(self, partition: int) -> ErrorCode:
        return self.answers[partition]

    def complete_transaction(
        self,
        offsets_partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        transaction_version: int = 0,
    ) -> Any:
        self.calls.append((offsets_partition, producer_id, producer_epoch, commit))
        return self._answer(offsets_partition)


class _Request:
    def __init__(self, body: Any, version: int) -> None:
        self.body = body
        self.api_version = version
        self.api_key = 27


def _markers(version: int, *markers: tuple[int, int, bool, dict[str, list[int]]]) -> _Request:
    m = sys.modules[request_class(27, version).__module__]
    return _Request(
        m.WriteTxnMarkersRequest(
            markers=tuple(
                m.WritableTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=tuple(
                        m.WritableTxnMarkerTopic(name=name, partition_indexes=tuple(ps))
                        for name, ps in topics.items()
                    ),
                    coordinator_epoch=0,
                )
                for pid, epoch, commit, topics in markers
            )
        ),
        version,
    )


async def test_markers_for_data_and_offsets_partitions(tmp_path: Path) -> None:
    groups = FakeOffsets({0: ErrorCode.NONE, 1: ErrorCode.NOT_COORDINATOR})
    ctx = handler_context(settings(tmp_path), groups)
    try:
        ctx.topics.create("t", 2, {})
        request = _markers(
            1,
            (5, 0, True, {"t": [0, 1, 7], "__consumer_offsets": [0, 1]}),
            (6, 2, False, {"t": [1]}),
        )
        response = await handle_write_txn_markers(ctx, request)  # type: ignore[arg-type]
        got = {
            (r.producer_id, t.name, p.partition_index): p.error_code
            for r in response.markers
            for t in r.topics
            for p in t.partitions
        }
        assert got == {
            (5, "t", 0): ErrorCode.NONE,
            (5, "t", 1): ErrorCode.NONE,
            (5, "t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (5, "__consumer_offsets", 0): ErrorCode.NONE,
            (5, "__consumer_offsets", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER,
            (6, "t", 1): ErrorCode.NONE,
        }
        assert groups.calls == [(0, 5, 0, True), (1, 5, 0, True)]
        # Durable when answered: the markers are below the high watermark.
        partition = ctx.topics.partition("t", 1)
        assert partition.high_watermark == partition.log.next_offset == 2
        assert partition.producers.producers[6].epoch == 2
    finally:
        ctx.topics.close()


async def test_write_txn_marker_returns_once_durable(tmp_path: Path) -> None:
    ctx = handler_context(settings(tmp_path), NoGroupCoordinator())
    try:
        ctx.topics.create("t", 1, {})
        partition = ctx.topics.partition("t", 0)
        assert await write_txn_marker(ctx, "t", 0, 9, 3, 1, False) == ErrorCode.NONE
        assert partition.high_watermark == 1
        assert await write_txn_marker(ctx, "t", 0, 9, 2, 1, True) == (
            ErrorCode.INVALID_PRODUCER_EPOCH
        )
        assert await write_txn_marker(ctx, "t", 0, 9, 3, 0, True) == (
            ErrorCode.TRANSACTION_COORDINATOR_FENCED
        )
        assert await write_txn_marker(ctx, "nope", 0, 9, 3, 1, True) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert partition.log.next_offset == 1  # refused markers append nothing
    finally:
        ctx.topics.close()
