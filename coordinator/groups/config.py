"""The group coordinator's settings as the pure shard logic sees them (Kafka's names and
defaults in comments)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2_147_483_647  # group.max.size
    new_member_join_timeout_ms: int = 300_000  # hard-coded in Kafka
    offset_metadata_max_bytes: int = 4_096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # The consumer rebalance protocol (KIP-848).
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_min_session_timeout_ms: int = 45_000  # group.consumer.min.session.timeout.ms
    consumer_max_session_timeout_ms: int = 60_000  # group.consumer.max.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_min_heartbeat_interval_ms: int = 5_000  # group.consumer.min.heartbeat.interval.ms
    consumer_max_heartbeat_interval_ms: int = 15_000  # group.consumer.max.heartbeat.interval.ms
    consumer_max_size: int = 2_147_483_647  # group.consumer.max.size
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    consumer_assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms
    # group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled (the
    # server's setting, checked by coordinator/config.py).
    consumer_migration_policy: str = "bidirectional"
    consumer_max_assignment_interval_ms: int = 15_000  # its upper bound in Kafka
    # Ours: the heartbeat interval given to members that are reconciling (0: the normal
    # interval), so released partitions reach their next owner quickly.
    consumer_reconciling_heartbeat_interval_ms: int = 250
    # Ours: groups this large (members, or partitions of the topics they subscribe to)
    # compute their target assignment off the shard's loop and write it in slices, unless
    # the group's consumer.assignor.offload.enable is false.
    consumer_offload_min_members: int = 200
    consumer_offload_min_partitions: int = 10_000
