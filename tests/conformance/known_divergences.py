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

_LEADER_EPOCH_IN_BATCHES = (
    "Fetched record batches: Kafka stamps each appended batch's partitionLeaderEpoch with "
    "the leader epoch (0 here); groupcoord keeps the producer's value (-1). Same offsets, "
    "CRCs (the epoch is outside the CRC) and records."
)
_FETCH_OUT_OF_RANGE = (
    "Fetch at offset 10 of a partition whose high watermark is 9 (OFFSET_OUT_OF_RANGE on "
    "both): Kafka answers high_watermark=-1, last_stable_offset=-1, log_start_offset=-1; "
    "groupcoord answers 9, 9 and 0."
)
_LIST_OFFSETS_EPOCH = (
    "ListOffsets v4+ with no matching record (a timestamp after the last record, offset -1; "
    "or max timestamp (-3) on an empty partition): Kafka answers leader_epoch=-1; "
    "groupcoord leader_epoch=0."
)
_IDEMPOTENT_PRODUCE = (
    "Idempotent Produce v11: a duplicate of the batch at sequence 3 (both answer NONE with "
    "its original base offset): Kafka's log_append_time is 1700000000040 (the batch's max "
    "timestamp), groupcoord's -1; a batch at sequence 9 after 5 (OUT_OF_ORDER_SEQUENCE_NUMBER "
    "on both): Kafka answers log_start_offset=0 and error_message=null, groupcoord "
    "log_start_offset=-1 and an error message. " + _LEADER_EPOCH_IN_BATCHES
)
KNOWN_DIVERGENCES: dict[str, str] = {
    **{f"data/produce-v{v}-then-fetch": _LEADER_EPOCH_IN_BATCHES for v in (3, 5, 7, 8, 9, 10, 11)},
    **{
        f"data/fetch-v{v}": _LEADER_EPOCH_IN_BATCHES + " " + _FETCH_OUT_OF_RANGE
        for v in (4, 7, 11, 12, 13, 15, 16, 17)
    },
    "data/fetch-unknown-topic-and-partition": (
        "Fetch v12 of an unknown partition / unknown topic (same error codes): Kafka sends "
        "records as an empty record set and aborted_transactions as []; groupcoord sends "
        "both as null."
    ),
    **{f"data/list-offsets-v{v}": _LIST_OFFSETS_EPOCH for v in (4, 5, 6, 7, 8, 9)},
    **{
        f"data/init-producer-id-v{v}-then-idempotent-produce": _IDEMPOTENT_PRODUCE
        for v in (0, 2, 3, 4, 5)
    },
    "consumer/describe-consumer-classic-and-unknown-groups": (
        "ConsumerGroupDescribe v0/v1 of a classic group and of an unknown group "
        "(GROUP_ID_NOT_FOUND, both agree on that): Kafka fills group_epoch=0 and "
        "assignment_epoch=0; groupcoord -1 and -1. " + _REGEX_EMPTY
    ),
    "consumer/v1-static-member-leave-and-return": _REGEX_EMPTY,
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
