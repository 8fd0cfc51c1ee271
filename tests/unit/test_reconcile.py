"""Reconciliation (Kafka's CurrentAssignmentBuilder) and KIP-1251 offset-commit fencing, as
pure functions: scenarios S52-S63 (reconciliation, target epoch 11 unless stated) and
S133-S135 (relaxed fencing) of reference/scenarios.md, plus the member record codec."""

from __future__ import annotations

import uuid

import pytest

from groupcoord.coordinator.groups.consumer import (
    UNKNOWN_STATE_MESSAGE,
    ZERO_UUID,
    ConsumerGroupMember,
    FencedMemberEpoch,
    MemberState,
    compute_next_assignment,
    replace_static_member,
    reset_assignment_epochs,
    static_member_temporary_leave,
    subscribed_topic_ids,
    validate_offset_commit,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    RecordType,
    TopicPartitionsWithEpochs,
    decode_value,
    encode_value,
)

T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
T2 = uuid.UUID("00000000-0000-0000-0000-0000000000a2")
FOO = uuid.UUID("00000000-0000-0000-0000-0000000000f0")
BAR = uuid.UUID("00000000-0000-0000-0000-0000000000b0")
NAMES = {T1: "topic1", T2: "topic2", FOO: "foo", BAR: "bar", ZERO_UUID: "unknown"}

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def ep(epoch: int, *partitions: int) -> dict[int, int]:
    """{partition: assignment epoch} for partitions all obtained at ``epoch``."""
    return dict.fromkeys(partitions, epoch)


def mk(
    state: MemberState,
    epoch: int,
    prev: int,
    assigned: dict[uuid.UUID, dict[int, int]],
    pending: dict[uuid.UUID, dict[int, int]] | None = None,
) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "member",
        member_epoch=epoch,
        previous_member_epoch=prev,
        state=state,
        assigned_partitions=assigned,
        partitions_pending_revocation=pending or {},
    )


def free(topic: uuid.UUID, partition: int) -> int:
    return -1


def owned_at(epoch: int):  # type: ignore[no-untyped-def]
    return lambda topic, partition: epoch


# ------------------------------------------------------------------------- S52-S63


def test_s52_stable_to_stable_no_change() -> None:
    member = mk(STABLE, 10, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(member, 11, {T1: {1, 2, 3}, T2: {4, 5, 6}}, None, owned_at(10))
    assert out == mk(STABLE, 11, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    # Already at the target epoch: the very same snapshot comes back (nothing to write).
    assert compute_next_assignment(out, 11, {T1: {1, 2, 3}, T2: {4, 5, 6}}, None, free) is out


def test_s53_stable_to_stable_with_new_free_partitions() -> None:
    member = mk(STABLE, 10, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(member, 11, {T1: {1, 2, 3, 4}, T2: {4, 5, 6, 7}}, None, free)
    assert out == mk(
        STABLE,
        11,
        10,
        {T1: {**ep(10, 1, 2, 3), 4: 11}, T2: {**ep(10, 4, 5, 6), 7: 11}},
    )


def test_s54_stable_to_unrevoked_partitions() -> None:
    member = mk(STABLE, 10, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(member, 11, {T1: {2, 3, 4}, T2: {5, 6, 7}}, None, free)
    assert out == mk(
        UNREVOKED,
        10,
        10,
        {T1: ep(10, 2, 3), T2: ep(10, 5, 6)},
        {T1: ep(10, 1), T2: ep(10, 4)},
    )


def test_s55_stable_to_unreleased_partitions() -> None:
    member = mk(STABLE, 10, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(
        member, 11, {T1: {1, 2, 3, 4}, T2: {4, 5, 6, 7}}, None, owned_at(10)
    )
    assert out == mk(UNRELEASED, 11, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})


def test_s56_revoked_partitions_already_released_by_client() -> None:
    member = mk(STABLE, 10, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(
        member,
        11,
        {T1: {1, 2, 3}, T2: {4, 5, 7}},
        [],  # the client owns nothing any more: t2-6 needs no revocation round
        lambda topic, partition: 10 if topic == T2 else -1,
    )
    assert out == mk(UNRELEASED, 11, 10, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5)})


def test_s57_unrevoked_to_stable_on_ack() -> None:
    member = mk(
        UNREVOKED, 10, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)}, {T1: ep(10, 1), T2: ep(10, 4)}
    )
    out = compute_next_assignment(
        member, 11, {T1: {2, 3}, T2: {5, 6}}, {T1: [2, 3], T2: [5, 6]}, free
    )
    assert out == mk(STABLE, 11, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)})


