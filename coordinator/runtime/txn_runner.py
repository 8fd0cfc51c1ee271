"""TxnShardRunner: the runtime of one transaction coordinator shard (a TxnShard over its
log `__transaction_state-N`), the same machinery as the group shards' (log_runner.py: one
writer, group commit, replies once durable, reload after a failed write). Its log holds a
record per transaction transition, far fewer than a group shard's commits: it is replayed
a record at a time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from groupcoord.protocol.batches import DefaultRecordBatch, parse_header
from groupcoord.protocol.records import UnknownRecordType
from groupcoord.protocol.txn_records import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from groupcoord.storage import GroupCommitter, LogConfig

from ..groups.result import Reply
from ..observability.logging import get_logger
from ..transactions.counters import TxnCounters
from ..transactions.shard import TxnShard
from . import clock as clocks
from .log_runner import CoordinatorShardRunner

log = get_logger("groupcoord.transactions")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # transaction.state.log.load.buffer.size


class TxnShardRunner(CoordinatorShardRunner):
    """`producer_ids`, `markers`, `max_timeout_ms`, `counters`: the TxnShard's
    (transactions/shard.py); `counters` outlive the shard's reloads."""

    encode_key = staticmethod(encode_txn_key)
    encode_value = staticmethod(encode_txn_value)
    shard: TxnShard

    def __init__(
        self,
        shard_id: int,
        directory: Path,
        log_config: LogConfig,
        committer: GroupCommitter,
        producer_ids: Callable[[], int],
        markers: Reply,
        max_timeout_ms: int,
        clock_ms: Callable[[], int] | None = None,
        clock: clocks.Clock | None = None,
        counters: TxnCounters | None = None,
    ) -> None:
        self.counters = TxnCounters() if counters is None else counters
        self.producer_ids = producer_ids
        self.markers = markers
        self.max_timeout_ms = max_timeout_ms
        super().__init__(shard_id, directory, log_config, committer, clock_ms, None, clock)

    def _new_shard(self) -> TxnShard:
        return TxnShard(
            self.shard_id, self.producer_ids, self.markers, self.max_timeout_ms, self.counters
        )

    async def _replay_log(self, now_ms: int) -> int:
        replayed = 0
        shard = self.shard

        def feed(chunk: bytes, offset: int) -> int:
            nonlocal replayed
            pos = 0
            while pos < len(chunk):
                header = parse_header(chunk, pos)
                end = pos + header.size_bytes
                if end > len(chunk):
                    break
                if not header.is_control:
                    for record in DefaultRecordBatch(memoryview(chunk)[pos:end]):
                        if record.offset < offset:
                            continue  # below the log start
                        try:
                            key = decode_txn_key(record.key)
                        except UnknownRecordType as e:
                            log.warning("skipping unknown key version", error=str(e))
                            continue
                        value = None if record.value is None else decode_txn_value(record.value)
                        shard.replay(key, value, now_ms)
                        replayed += 1
                offset = header.last_offset + 1
                pos = end
            return offset

        await self._read_log(feed, LOAD_CHUNK_BYTES)
        return replayed
