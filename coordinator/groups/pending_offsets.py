"""Pending transactional offsets of one shard (Kafka's pendingTransactionalOffsets and
openTransactionsByGroup in OffsetMetadataManager).

Theory of operation. A TxnOffsetCommit writes ordinary OffsetCommit records in a
transactional batch carrying the producer id and epoch. Replaying such a record does not
touch the committed offsets: the entry waits here, per producer, until the transaction's
marker (a control batch in the same log) commits it into the committed offsets or aborts
it. Until then OffsetFetch does not see it (and answers UNSTABLE_OFFSET_COMMIT with
require_stable), expiration keeps the partition and the group.

Ordering against plain commits (Kafka's rule): a COMMIT marker makes a pending offset the
committed one only if its record is newer in the log than the record of the committed
offset. Kafka compares record offsets; here every pending entry carries its replay sequence
number, and an entry that a newer record already beat is marked superseded (-1):

* replaying a plain commit of a partition supersedes every pending entry of it (they are
  all older);
* a COMMIT that makes an entry committed supersedes the other producers' entries of that
  partition that are older than it;
* a tombstone of a partition drops its pending entries of every producer, as Kafka's replay
  does, so a later COMMIT brings nothing back.

Replay order is log order, live and at load, so the sequence numbers order the entries as
their record offsets do. The state after replaying the log (or the compacted log: the
cleaner keeps transactional and control batches whole, storage/cleaner.py) equals the live
state.

Each producer's last epoch seen here is kept too, so that a TxnOffsetCommit or a marker of
an older epoch (a fenced producer) is refused with INVALID_PRODUCER_EPOCH, as the log layer
of Kafka's __consumer_offsets partition refuses it; and its last marker (epoch, result)
while no record of it came after, so that a marker job resumed after a crash does not write
a marker this shard holds already (`marker_written`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

Entry = bytes
_V = TypeVar("_V")
_SUPERSEDED = -1
# The largest producer epoch (an exhausted epoch stays there).
EPOCH_MAX = 32767


class PendingOffsets:
    __slots__ = ("by_producer", "open", "epochs", "last_markers", "_seq")

    def __init__(self) -> None:
        # producer id -> group -> topic -> partition -> [sequence, packed entry]
        self.by_producer: dict[int, dict[str, dict[str, dict[int, list[int | Entry]]]]] = {}
        # group -> topic -> partition -> producer ids with a pending entry there. Empty
        # inner containers are removed, so `open` is falsy when nothing is pending: the
        # plain commit's replay checks only that.
        self.open: dict[str, dict[str, dict[int, set[int]]]] = {}
        # producer id -> the last epoch of its records or markers in this shard
        self.epochs: dict[int, int] = {}
        # producer id -> (epoch, commit) of its last marker, while no record followed it
        self.last_markers: dict[int, tuple[int, bool]] = {}
        self._seq = 0

    # -- reads -----------------------------------------------------------------------------

    def has(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether some transaction holds a pending offset of this partition."""
        topics = self.open.get(group_id)
        if topics is None:
            return False
        parts = topics.get(topic)
        return parts is not None and partition in parts

    def has_group(self, group_id: str) -> bool:
        """Whether some transaction holds a pending offset of the group."""
        return group_id in self.open

    def partitions(self, group_id: str) -> Iterator[tuple[str, int]]:
        """(topic, partition) of every pending offset of the group."""
        for topic, parts in self.open.get(group_id, {}).items():
            for partition in parts:
                yield topic, partition

    def marker_written(self, producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """Whether the producer's last marker here is this one, with nothing pending since."""
        return producer_id not in self.by_producer and self.last_markers.get(producer_id) == (
            producer_epoch,
            commit,
        )

    def fenced(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether `producer_epoch` is older than the producer's last one seen here."""
        return producer_epoch < self.epochs.get(producer_id, producer_epoch)

    def ongoing(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open here at `producer_epoch` (some
        offset of it pending): Kafka's hasOngoingTransaction."""
        return producer_id in self.by_producer and self.epochs.get(producer_id) == producer_epoch

    def marker_fenced(
        self, producer_id: int, producer_epoch: int, transaction_version: int
    ) -> bool:
        """Whether a marker at `producer_epoch` is stale (Kafka's checkProducerEpoch of a
        marker): older than the producer's last epoch here; for transaction version 2,
        whose markers carry the bumped epoch, also equal to it while the producer has a
        transaction open here (equal with none open is a retry, KAFKA-19999; an exhausted
        epoch stays at its maximum)."""
        last = self.epochs.get(producer_id, producer_epoch)
        if (
            transaction_version >= 2
            and producer_epoch == last
            and producer_id in self.by_producer
            and producer_epoch != EPOCH_MAX
        ):
            return True
        return producer_epoch < last

    def pending_count(self) -> int:
        return sum(
            len(parts)
            for groups in self.by_producer.values()
            for topics in groups.values()
            for parts in topics.values()
        )

    def entry(self, producer_id: int, group_id: str, topic: str, partition: int) -> Entry | None:
        """The producer's pending entry of a partition (tests, tooling)."""
        found = self.by_producer.get(producer_id, {}).get(group_id, {}).get(topic, {})
        pending = found.get(partition)
        return None if pending is None else pending[1]  # type: ignore[return-value]

    # -- replay ----------------------------------------------------------------------------

    def add(
        self,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        topic: str,
        partition: int,
        entry: Entry,
    ) -> None:
        """A transactional OffsetCommit record: the producer's pending offset."""
        self._note_epoch(producer_id, producer_epoch)
        self.last_markers.pop(producer_id, None)
        self._seq += 1
        groups = self.by_producer.setdefault(producer_id, {})
        groups.setdefault(group_id, {}).setdefault(topic, {})[partition] = [self._seq, entry]
        self.open.setdefault(group_id, {}).setdefault(topic, {}).setdefault(partition, set()).add(
            producer_id
        )

    def supersede(self, group_id: str, topic: str, partition: int) -> None:
        """A plain commit of the partition was replayed: every pending entry is older."""
        producers = self.open.get(group_id, {}).get(topic, {}).get(partition)
        if producers is None:
            return
        for producer_id in producers:
            self.by_producer[producer_id][group_id][topic][partition][0] = _SUPERSEDED

    def drop(self, group_id: str, topic: str, partition: int) -> None:
        """A tombstone of the partition was replayed: its pending entries go."""
        topics = self.open.get(group_id)
        if topics is None:
            return
        parts = topics.get(topic)
        if parts is None:
            return
        producers = parts.pop(partition, None)
        if producers is None:
            return
        _prune(self.open, group_id, topic)
        for producer_id in producers:
            groups = self.by_producer[producer_id]
            del groups[group_id][topic][partition]
            _prune(groups, group_id, topic)
            if not groups:
                del self.by_producer[producer_id]

    def end(
        self, producer_id: int, producer_epoch: int, commit: bool
    ) -> list[tuple[str, str, int, Entry]]:
        """A marker of the producer's transaction: its pending entries leave; returns those
        a COMMIT makes the committed offsets, (group, topic, partition, entry), which the
        caller stores. A marker for a producer with nothing pending changes nothing else."""
        self._note_epoch(producer_id, producer_epoch)
        self.last_markers[producer_id] = (producer_epoch, commit)
        groups = self.by_producer.pop(producer_id, None)
        if groups is None:
            return []
        committed: list[tuple[str, str, int, Entry]] = []
        for group_id, topics in groups.items():
            open_topics = self.open[group_id]
            for topic, parts in topics.items():
                open_parts = open_topics[topic]
                for partition, (seq, entry) in parts.items():
                    producers = open_parts[partition]
                    producers.discard(producer_id)
                    if not commit or seq == _SUPERSEDED:
                        pass
                    else:
                        committed.append((group_id, topic, partition, entry))  # type: ignore[arg-type]
                        # The committed offset's record is now this one: older entries of
                        # other producers lose to it, as Kafka's record offset comparison.
                        for other in producers:
                            pending = self.by_producer[other][group_id][topic][partition]
                            if pending[0] < seq:  # type: ignore[operator]
                                pending[0] = _SUPERSEDED
                    if not producers:
                        del open_parts[partition]
                _prune(self.open, group_id, topic)
        return committed

    def _note_epoch(self, producer_id: int, producer_epoch: int) -> None:
        if producer_epoch > self.epochs.get(producer_id, -1):
            self.epochs[producer_id] = producer_epoch


def _prune(tree: dict[str, dict[str, dict[int, _V]]], group_id: str, topic: str) -> None:
    """Remove the topic's dict if empty, then the group's."""
    topics = tree.get(group_id)
    if topics is None:
        return
    parts = topics.get(topic)
    if parts is not None and not parts:
        del topics[topic]
    if not topics:
        del tree[group_id]
