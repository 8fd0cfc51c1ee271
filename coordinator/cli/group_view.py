"""A group as `groups describe` shows it, from what the server answered: pure, no I/O.

Rows follow kafka-consumer-groups.sh --describe (ConsumerGroupCommand.collectGroupsOffsets):
members that own partitions, most partitions first, each one's partitions by topic and
partition; then the partitions the group has committed offsets for that no member owns,
with "-" for the member. LAG is the log end offset minus the committed offset, "-" when
either is unknown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from groupcoord.coordinator.groups.classic.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
)

TopicPartition = tuple[str, int]

# States Kafka's tool treats as "rebalancing" (ConsumerGroupCommand.shouldPrintMemberState).
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass
class Group:
    group_id: str
    group_type: str  # "classic" or "consumer"
    state: str
    protocol: str  # the classic group's protocol (assignor), or the KIP-848 assignor
    epoch: int | None  # classic: None; consumer: the group epoch
    coordinator: int
    members: list[Member]


@dataclass
class OffsetRow:
    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def from_classic(described: Any, coordinator: int) -> Group:
    """A group from a DescribeGroups answer (members' assignments decoded when the group
    uses the consumer protocol)."""
    members = []
    for m in described.members:
        assignment: list[TopicPartition] = []
        if described.protocol_type == "consumer" and m.member_assignment:
            try:
                decoded = decode_assignment(m.member_assignment)
                assignment = [(t, p) for t, ps in decoded.partitions for p in ps]
            except ConsumerProtocolError:
                assignment = []
        members.append(
            Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment)
        )
    return Group(
        described.group_id,
        "classic",
        described.group_state,
        described.protocol_data,
        None,
        coordinator,
        members,
    )


def from_consumer(described: Any, coordinator: int) -> Group:
    """A group from a ConsumerGroupDescribe answer (KIP-848): members' current assignments."""
    members = [
        Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            [(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions],
        )
        for m in described.members
    ]
    return Group(
        described.group_id,
        "consumer",
        described.group_state,
        described.assignor_name,
        int(described.group_epoch),
        coordinator,
        members,
    )


def offset_rows(
    group: Group,
    committed: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
) -> list[OffsetRow]:
    """The rows of `groups describe` (see the module's docstring)."""

    def row(tp: TopicPartition, member: Member | None) -> OffsetRow:
        offset = committed.get(tp)
        end = log_end.get(tp)
        lag = end - offset if offset is not None and end is not None else None
        return OffsetRow(
            group.group_id,
            tp[0],
            tp[1],
            offset,
            end,
            lag,
            member.member_id if member else None,
            member.host if member else None,
            member.client_id if member else None,
        )

    rows = []
    owned: set[TopicPartition] = set()
    owners = sorted(
        (m for m in group.members if m.assignment), key=lambda m: -len(set(m.assignment))
    )
    for member in owners:
        partitions = sorted(set(member.assignment))
        owned.update(partitions)
        rows.extend(row(tp, member) for tp in partitions)
    rows.extend(row(tp, None) for tp in sorted(set(committed) - owned))
    return rows


def partitions_of(group: Group, committed: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """Every partition `groups describe` needs the log end offset of."""
    owned = {tp for m in group.members for tp in m.assignment}
    return sorted(owned | set(committed))


def describe_json(group: Group, rows: list[OffsetRow]) -> dict[str, Any]:
    return {
        "group": group.group_id,
        "type": group.group_type,
        "state": group.state,
        "protocol": group.protocol,
        "group_epoch": group.epoch,
        "coordinator": group.coordinator,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [{"topic": t, "partition": p} for t, p in sorted(m.assignment)],
            }
            for m in group.members
        ],
        "offsets": [{k: v for k, v in asdict(r).items() if k != "group"} for r in rows],
        "total_lag": sum(r.lag for r in rows if r.lag is not None),
    }
