"""Reconciliation and KIP-1251 fencing under random schedules (hypothesis).

A group of members reconciles towards a sequence of random target assignments (each a
valid assignment of a few topics' partitions, epochs increasing), the coordinator side
driven by ``compute_next_assignment`` exactly as the heartbeat handler will drive it:
the partition-epoch map is rebuilt from every member update, as Kafka's ConsumerGroup
does. Clients heartbeat at random (reporting what they own, or nothing: TopicPartitions
null), sometimes lose the response, and revoke / take partitions at random. Checked at
every step:

* no partition is owned by two members, neither on the coordinator (assigned or pending
  revocation) nor on the clients, and a client only owns what its member holds;
* member epochs (coordinator and client side) never go backwards, and every owned
  partition's assignment epoch is <= the member epoch, and >= the epoch at which the
  member's unbroken hold of it began (so a stale commit accepted by the relaxed fencing
  comes from an epoch at which the member held the partition);
* offset-commit validation accepts exactly when client epoch == member epoch, or the
  partition is held with assignment epoch <= client epoch < member epoch; and a client's
  commit of what it owns, at the epoch it knows, is always accepted (no false fencing);
* the member survives its record round trip;
and at the end, once every client heartbeats and acknowledges, every member reaches the
last target (STABLE at its epoch, holding exactly its target partitions).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.consumer import (
    ZERO_UUID,
    ConsumerGroupMember,
    MemberState,
    compute_next_assignment,
    validate_offset_commit,
)
from groupcoord.protocol.errors import ErrorCode

TOPICS = {
    uuid.UUID(int=0xA1): 4,
    uuid.UUID(int=0xA2): 3,
    uuid.UUID(int=0xA3): 2,
}
ALL_PARTITIONS = [(topic, p) for topic, count in TOPICS.items() for p in range(count)]

TP = tuple[uuid.UUID, int]


def by_topic(partitions: set[TP]) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in partitions:
        out.setdefault(topic, set()).add(p)
    return out


def assigned_set(member: ConsumerGroupMember) -> set[TP]:
    return {(t, p) for t, parts in member.assigned_partitions.items() for p in parts}


@dataclass
class Client:
    epoch: int = 0
    owned: set[TP] = field(default_factory=set)
    # The assignment of the latest response; None once a response was lost (the client no
    # longer knows what it may take, so it takes nothing until the next response).
    received: set[TP] | None = None


class Group:
    def __init__(self, member_ids: list[str]) -> None:
        self.members = {m: ConsumerGroupMember(m) for m in member_ids}
        self.clients = {m: Client() for m in member_ids}
        self.owner: dict[TP, str] = {}
        self.partition_epoch: dict[TP, int] = {}
        # (member, partition) -> member epoch at which its current unbroken hold began.
        self.held_since: dict[tuple[str, TP], int] = {}
        self.target_epoch = 0
        self.target: dict[str, set[TP]] = {m: set() for m in member_ids}

    def current_partition_epoch(self, topic: uuid.UUID, partition: int) -> int:
        return self.partition_epoch.get((topic, partition), -1)

    def set_target(self, epoch: int, owners: list[str | None]) -> None:
        self.target_epoch = epoch
        self.target = {m: set() for m in self.members}
        for tp, owner in zip(ALL_PARTITIONS, owners, strict=True):
            if owner is not None:
                self.target[owner].add(tp)

    def update_member(self, member_id: str, new: ConsumerGroupMember) -> None:
        """ConsumerGroup.updateMember's partition-epoch bookkeeping, asserting that no
        partition is ever owned by two members."""
        old = self.members[member_id]
        for tp in old.owned_partitions():
            if self.owner.get(tp) == member_id:
                del self.owner[tp]
                del self.partition_epoch[tp]
        for tp in new.owned_partitions():
            holder = self.owner.get(tp)
            assert holder is None, f"{tp} owned by {holder} and {member_id}"
            self.owner[tp] = member_id
            self.partition_epoch[tp] = new.member_epoch
        self.members[member_id] = new
        before, after = old.owned_partitions(), new.owned_partitions()
        for tp in before - after:
            del self.held_since[(member_id, tp)]
        for tp in after - before:
            self.held_since[(member_id, tp)] = new.member_epoch

    def heartbeat(self, member_id: str, report_owned: bool, lose_response: bool) -> None:
        old = self.members[member_id]
        client = self.clients[member_id]
        reported = (
            {t: sorted(ps) for t, ps in by_topic(client.owned).items()} if report_owned else None
        )
        new = compute_next_assignment(
            old,
            self.target_epoch,
            by_topic(self.target[member_id]),
            reported,
            self.current_partition_epoch,
        )
        assert new.member_epoch >= old.member_epoch
        assert new.previous_member_epoch <= new.member_epoch
        if new is not old:
            self.update_member(member_id, new)
        if lose_response:
            client.received = None
        else:
            assert new.member_epoch >= client.epoch
            client.epoch = new.member_epoch
            client.received = assigned_set(new)

    def revoke(self, member_id: str) -> None:
        """The client releases what its latest assignment no longer has (always safe)."""
        client = self.clients[member_id]
        if client.received is not None:
            client.owned &= client.received

    def reconcile(self, member_id: str) -> None:
        """The client finishes reconciling: revoked released, new partitions taken."""
        client = self.clients[member_id]
        if client.received is not None:
            client.owned = set(client.received)

    def check(self) -> None:
        seen: dict[TP, str] = {}
        for member_id, member in self.members.items():
            assigned = assigned_set(member)
            pending = {
                (t, p) for t, parts in member.partitions_pending_revocation.items() for p in parts
            }
            assert assigned.isdisjoint(pending)
            for tp in assigned | pending:
                assert self.owner.get(tp) == member_id
                epoch = member.assignment_epoch(*tp)
                assert epoch is not None and 0 <= epoch <= member.member_epoch
                # Zombie fencing is sound: a commit accepted at client epoch c >= epoch
                # comes from an epoch at which this member held the partition unbroken.
                assert epoch >= self.held_since[(member_id, tp)]
            client = self.clients[member_id]
            assert client.owned <= assigned | pending, "client owns what its member lost"
            for tp in client.owned:
                assert tp not in seen, f"{tp} used by clients {seen[tp]} and {member_id}"
                seen[tp] = member_id
            assert client.epoch <= member.member_epoch
            # What a client owns it may always commit, at whatever epoch it last heard.
            verdict = validate_offset_commit(member, client.epoch, sorted(client.owned, key=str))
            assert verdict == (ErrorCode.NONE, None), verdict
            assert ConsumerGroupMember.from_record(member_id, member.to_record()) == member

    def check_commit_rule(self, member_id: str, client_epoch: int, classic: bool) -> None:
        member = self.members[member_id]
        stale = ErrorCode.ILLEGAL_GENERATION if classic else ErrorCode.STALE_MEMBER_EPOCH
        for tp in [*ALL_PARTITIONS, (ZERO_UUID, 0)]:
            error, message = validate_offset_commit(member, client_epoch, [tp], classic)
            held = None if tp[0] == ZERO_UUID else member.assignment_epoch(*tp)
            accepted = client_epoch == member.member_epoch or (
                client_epoch < member.member_epoch and held is not None and held <= client_epoch
            )
            assert (error is ErrorCode.NONE) == accepted, (tp, client_epoch, member)
            assert error in (ErrorCode.NONE, stale)
            assert (message is None) == accepted


MEMBER_IDS = ["m0", "m1", "m2", "m3"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_reconciliation_is_safe_and_converges(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 4), label="members")
    member_ids = MEMBER_IDS[:n]
    group = Group(member_ids)
    owner_choice = st.sampled_from([*member_ids, None])

    def new_target() -> None:
        epoch = group.target_epoch + data.draw(st.integers(1, 3), label="epoch step")
        owners = [data.draw(owner_choice) for _ in ALL_PARTITIONS]
        group.set_target(epoch, owners)

    new_target()
    steps = data.draw(st.integers(0, 60), label="steps")
    for _ in range(steps):
        action = data.draw(
            st.sampled_from(["heartbeat", "heartbeat", "revoke", "reconcile", "target", "commit"])
        )
        member_id = data.draw(st.sampled_from(member_ids))
        if action == "heartbeat":
            group.heartbeat(
                member_id,
                report_owned=data.draw(st.integers(0, 4)) > 0,
                lose_response=data.draw(st.integers(0, 5)) == 0,
            )
        elif action == "revoke":
            group.revoke(member_id)
        elif action == "reconcile":
            group.reconcile(member_id)
        elif action == "target":
            new_target()
        else:
            member = group.members[member_id]
            client_epoch = data.draw(st.integers(0, max(member.member_epoch, 0) + 1))
            group.check_commit_rule(member_id, client_epoch, data.draw(st.booleans()))
        group.check()

    # Everyone heartbeats and acknowledges: all members reach the last target.
    for _ in range(2 * n + 4):
        for member_id in member_ids:
            group.heartbeat(member_id, report_owned=True, lose_response=False)
            group.reconcile(member_id)
            group.check()
    for member_id in member_ids:
        member = group.members[member_id]
        assert member.state is MemberState.STABLE
        assert member.member_epoch == group.target_epoch
        assert member.is_reconciled_to(group.target_epoch)
        assert assigned_set(member) == group.target[member_id]
        assert not member.partitions_pending_revocation
        assert group.clients[member_id].owned == group.target[member_id]
        assert group.clients[member_id].epoch == group.target_epoch
