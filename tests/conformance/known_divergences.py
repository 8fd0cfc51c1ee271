"""Sequences whose answers differ from Kafka's, each with both answers, until the lead decides:
fixed (remove the entry: the test is strict and fails once the answers agree) or a deliberate
decision written down in the README."""

from __future__ import annotations

_COMMIT_TOPIC_ORDER = (
    "OffsetCommit naming an existing topic and then an unknown one: Kafka answers the unknown "
    "topic first (UNKNOWN_TOPIC_OR_PARTITION), then the known one (NONE): topics "
    "[cf-no-such-topic, cf-t]; groupcoord keeps the request's order [cf-t, cf-no-such-topic]. "
    "Same errors and the same offsets committed; only the order of the response's topics "
    "differs (clients match topics by name)."
)

_FIND_COORDINATOR_V1_3_MESSAGE = (
    "FindCoordinator v1-v3 for a group, no error: Kafka sends error_message 'NONE'; "
    "groupcoord sends null."
)
_FIND_COORDINATOR_V4_6_MESSAGE = (
    "FindCoordinator v4-v6 for groups, no error: Kafka sends each coordinator's "
    "error_message as '' (empty string); groupcoord sends null."
)

_REGEX_EMPTY = (
    "ConsumerGroupDescribe of a member that subscribed by topic names only (regex null in "
    "its heartbeats): Kafka describes subscribed_topic_regex as '' (empty string); "
    "groupcoord as null."
)

KNOWN_DIVERGENCES: dict[str, str] = {
    "consumer/describe-consumer-classic-and-unknown-groups": (
        "ConsumerGroupDescribe v0/v1 of a classic group and of an unknown group "
        "(GROUP_ID_NOT_FOUND, both agree on that): Kafka fills group_epoch=0 and "
        "assignment_epoch=0; groupcoord -1 and -1. " + _REGEX_EMPTY
    ),
    "consumer/v1-static-member-leave-and-return": _REGEX_EMPTY,
    "consumer/regex-subscription": (
        "Issue 17 item 7b. ConsumerGroupHeartbeat v1 joining with SubscribedTopicNames=[cf-t] "
        "and SubscribedTopicRegex='cf-u.*': Kafka's first answer (epoch 2) assigns cf-t "
        "[0,1,2] only and the regex's cf-u [0] arrives later (a heartbeat 2 s on: epoch 3, "
        "cf-t [0,1,2] + cf-u [0]); groupcoord's first answer (epoch 2) already assigns cf-t "
        "[0,1,2] + cf-u [0], and 2 s on answers epoch 2 with no assignment change."
    ),
    "admin/describe-groups-include-authorized-operations": (
        "DescribeGroups v5 with include_authorized_operations=true, no authorizer: Kafka "
        "answers authorized_operations=3400 (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, "
        "ALTER_CONFIGS); groupcoord answers 328 (READ, DELETE, DESCRIBE): the two group "
        "config operations are missing."
    ),
    "admin/find-coordinator-v1-group": _FIND_COORDINATOR_V1_3_MESSAGE,
    "admin/find-coordinator-v2-group": _FIND_COORDINATOR_V1_3_MESSAGE,
    "admin/find-coordinator-v3-group": _FIND_COORDINATOR_V1_3_MESSAGE,
    "admin/find-coordinator-v4-group": _FIND_COORDINATOR_V4_6_MESSAGE,
    "admin/find-coordinator-v5-group": _FIND_COORDINATOR_V4_6_MESSAGE,
    "admin/find-coordinator-v6-group": _FIND_COORDINATOR_V4_6_MESSAGE,
    "offsets/commit-v2-known-then-unknown-topic": _COMMIT_TOPIC_ORDER,
    "offsets/commit-v9-known-then-unknown-topic": _COMMIT_TOPIC_ORDER,
}
