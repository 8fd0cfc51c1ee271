"""Transactional data in a compaction pass over a data topic's log (Kafka's
CleanedTransactionMetadata and the control-batch rules of LogCleaner.cleanInto).

The caller cleans only below the partition's last stable offset, so every transactional
batch in the cleaned range belongs to a decided transaction, and passes the partition's
aborted-transactions index: (producer id, first offset, marker offset) of each aborted one.
One TxnCleaning lives for one pass and sees the cleaned batches in offset order:

* a transactional data batch inside an aborted range of its producer goes whole (it is
  never the producer's latest batch: its ABORT marker follows it); its records never enter
  the offset map, so they never supersede anything.
* a transactional data batch outside (its transaction committed) is compacted like any
  record: it supersedes older records of its keys and loses the records later ones
  supersede.
* a marker stays while this pass traversed a data batch of its transaction (Kafka's
  "retain the marker until all batches from the transaction have been removed"); once a
  pass finds none, the marker is stamped with a delete horizon (now + delete.retention.ms,
  KIP-534's stamp, as for tombstones) and a later pass past that horizon drops it: the two
  passes of Kafka's rule, so a reader that fetched the transaction's data before it went
  still finds its marker for delete.retention.ms. A marker that is its producer's latest
  batch always stays whole (the producer state rebuilt at start-up keeps its epoch and the
  marker's result).
* an ABORT marker dropped is reported (`removed_abort_markers`), so the caller drops its
  index entry too: an entry without its marker would hide that producer's later records
  from read_committed readers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from groupcoord.protocol.batch_rewrite import rebuild_batch, record_spans
from groupcoord.protocol.batches import DELETE_HORIZON_MASK, BatchHeader
from groupcoord.protocol.control_batches import marker_of

# Java's Long.MAX_VALUE, the largest delete horizon.
_LONG_MAX = 2**63 - 1


class TxnCleaning:
    """`aborted`: (producer id, first offset, marker offset) of the aborted transactions;
    `now_ms`, `retention_ms`: the pass's clock and delete.retention.ms."""

    def __init__(
        self, aborted: Iterable[tuple[int, int, int]], now_ms: int, retention_ms: int
    ) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in aborted:
            ranges.setdefault(producer_id, []).append((first, last))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for producer_id, spans in ranges.items():
            spans.sort()
            self._firsts[producer_id] = [first for first, _ in spans]
            self._lasts[producer_id] = [last for _, last in spans]
        self.now_ms = now_ms
        self.retention_ms = retention_ms
        # Producers whose committed / aborted data this pass traversed since their last
        # marker (Kafka's ongoingCommittedTxns / ongoingAbortedTxns with a batch observed).
        self._committed: set[int] = set()
        self._aborted: set[int] = set()
        # (producer id, offset) of the ABORT markers this pass dropped.
        self.removed_abort_markers: list[tuple[int, int]] = []

    def aborted(self, header: BatchHeader) -> bool:
        """Whether the transactional data batch `header` belongs to an aborted transaction."""
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return False
        i = bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= self._lasts[header.producer_id][i]

    def data_batch(self, header: BatchHeader) -> bool:
        """Traverse a transactional data batch; True when it goes (aborted)."""
        if self.aborted(header):
            self._aborted.add(header.producer_id)
            return True
        self._committed.add(header.producer_id)
        return False

    def marker(self, header: BatchHeader, batch: bytes, producers_last: bool) -> bytes | None:
        """What stays of the control batch `batch`: itself, a stamped copy, or None."""
        decided = marker_of(batch)
        producer_id = header.producer_id
        if decided is None:
            return batch  # unreadable or no marker: nothing is known of it, it stays
        commit = decided[0]
        traversed = self._committed if commit else self._aborted
        if producer_id in traversed:
            traversed.discard(producer_id)
            return batch
        if producers_last:
            return batch
        if header.attributes & DELETE_HORIZON_MASK:
            if self.now_ms < header.base_timestamp:
                return batch
            if not commit:
                self.removed_abort_markers.append((producer_id, header.base_offset))
            return None
        data, records = record_spans(header, batch)
        horizon = min(self.now_ms + self.retention_ms, _LONG_MAX)
        return rebuild_batch(header, batch, data, records, horizon)


__all__ = ["TxnCleaning"]
