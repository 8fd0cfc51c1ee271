"""Transactional offsets on a pure GroupShard (Kafka's OffsetMetadataManagerTest cases,
scenarios 67-75 of shared/reference/kafka-transactions.md §8): TxnOffsetCommit fencing in
consumer groups (KIP-1251 per-partition epochs, ILLEGAL_GENERATION rather than
STALE_MEMBER_EPOCH, a mixed request writes nothing), pending offsets invisible until the
COMMIT marker, dropped by ABORT, ordering against plain commits, OffsetFetch require_stable,
expiration, OffsetDelete and DeleteGroups. The log here records each record with its
producer id (or the marker), and the shard rebuilt from it must equal the live one."""

from __future__ import annotations

from typing import Any

from groupcoord.coordinator.groups.offset_messages import (
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)
from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.coordinator.groups.txn_commit import TxnOffsetCommitRequest
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import OffsetCommitKey
from tests.unit.consumer_support import GROUP
from tests.unit.shard_context import Capture
from tests.unit.test_consumer_offsets import RETENTION, OffsetsHarness, commit_request, topic

NONE = ErrorCode.NONE
ILLEGAL = ErrorCode.ILLEGAL_GENERATION
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT
PID = 10


class TxnHarness(OffsetsHarness):
    """OffsetsHarness whose log also records transactional records and markers."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.txlog: list[tuple[Any, ...]] = []

    def apply(self, result: Result) -> Result:
        super().apply(result)
        if not self.append_fails:
            self.txlog.extend(("plain", k, v) for k, v in result.records)
        return result

    def txn(
        self,
        topics: list[OffsetCommitTopic],
        *,
        epoch: int = -1,
        member_id: str = "",
        group_id: str = GROUP,
        pid: int = PID,
        producer_epoch: int = 0,
        instance_id: str | None = None,
    ) -> tuple[list[tuple[str, int, ErrorCode]], list[Any]]:
        request = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id=group_id,
            producer_id=pid,
            producer_epoch=producer_epoch,
            generation_id=epoch,
            member_id=member_id,
            group_instance_id=instance_id,
            version=5,
            topics=topics,
        )
        capture = Capture()
        result = self.shard.txn_commit_offsets(request, capture, self.now)
        for key, value in result.records:
            self.shard.replay_transactional(key, value, pid, producer_epoch, self.now)
            self.txlog.append(("txn", pid, producer_epoch, key, value))
        for reply, answer in result.replies:
            reply(answer)
        errors = [(t.name, p.index, p.error) for t in capture.response.topics for p in t.partitions]
        return errors, result.records

    def marker(self, commit: bool, pid: int = PID, producer_epoch: int = 0) -> None:
        self.shard.replay_end_transaction(pid, producer_epoch, commit)
        self.txlog.append(("marker", pid, producer_epoch, commit))

    def committed(self, group_id: str = GROUP) -> dict[tuple[str, int], int]:
        return {
            (t, p): o.offset
            for t, parts in self.shard.offsets.group_offsets(group_id).items()
            for p, o in parts.items()
        }

    def fetch_stable(self, partitions: dict[str, list[int]], stable: bool = True) -> Any:
        response = self.fetch(
            OffsetFetchRequest(
                group_id=GROUP,
                topics=[OffsetFetchTopic(n, ps) for n, ps in partitions.items()],
                require_stable=stable,
            )
        )
        return {
            (t.name, p.index): (p.offset, p.error) for t in response.topics for p in t.partitions
        }

    def assert_txn_replayed(self) -> None:
        shard = GroupShard(0, self.config, ManualTimer(), SequentialIds(), topics=self.topics)
        for entry in self.txlog:
            if entry[0] == "plain":
                shard.replay(entry[1], entry[2], self.now)
            elif entry[0] == "txn":
                shard.replay_transactional(entry[3], entry[4], entry[1], entry[2], self.now)
            else:
                shard.replay_end_transaction(entry[1], entry[2], entry[3])
        assert shard.offsets.snapshot() == self.shard.offsets.snapshot()
        live, replayed = self.shard.offsets.pending, shard.offsets.pending
        assert replayed.open == live.open
        assert {
            pid: {
                g: {t: {p: e[1] for p, e in ps.items()} for t, ps in ts.items()}
                for g, ts in gs.items()
            }
            for pid, gs in replayed.by_producer.items()
        } == {
            pid: {
                g: {t: {p: e[1] for p, e in ps.items()} for t, ps in ts.items()}
                for g, ts in gs.items()
            }
            for pid, gs in live.by_producer.items()
        }
        assert set(shard.groups) == set(self.shard.groups)


def _h() -> TxnHarness:
    h = TxnHarness()
    h.group_at(10)
    return h


def _all(request_topics: list[OffsetCommitTopic], error: ErrorCode) -> list[Any]:
    return [(t.name, p.index, error) for t in request_topics for p in t.partitions]


# -- KIP-1251 on TxnOffsetCommit (issue 18's "Must be shown" cases) ---------------------------


def test_previous_epoch_for_a_partition_still_owned_is_accepted() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7, 1: 10}})
    topics = [topic("foo", h.foo, 0)]
    errors, records = h.txn(topics, epoch=8, member_id="member")
    assert errors == _all(topics, NONE) and len(records) == 1
    h.assert_txn_replayed()


def test_zombie_commit_for_a_partition_given_away_is_illegal_generation() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7}})
    h.add_member("other", 10, assigned={h.foo: {1: 9}})
    topics = [topic("foo", h.foo, 1)]
    errors, records = h.txn(topics, epoch=8, member_id="member")
    assert errors == _all(topics, ILLEGAL) and records == []
    # Owned, but obtained after the client's epoch: also rejected.
    h2 = _h()
    h2.add_member("member", 10, assigned={h2.foo: {0: 9}})
    topics = [topic("foo", h2.foo, 0)]
    assert h2.txn(topics, epoch=8, member_id="member") == (_all(topics, ILLEGAL), [])


def test_epoch_above_the_broker_epoch_is_rejected_as_illegal_generation() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7}})
    topics = [topic("foo", h.foo, 0)]
    assert h.txn(topics, epoch=11, member_id="member") == (_all(topics, ILLEGAL), [])


def test_mixed_valid_and_invalid_partitions_write_nothing() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7}, h.bar: {0: 10}})
    topics = [topic("foo", h.foo, 0), topic("bar", h.bar, 0), topic("foo", h.foo, 2)]
    before = len(h.txlog)
    assert h.txn(topics, epoch=8, member_id="member") == (_all(topics, ILLEGAL), [])
    assert len(h.txlog) == before and not h.shard.offsets.pending.open


def test_consumer_group_member_checks() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7}})
    topics = [topic("foo", h.foo, 0)]
    # The member's own epoch: accepted for any partition.
    assert h.txn([topic("foo", h.foo, 5)], epoch=10, member_id="member")[0] == [("foo", 5, NONE)]
    assert h.txn(topics, epoch=10, member_id="nobody")[0] == _all(
        topics, ErrorCode.UNKNOWN_MEMBER_ID
    )
    # Epoch -1, no member id, no instance id: accepted even with members (transactional only).
    assert h.txn(topics)[0] == _all(topics, NONE)
    # Epoch -1 with a member id: the member must exist.
    assert h.txn(topics, member_id="nobody")[0] == _all(topics, ErrorCode.UNKNOWN_MEMBER_ID)


def test_classic_protocol_member_of_a_consumer_group() -> None:
    h = _h()
    h.add_member("member", 10, assigned={h.foo: {0: 7}}, classic=True)
    topics = [topic("foo", h.foo, 1)]
    assert h.txn(topics, epoch=8, member_id="member")[0] == _all(topics, ILLEGAL)
    assert h.txn([topic("foo", h.foo, 0)], epoch=8, member_id="member")[0] == [("foo", 0, NONE)]


# -- the classic side (scenarios 67, 69) --------------------------------------------------------


def test_missing_group_and_classic_generation() -> None:
    h = TxnHarness()
    topics = [topic("foo", h.foo, 0)]
    assert h.txn(topics, epoch=10, member_id="m", group_id="gone")[0] == _all(topics, ILLEGAL)
    assert h.txn(topics, group_id="simple")[0] == _all(topics, NONE)
    assert "simple" in h.shard.groups  # created by the replay, as a simple group
    h.assert_txn_replayed()


# -- pending, commit, abort, ordering (scenarios 71-73) ---------------------------------------


def test_pending_until_commit_and_dropped_by_abort() -> None:
    h = _h()
    h.commit(commit_request(epoch=-1, member_id="", topics=[topic("foo", h.foo, 0)]))
    h.txn([topic("foo", h.foo, 0, 1)])
    h.txn([topic("bar", h.bar, 0)], pid=PID + 1)
    # Committed foo-0 = 100; pending foo-0 (101 from the helper: 100 + partition) and foo-1.
    assert h.committed() == {("foo", 0): 100}
    assert h.fetch_stable({"foo": [0, 1], "bar": [0, 1]}) == {
        ("foo", 0): (-1, UNSTABLE),
        ("foo", 1): (-1, UNSTABLE),
        ("bar", 0): (-1, UNSTABLE),
        ("bar", 1): (-1, NONE),
    }
    assert h.fetch_stable({"foo": [0, 1], "bar": [0]}, stable=False) == {
        ("foo", 0): (100, NONE),
        ("foo", 1): (-1, NONE),
        ("bar", 0): (-1, NONE),
    }
    h.assert_txn_replayed()
    h.marker(True, pid=99)  # an unknown producer: nothing
    h.marker(True)
    assert h.committed() == {("foo", 0): 100, ("foo", 1): 101}
    h.marker(False, pid=PID + 1)
    assert h.committed() == {("foo", 0): 100, ("foo", 1): 101}
    assert not h.shard.offsets.pending.open
    assert h.fetch_stable({"bar": [0]}) == {("bar", 0): (-1, NONE)}
    h.assert_txn_replayed()


def test_the_most_recent_record_wins_at_the_commit() -> None:
    h = _h()

    def foo0(offset: int) -> list[OffsetCommitTopic]:
        return [OffsetCommitTopic("foo", [OffsetCommitPartition(0, offset)], h.foo)]

    h.txn(foo0(1))  # pending 1 from PID
    h.commit(commit_request(epoch=-1, member_id="", topics=foo0(2)))  # a plain commit after it
    h.marker(True)
    assert h.committed() == {("foo", 0): 2}  # the plain commit is newer: kept
    h.txn(foo0(3), pid=PID + 1)
    h.commit(commit_request(epoch=-1, member_id="", topics=foo0(4)))
    h.txn(foo0(5), pid=PID + 2)
    h.marker(True, pid=PID + 2)
    h.marker(True, pid=PID + 1)
    assert h.committed() == {("foo", 0): 5}
    h.assert_txn_replayed()
    # Of two producers, the older record loses to the newer one committed before it.
    h2 = _h()
    h2.txn([OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)], h2.foo)])
    h2.txn([OffsetCommitTopic("foo", [OffsetCommitPartition(0, 2)], h2.foo)], pid=PID + 1)
    h2.marker(True, pid=PID + 1)
    h2.marker(True)
    assert h2.committed() == {("foo", 0): 2}
    h2.assert_txn_replayed()


def test_a_fenced_producer_epoch_is_refused() -> None:
    h = _h()
    topics = [topic("foo", h.foo, 0)]
    assert h.txn(topics, producer_epoch=3)[0] == _all(topics, NONE)
    assert h.txn(topics, producer_epoch=2) == (_all(topics, ErrorCode.INVALID_PRODUCER_EPOCH), [])
    assert h.shard.end_transaction_error(PID, 2) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert h.shard.end_transaction_error(PID, 3) is NONE


def test_metadata_too_large_per_partition() -> None:
    h = TxnHarness(offset_metadata_max_bytes=4)
    errors, records = h.txn([topic("foo", h.foo, 0, metadata="12345"), topic("bar", h.bar, 0)])
    assert errors == [("foo", 0, ErrorCode.OFFSET_METADATA_TOO_LARGE), ("bar", 0, NONE)]
    assert [k for k, _ in records] == [OffsetCommitKey(GROUP, "bar", 0)]


# -- deletion and expiration (scenarios 74, 75) -----------------------------------------------


def test_delete_groups_and_offset_delete_tombstone_pending_offsets() -> None:
    h = TxnHarness()
    h.commit(commit_request(epoch=-1, member_id="", group_id="s", topics=[topic("foo", h.foo, 0)]))
    h.txn([topic("foo", h.foo, 0, 1), topic("bar", h.bar, 0)], group_id="s")
    response, result = h.delete_groups(["s"])
    keys = [k for k, _ in result.records]
    assert (
        keys
        == [
            OffsetCommitKey("s", "foo", 0),
            OffsetCommitKey("s", "foo", 1),
            OffsetCommitKey("s", "bar", 0),
        ]
        + keys[3:]
    )
    assert not h.shard.offsets.pending.open
    h.marker(True)  # the tombstones dropped them: the COMMIT brings nothing back
    assert h.committed("s") == {}
    h.assert_txn_replayed()
    h.txn([topic("qux", h.topic_id("qux"), 1)], group_id="s2")
    _, result = h.delete_offsets("s2", {"qux": [1]})
    assert [k for k, _ in result.records] == [OffsetCommitKey("s2", "qux", 1)]
    assert not h.shard.offsets.pending.open


def test_expiration_keeps_pending_partitions_and_their_group() -> None:
    h = TxnHarness()
    h.commit(
        commit_request(epoch=-1, member_id="", group_id="s", topics=[topic("foo", h.foo, 0, 1)])
    )
    h.txn([topic("foo", h.foo, 1)], group_id="s")
    h.txn([topic("bar", h.bar, 0)], group_id="only-pending", pid=PID + 1)
    h.timer.now_ms += RETENTION + 1
    result = h.expire_offsets()
    # foo-0 expires, foo-1's committed offset is kept (pending), no group is deleted.
    assert [k for k, _ in result.records] == [OffsetCommitKey("s", "foo", 0)]
    assert {"s", "only-pending"} <= set(h.shard.groups)
    h.marker(False)
    h.marker(False, pid=PID + 1)
    result = h.expire_offsets()
    assert {k.group for k, _ in result.records} >= {"s", "only-pending"}
    assert not {"s", "only-pending"} & set(h.shard.groups)
    h.assert_txn_replayed()


def test_pending_offsets_of_deleted_topics_are_tombstoned() -> None:
    h = TxnHarness()
    h.txn([topic("foo", h.foo, 0)], group_id="s")
    result = h.topics_deleted({"foo": h.foo})
    assert [k for k, _ in result.records] == [OffsetCommitKey("s", "foo", 0)]
    assert not h.shard.offsets.pending.open