def test_s58_remains_unrevoked_while_still_owning() -> None:
    member = mk(
        UNREVOKED, 10, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)}, {T1: ep(10, 1), T2: ep(10, 4)}
    )
    target = {T1: {3}, T2: {6}}
    for owned in (
        None,  # TopicPartitions null: counts as still owning
        {T1: [1, 2, 3], T2: [5, 6]},
        [(T1, [2, 3]), (T2, [4, 5, 6])],
    ):
        assert compute_next_assignment(member, 12, target, owned, free) is member


def test_s59_partition_revoked_then_retargeted() -> None:
    member = mk(UNREVOKED, 10, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)}, {T1: ep(10, 4)})

    def partition_epoch(topic: uuid.UUID, partition: int) -> int:
        # t1-2, t1-3 assigned, t1-4 pending revocation, t2-5, t2-6 assigned: all this member's.
        owned = {T1: {2, 3, 4}, T2: {5, 6}}
        return 10 if partition in owned.get(topic, ()) else -1

    out = compute_next_assignment(
        member,
        12,
        {T1: {2, 3, 4}, T2: {5, 6, 7}},
        {T1: [2, 3], T2: [5, 6]},
        partition_epoch,
    )
    # t1-4 was pending revocation by the member itself: not "unreleased", and it comes back
    # as a new assignment (epoch 12).
    assert out == mk(STABLE, 12, 10, {T1: {2: 10, 3: 10, 4: 12}, T2: {5: 10, 6: 10, 7: 12}})


def test_s60_unreleased_to_stable() -> None:
    member = mk(UNRELEASED, 11, 11, {T1: ep(10, 2, 3), T2: {5: 10, 6: 11}})
    # New target epoch, nothing new to assign (testUnreleasedPartitionsToStable).
    out = compute_next_assignment(member, 12, {T1: {2, 3}, T2: {5, 6}}, None, owned_at(10))
    assert out == mk(STABLE, 12, 11, {T1: ep(10, 2, 3), T2: {5: 10, 6: 11}})

    # Same target epoch; the awaited partitions are released now
    # (testUnreleasedPartitionsToStableWithNewPartitions).
    target = {T1: {2, 3, 4}, T2: {5, 6, 7}}
    assert compute_next_assignment(member, 11, target, None, owned_at(10)) is member
    out = compute_next_assignment(member, 11, target, None, free)
    assert out == mk(STABLE, 11, 11, {T1: {2: 10, 3: 10, 4: 11}, T2: {5: 10, 6: 11, 7: 11}})


def test_s61_unknown_state() -> None:
    member = mk(
        MemberState.UNKNOWN, 11, 11, {T1: ep(11, 3), T2: ep(11, 6)}, {T1: ep(11, 2), T2: ep(11, 5)}
    )
    assert MemberState.from_value(42) is MemberState.UNKNOWN
    target = {T1: {3}, T2: {6}}
    for owned in (None, {T1: [3]}, [(T1, [])]):
        with pytest.raises(FencedMemberEpoch) as info:
            compute_next_assignment(member, 12, target, owned, owned_at(10))
        assert info.value.error is ErrorCode.FENCED_MEMBER_EPOCH
        assert info.value.message == UNKNOWN_STATE_MESSAGE
    # Rejoined with nothing owned: reconciled from scratch at the target epoch.
    out = compute_next_assignment(member, 12, target, [], owned_at(11))
    assert out == mk(STABLE, 12, 11, {T1: ep(11, 3), T2: ep(11, 6)})


