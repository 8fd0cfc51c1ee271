"""Server-side partition assignors of the consumer rebalance protocol (KIP-848): pure,
deterministic functions of a GroupSpec and partition counts. `uniform` (the default) and
`range`, with Kafka's semantics; see spec.py for the interface."""

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

__all__ = [
    "DEFAULT_ASSIGNORS",
    "RANGE_ASSIGNOR_NAME",
    "UNIFORM_ASSIGNOR_NAME",
    "Assignment",
    "GroupSpec",
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
    "range_order",
    "subscription_type_of",
]
