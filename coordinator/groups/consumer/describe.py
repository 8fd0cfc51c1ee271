"""The consumer groups as ConsumerGroupDescribe, ListGroups and DeleteGroups see them: the
described group (members, assignments and targets by topic name), the listed groups, and
the tombstones that delete a group. A mixin of ConsumerGroupManager (manager.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)

from ..classic.group import GroupState
from ..classic.messages import ListedGroup
from ..result import Record, Reply, Result
from .group import ConsumerGroup
from .messages import DescribedConsumerGroup, DescribedConsumerMember, DescribedTopicPartitions
from .migration import CONSUMER_PROTOCOL_TYPE
from .targets import TargetAssignment

CONSUMER_GROUP_TYPE = "consumer"


class GroupDescriptions(TargetAssignment):
    """Mixin: describe, list, and the tombstones of a deletion."""

    def describe_groups(self, group_ids: list[str], reply: Reply) -> Result:
        """ConsumerGroupDescribe of this shard's `group_ids`: replies with their
        DescribedConsumerGroup list (`describe`, in that order). Emits nothing; as a Result
        without records it is a read after pending writes: the runtime releases it only
        once the writes before it are durable (Kafka reads at the last committed offset,
        D.2), so it never shows state that a failed write takes back (the reply then
        fails with them)."""
        result = Result()
        result.reply(reply, [self.describe(group_id) for group_id in group_ids])
        return result

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        """ConsumerGroupDescribe for one group: GROUP_ID_NOT_FOUND for a missing group or a
        classic one ("is not a consumer group", as Kafka)."""
        group = self.groups.get(group_id)
        if group is None:
            classic = self.shard.classic_group(group_id)
            message = (
                f"Group {group_id} is not a consumer group."
                if classic is not None and classic.state is not GroupState.DEAD
                else f"Group {group_id} not found."
            )
            return DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message)
        members = []
        for meta, member in group.iter_members():
            members.append(
                DescribedConsumerMember(
                    member_id=member.member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    member_epoch=member.member_epoch,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=list(meta.subscribed_topic_names),
                    # Kafka keeps "" for a member that never sent a regex (null keeps the
                    # previous value, and a member starts with "").
                    subscribed_topic_regex=meta.subscribed_topic_regex or "",
                    assignment=self._described(
                        _merge(member.assigned_partitions, member.partitions_pending_revocation)
                    ),
                    target_assignment=self._described(group.target.get(member.member_id, {})),
                    member_type=0 if meta.classic_member_metadata is not None else 1,
                )
            )
        return DescribedConsumerGroup(
            group_id=group_id,
            group_state=group.state().value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor() or self._default_assignor(group.group_id),
            members=members,
        )

    def _described(
        self, partitions: Mapping[uuid.UUID, Iterable[int]]
    ) -> list[DescribedTopicPartitions]:
        image = self.shard.topics
        out = []
        for topic_id in sorted(partitions, key=lambda t: t.int):
            name = image.topic_name(topic_id)
            if name is not None:  # partitions of unknown topics are left out, as Kafka
                out.append(DescribedTopicPartitions(topic_id, name, sorted(partitions[topic_id])))
        return out

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> list[ListedGroup]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and CONSUMER_GROUP_TYPE not in types:
            return []
        out = []
        for group in self.groups.values():
            state = group.state().value
            if not states or state.lower() in states:
                out.append(
                    ListedGroup(group.group_id, CONSUMER_PROTOCOL_TYPE, state, CONSUMER_GROUP_TYPE)
                )
        return out

    def deletion_records(self, group: ConsumerGroup) -> list[Record]:
        """Every tombstone that deletes the group, in Kafka's order (D.6)."""
        gid = group.group_id
        records: list[Record] = []
        records.extend(
            (ConsumerGroupCurrentMemberAssignmentKey(gid, m), None) for m in group.members
        )
        records.extend((ConsumerGroupTargetAssignmentMemberKey(gid, m), None) for m in group.target)
        records.append((ConsumerGroupTargetAssignmentMetadataKey(gid), None))
        records.extend((ConsumerGroupMemberMetadataKey(gid, m), None) for m in group.metadata)
        records.extend(
            (ConsumerGroupRegularExpressionKey(gid, r), None) for r in group.resolved_regexes
        )
        if group.has_legacy_partition_metadata:
            records.append((ConsumerGroupPartitionMetadataKey(gid), None))
        records.append((ConsumerGroupMetadataKey(gid), None))
        return records


def _merge(*sources: Mapping[uuid.UUID, Mapping[int, int]]) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for source in sources:
        for topic, parts in source.items():
            out.setdefault(topic, set()).update(parts)
    return out