@pytest.mark.parametrize(
    ("member_epoch", "target_epoch", "expected_epoch", "enforce"),
    [(10, 11, 11, False), (10, 11, 11, True), (10, 10, 10, True)],
)
def test_s62_topic_removed_from_subscription_already_released(
    member_epoch: int, target_epoch: int, expected_epoch: int, enforce: bool
) -> None:
    """testStableToStableWithAssignmentTopicsNoLongerInSubscription."""
    member = mk(STABLE, member_epoch, member_epoch, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(
        member,
        target_epoch,
        {T1: {1, 2, 3}, T2: {4, 5, 6}},  # stale target still has topic1
        {T2: [4, 5, 6]},
        free,
        subscribed_topic_ids={T2},
        enforce_subscription_consistency=enforce,
    )
    assert out == mk(STABLE, expected_epoch, member_epoch, {T2: ep(10, 4, 5, 6)})


@pytest.mark.parametrize(
    ("member_epoch", "target_epoch", "enforce"),
    [(10, 11, False), (10, 11, True), (10, 10, True)],
)
def test_s62_topic_removed_from_subscription_still_owned(
    member_epoch: int, target_epoch: int, enforce: bool
) -> None:
    """testStableToUnrevokedPartitionsWithAssignmentTopicsNoLongerInSubscription."""
    member = mk(STABLE, member_epoch, member_epoch, {T1: ep(10, 1, 2, 3), T2: ep(10, 4, 5, 6)})
    out = compute_next_assignment(
        member,
        target_epoch,
        {T1: {1, 2, 3}, T2: {4, 5, 6}},
        {T1: [1, 2, 3], T2: [4, 5, 6]},
        free,
        subscribed_topic_ids={T2},
        enforce_subscription_consistency=enforce,
    )
    assert out == mk(UNREVOKED, 10, member_epoch, {T2: ep(10, 4, 5, 6)}, {T1: ep(10, 1, 2, 3)})


def test_s62_remains_unrevoked_and_revokes_unsubscribed_topic() -> None:
    """testRemainsInUnrevokedPartitionsWithAssignmentTopicsNoLongerInSubscription."""
    member = mk(
        UNREVOKED, 10, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)}, {T1: ep(10, 1), T2: ep(10, 4)}
    )
    out = compute_next_assignment(
        member,
        12,
        {T1: {1, 3, 4}, T2: {6, 7}},
        {T1: [1, 2, 3], T2: [4, 5, 6]},
        free,
        subscribed_topic_ids={T2},
        enforce_subscription_consistency=True,
    )
    assert out == mk(UNREVOKED, 10, 10, {T2: ep(10, 5, 6)}, {T1: ep(10, 1, 2, 3), T2: ep(10, 4)})


def test_s63_unresolved_regex_matches_nothing() -> None:
    ids = {"foo": FOO, "bar": BAR}.get
    member = ConsumerGroupMember(
        "member",
        member_epoch=10,
        previous_member_epoch=10,
        assigned_partitions={FOO: ep(10, 1, 2, 3), BAR: ep(10, 4, 5, 6)},
    )
    target = {FOO: {1, 2, 3}, BAR: {4, 5, 6}}
    owned = {FOO: [1, 2, 3], BAR: [4, 5, 6]}

    # testSubscribedTopicNameAndUnresolvedRegularExpression: names [foo], regex bar* unresolved.
    subscribed = subscribed_topic_ids(["foo"], "bar*", {}, ids)
    assert subscribed == {FOO}
    out = compute_next_assignment(
        member,
        10,
        target,
        owned,
        free,
        subscribed_topic_ids=subscribed,
        enforce_subscription_consistency=True,
    )
    assert out == mk(UNREVOKED, 10, 10, {FOO: ep(10, 1, 2, 3)}, {BAR: ep(10, 4, 5, 6)})

    # testUnresolvedRegularExpression: no names, regex unresolved -> everything revoked.
    subscribed = subscribed_topic_ids([], "bar*", {}, ids)
    out = compute_next_assignment(
        member,
        10,
        target,
        owned,
        free,
        subscribed_topic_ids=subscribed,
        enforce_subscription_consistency=True,
    )
    assert out == mk(UNREVOKED, 10, 10, {}, {FOO: ep(10, 1, 2, 3), BAR: ep(10, 4, 5, 6)})

    # testSubscribedTopicNameAndResolvedRegularExpression: once resolved, nothing changes.
    subscribed = subscribed_topic_ids(["foo"], "bar*", {"bar*": {"bar"}}, ids)
    assert subscribed == {FOO, BAR}
    out = compute_next_assignment(
        member,
        10,
        target,
        owned,
        free,
        subscribed_topic_ids=subscribed,
        enforce_subscription_consistency=True,
    )
    assert out is member


# --------------------------------------------- further CurrentAssignmentBuilderTest cases


