"""Assignors the coordinator did not ship are held to the contract of spec.py at the door:
they get read-only views of their inputs (the previous target's per-member mappings are the
group's own), and their result is checked and converted to frozensets before the
coordinator uses it. A result that breaks the contract raises InvalidAssignment, which the
coordinator treats like any failure of the assignor. The built-in assignors are trusted
(checking costs O(partitions) per assignment, as much as computing one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from .spec import (
    GroupSpec,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignorError,
    TopicDescriber,
    TopicId,
)


class InvalidAssignment(PartitionAssignorError):
    """An assignor's result breaks the contract (spec.py, "What goes out")."""


def read_only_spec(
    members: Mapping[str, MemberSubscription],
    previous: Mapping[str, MemberAssignment],
    sizes: Mapping[str, int],
    topics: Collection[TopicId],
) -> GroupSpec:
    """A GroupSpec whose mappings cannot be changed through it (MemberSubscription is
    frozen, partition sets are frozensets)."""
    return GroupSpec(
        MappingProxyType(dict(members)),
        MappingProxyType({m: MappingProxyType(dict(t)) for m, t in previous.items()}),
        None,
        MappingProxyType(dict(sizes)),
        frozenset(topics),
    )


def checked_assignment(
    result: object, group: GroupSpec, topics: TopicDescriber
) -> dict[str, dict[TopicId, frozenset[int]]]:
    """`result` as member id -> topic id -> frozenset, every member of `group` a key (those
    left out get an empty mapping; empty partition sets are dropped). Raises
    InvalidAssignment when a key is not a member, a member gets a topic it does not
    subscribe to or a partition that does not exist, or a partition goes to two members."""
    if not isinstance(result, Mapping):
        raise InvalidAssignment(
            f"returned a {type(result).__name__}, not a mapping member id -> topic id -> partitions"
        )
    members = group.members
    owners: dict[TopicId, dict[int, str]] = {}
    out: dict[str, dict[TopicId, frozenset[int]]] = {}
    for member_id, assigned in result.items():
        subscription = members.get(member_id)
        if subscription is None:
            raise InvalidAssignment(f"assigned partitions to {member_id!r}, not a member")
        if not isinstance(assigned, Mapping):
            raise InvalidAssignment(
                f"gave member {member_id!r} a {type(assigned).__name__}, not a mapping "
                "topic id -> partitions"
            )
        member_out: dict[TopicId, frozenset[int]] = {}
        for topic_id, partitions in assigned.items():
            try:
                partition_set = frozenset(partitions)
            except TypeError:
                raise InvalidAssignment(
                    f"gave member {member_id!r} {partitions!r} for topic {topic_id}, not a "
                    "collection of partitions"
                ) from None
            if not partition_set:
                continue
            if topic_id not in subscription.subscribed_topic_ids:
                raise InvalidAssignment(
                    f"assigned topic {topic_id!r} to member {member_id!r}, which does not "
                    "subscribe to it"
                )
            count = topics.num_partitions(topic_id)
            taken = owners.setdefault(topic_id, {})
            for p in partition_set:
                if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < count:
                    raise InvalidAssignment(
                        f"assigned partition {p!r} of topic {topic_id}, which has {count} "
                        "partitions"
                    )
                holder = taken.setdefault(p, member_id)
                if holder != member_id:
                    raise InvalidAssignment(
                        f"assigned partition {p} of topic {topic_id} to both {holder!r} and "
                        f"{member_id!r}"
                    )
            member_out[topic_id] = partition_set
        out[member_id] = member_out
    for member_id in members:
        if member_id not in out:
            out[member_id] = {}
    return out
