"""Server-side partition assignors of the consumer rebalance protocol (KIP-848): pure,
deterministic functions of a GroupSpec and the subscribed topics. `uniform` (the default) and
`range`, with Kafka's semantics, and the public interface for assignors of your own, installed
as entry points of the group `groupcoord.assignors`: see spec.py for the contract."""

from .checked import InvalidAssignment, checked_assignment, read_only_spec
from .range import RANGE_ASSIGNOR_NAME, RangeAssignor, range_order
from .spec import (
    Assignment,
    GroupSpec,
    LazyAssignment,
    MemberAssignment,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    TopicMetadata,
    subscription_type_of,
)
from .uniform import UNIFORM_ASSIGNOR_NAME, UniformAssignor

DEFAULT_ASSIGNORS: tuple[PartitionAssignor, ...] = (UniformAssignor(), RangeAssignor())
"""Kafka's `group.consumer.assignors` default: [uniform, range]; the first is the default."""

BUILTIN_ASSIGNOR_NAMES = frozenset(a.name for a in DEFAULT_ASSIGNORS)
"""Reserved: an assignor of another name is one the coordinator did not ship (a plugin), which
always runs off the loop, on read-only inputs, its result checked (checked.py)."""

ENTRY_POINT_GROUP = "groupcoord.assignors"
"""The entry-point group where distributions declare assignors (name -> class or factory)."""

__all__ = [
    "BUILTIN_ASSIGNOR_NAMES",
    "DEFAULT_ASSIGNORS",
    "ENTRY_POINT_GROUP",
    "RANGE_ASSIGNOR_NAME",
    "UNIFORM_ASSIGNOR_NAME",
    "Assignment",
    "GroupSpec",
    "InvalidAssignment",
    "LazyAssignment",
    "MemberAssignment",
    "MemberSubscription",
    "PartitionAssignor",
    "PartitionAssignorError",
    "RangeAssignor",
    "SubscriptionType",
    "TopicDescriber",
    "TopicMetadata",
    "UniformAssignor",
    "checked_assignment",
    "range_order",
    "read_only_spec",
    "subscription_type_of",
]