def test_unrevoked_to_unrevoked_on_newer_target_keeps_epoch() -> None:
    """testUnrevokedPartitionsToUnrevokedPartitions at trunk (KIP-1251 builder): once the
    client revoked, a newer target restarts the computation; more revocations keep the
    member at its epoch (4.1-4.2 advanced it to min(epoch + 1, target))."""
    member = mk(
        UNREVOKED, 10, 10, {T1: ep(10, 2, 3), T2: ep(10, 5, 6)}, {T1: ep(10, 1), T2: ep(10, 4)}
    )
    out = compute_next_assignment(member, 12, {T1: {3}, T2: {6}}, {T1: [2, 3], T2: [5, 6]}, free)
    assert out == mk(
        UNREVOKED, 10, 10, {T1: ep(10, 3), T2: ep(10, 6)}, {T1: ep(10, 2), T2: ep(10, 5)}
    )


def test_unrevoked_to_unreleased() -> None:
    """testUnrevokedPartitionsToUnreleasedPartitions."""
    member = mk(UNREVOKED, 11, 10, {T1: ep(11, 2, 3), T2: ep(11, 5, 6)})
    out = compute_next_assignment(
        member, 11, {T1: {2, 3, 4}, T2: {5, 6, 7}}, {T1: [2, 3], T2: [5, 6]}, owned_at(10)
    )
    assert out == mk(UNRELEASED, 11, 11, {T1: ep(11, 2, 3), T2: ep(11, 5, 6)})


def test_unreleased_to_unrevoked() -> None:
    """testUnreleasedPartitionsToUnrevokedPartitions."""
    member = mk(UNRELEASED, 11, 11, {T1: ep(11, 2, 3), T2: ep(11, 5, 6)})
    out = compute_next_assignment(member, 12, {T1: {3}, T2: {6}}, None, owned_at(10))
    assert out == mk(
        UNREVOKED, 11, 11, {T1: ep(11, 3), T2: ep(11, 6)}, {T1: ep(11, 2), T2: ep(11, 5)}
    )


# ------------------------------------------------------------------------- S133-S135


def commit(
    member: ConsumerGroupMember,
    epoch: int,
    partitions: list[tuple[uuid.UUID, int]],
    classic: bool = False,
) -> tuple[ErrorCode, str | None]:
    return validate_offset_commit(member, epoch, partitions, classic, NAMES.__getitem__)


@pytest.mark.parametrize("where", ["assigned", "pending_revocation"])
def test_s133_kip1251_relaxed_fencing(where: str) -> None:
    held = {FOO: ep(7, 0)}
    member = mk(STABLE, 10, 9, held) if where == "assigned" else mk(UNREVOKED, 10, 9, {}, held)
    foo0 = [(FOO, 0)]
    assert commit(member, 11, foo0) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        "Received member epoch 11 is newer than current member epoch 10.",
    )
    assert commit(member, 10, foo0) == (ErrorCode.NONE, None)
    assert commit(member, 7, foo0) == (ErrorCode.NONE, None)
    assert commit(member, 6, foo0) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        "Received member epoch 6 is older than assignment epoch 7 for partition foo-0.",
    )

    # Variant (testConsumerGroupOffsetCommitResolvesTopicId): assignment epoch 5.
    member = mk(STABLE, 10, 9, {FOO: ep(5, 0)})
    assert commit(member, 3, foo0)[0] is ErrorCode.STALE_MEMBER_EPOCH
    assert commit(member, 5, foo0) == (ErrorCode.NONE, None)


def test_s134_kip1251_unassigned_partition() -> None:
    member = mk(UNREVOKED, 10, 9, {FOO: ep(7, 0)}, {FOO: ep(7, 1)})
    not_held = "is not assigned or pending revocation for member."
    assert commit(member, 7, [(BAR, 0)]) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        f"Partition bar-0 {not_held}",
    )
    assert commit(member, 7, [(FOO, 2)]) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        f"Partition foo-2 {not_held}",
    )
    assert commit(member, 7, [(FOO, 0), (FOO, 1)]) == (ErrorCode.NONE, None)
    # One bad partition fails the whole request.
    assert commit(member, 7, [(FOO, 0), (FOO, 2), (FOO, 1)]) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        f"Partition foo-2 {not_held}",
    )
    # An unresolved topic (ZERO id) never matches, even with a held partition number...
    assert commit(member, 9, [(ZERO_UUID, 0)]) == (
        ErrorCode.STALE_MEMBER_EPOCH,
        f"Partition unknown-0 {not_held}",
    )
    # ...but the equal-epoch short-circuit skips the per-partition check entirely.
    assert commit(member, 10, [(ZERO_UUID, 0), (BAR, 3)]) == (ErrorCode.NONE, None)


def test_s135_kip1251_classic_protocol_member() -> None:
    member = mk(UNREVOKED, 10, 9, {FOO: ep(7, 0)}, {FOO: ep(7, 1)})
    assert commit(member, 11, [(FOO, 0)], classic=True) == (
        ErrorCode.ILLEGAL_GENERATION,
        "Received member epoch 11 is newer than current member epoch 10.",
    )
    assert commit(member, 10, [(FOO, 5)], classic=True) == (ErrorCode.NONE, None)
    assert commit(member, 7, [(FOO, 0), (FOO, 1)], classic=True) == (ErrorCode.NONE, None)
    assert commit(member, 6, [(FOO, 0)], classic=True) == (
        ErrorCode.ILLEGAL_GENERATION,
        "Received member epoch 6 is older than assignment epoch 7 for partition foo-0.",
    )
    assert commit(member, 7, [(FOO, 2)], classic=True) == (
        ErrorCode.ILLEGAL_GENERATION,
        "Partition foo-2 is not assigned or pending revocation for member.",
    )


# ------------------------------------------------------------- static leave, records


def test_static_member_temporary_leave_resets_assignment_epochs() -> None:
    member = mk(UNREVOKED, 10, 9, {FOO: ep(7, 0), BAR: ep(10, 3)}, {FOO: ep(7, 1)})
    assert reset_assignment_epochs(member) == mk(
        UNREVOKED, 10, 9, {FOO: ep(0, 0), BAR: ep(0, 3)}, {FOO: ep(0, 1)}
    )
    left = static_member_temporary_leave(member)
    assert left == mk(UNREVOKED, -2, 9, {FOO: ep(0, 0), BAR: ep(0, 3)})
    replacement = replace_static_member(left, "member-2")
    assert replacement.member_id == "member-2"
    assert (replacement.member_epoch, replacement.previous_member_epoch) == (0, 0)
    assert replacement.assigned_partitions == {FOO: ep(0, 0), BAR: ep(0, 3)}
    # Zero assignment epochs: any non-negative stale epoch may commit what it holds.
    rejoined = replacement.update_member_epoch(12)
    assert commit(rejoined, 0, [(FOO, 0), (BAR, 3)]) == (ErrorCode.NONE, None)


def test_record_round_trip_with_assignment_epochs() -> None:
    member = ConsumerGroupMember(
        "m",
        member_epoch=12,
        previous_member_epoch=10,
        state=UNREVOKED,
        assigned_partitions={T2: {6: 10, 5: 12}, T1: {3: 10}},
        partitions_pending_revocation={T1: {1: 9}},
    )
    value = member.to_record()
    assert value == ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=12,
        previous_member_epoch=10,
        state=1,
        assigned_partitions=(
            TopicPartitionsWithEpochs(T1, (3,), (10,)),
            TopicPartitionsWithEpochs(T2, (5, 6), (12, 10)),
        ),
        partitions_pending_revocation=(TopicPartitionsWithEpochs(T1, (1,), (9,)),),
    )
    data = encode_value(value)
    decoded = decode_value(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, data)
    assert isinstance(decoded, ConsumerGroupCurrentMemberAssignmentValue)
    assert ConsumerGroupMember.from_record("m", decoded) == member


@pytest.mark.parametrize(("member_epoch", "default"), [(12, 12), (-2, 0), (0, 0)])
def test_record_without_or_with_mismatched_epochs_defaults(member_epoch: int, default: int) -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=member_epoch,
        previous_member_epoch=10,
        state=0,
        assigned_partitions=(
            TopicPartitionsWithEpochs(T1, (1, 2), None),  # written before KIP-1251
            TopicPartitionsWithEpochs(T2, (4, 5), (7, 8)),
        ),
        partitions_pending_revocation=(TopicPartitionsWithEpochs(T1, (3,), (1, 2)),),  # mismatch
    )
    member = ConsumerGroupMember.from_record("m", value, instance_id="i", rebalance_timeout_ms=5)
    assert member.assigned_partitions == {T1: ep(default, 1, 2), T2: {4: 7, 5: 8}}
    assert member.partitions_pending_revocation == {T1: ep(default, 3)}
    assert (member.instance_id, member.rebalance_timeout_ms) == ("i", 5)
    assert member.state is STABLE


def test_unknown_state_value_loads_as_unknown() -> None:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=3,
        previous_member_epoch=2,
        state=9,
        assigned_partitions=(),
        partitions_pending_revocation=(),
    )
    assert ConsumerGroupMember.from_record("m", value).state is MemberState.UNKNOWN
