"""When a consumer group's regular expressions are resolved (KIP-848 `SubscribedTopicRegex`),
as Kafka 4.4 does it (GroupMetadataManager.maybeUpdateRegularExpressions and
handleRegularExpressionsResult). A mixin of ConsumerGroupManager (manager.py).

Theory of operation. A heartbeat never resolves a regex itself: it checks whether the group's
regexes need resolving (`_maybe_refresh_regexes`) and, if so, arms the `regex-<group>` timer.
That timer runs as a shard event of its own, after the heartbeat was answered
(`_resolve_regexes`): it resolves every regex the group uses against the topic image, writes
one ConsumerGroupRegularExpression record per regex (topics, image version, now), and bumps
the group epoch when a regex's topics or the group's metadata hash changed. The next
heartbeat of any member then computes the new target, and the member gets the matched
topics from it. So a member joining with topic names and a new regex is first assigned the
names' partitions, and the regex's arrive one heartbeat later, as with Kafka: a new regex
that is not resolved yet moves no group epoch and matches nothing meanwhile.

A resolution is due, as in Kafka, when the group uses a regex and none is pending, and one
of: a regex is not resolved yet, the topic image moved since the last resolution (Kafka:
topics were created; ours also counts deletions and growth, which is harmless: a resolution
that finds the same topics moves no epoch), or the last one is older than
`group_consumer_regex_refresh_interval_ms`. Two resolutions of a group are at least
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS apart: one due sooner waits for the timer (Kafka waits
for the first heartbeat after that time; the timer lets steady heartbeats skip the check).

With an authorizer, a resolution keeps only the topics the principal of the group's latest
full-path heartbeat may DESCRIBE (the manager's `regex_visible`), as Kafka resolves with the
context of the member whose heartbeat scheduled the refresh (and shares the result with
every member of the regex: Kafka's known leak). ACL changes are picked up at the next
resolution, as Kafka's. The check is not persisted: after a restart a group's regexes keep
what they resolved to until a member's full heartbeat brings a check again
(GroupConfig.regex_needs_member_check).

Steady heartbeats (manager.is_steady) do not check at all. Without ACLs a regex's topics
change only when the topic image does, and a moved image sends the next heartbeat down the
full path, which checks; the refresh interval therefore only matters to a group whose
heartbeats take the full path anyway.
"""

from __future__ import annotations

from collections.abc import Callable

from groupcoord.protocol.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)

from ..result import Record, Result
from .change import GroupChange
from .group import ConsumerGroup
from .keys import regex_key
from .regex import resolve_all
from .targets import TargetAssignment, regex_users

# Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: the least time between two resolutions of one
# group's regexes.
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000


class RegexRefresh(TargetAssignment):
    """Mixin: the manager's `rebalances` counter is set by its __init__."""

    rebalances: int
    regex_visible: dict[str, Callable[[str], bool]]

    def _maybe_refresh_regexes(
        self, group: ConsumerGroup, change: GroupChange, records: list[Record], now_ms: int
    ) -> None:
        """After a member's update (`change`): a tombstone for each regex nobody uses any
        more (recorded in `change.resolved` as None), and the `regex-<group>` timer armed
        if a resolution is due (module docstring). Emits tombstones only."""
        used = regex_users(group, change)
        for regex in group.resolved_regexes:
            if regex not in used:
                change.resolved[regex] = None
                records.append((ConsumerGroupRegularExpressionKey(group.group_id, regex), None))
        if not used:
            return
        timer = self.shard.timer
        key = regex_key(group.group_id)
        if timer.is_scheduled(key):
            return
        resolved = group.resolved_regexes
        last = next(iter(resolved.values()), None)  # all are written together
        last_ms = last.timestamp if last is not None else None
        due = (
            last_ms is None
            or any(regex not in resolved for regex in used)
            or last.version != self.shard.topics.version  # type: ignore[union-attr]
            or now_ms > last_ms + self.shard.config.consumer_regex_refresh_interval_ms
        )
        if due:
            self._arm_regex_resolution(group, now_ms)

    def _arm_regex_resolution(self, group: ConsumerGroup, now_ms: int) -> None:
        """Arm `regex-<group>`: now, or REGEX_BATCH_REFRESH_MIN_INTERVAL_MS after the last
        resolution. Also called for every group using regexes once a shard is loaded: the
        topic image's versions are this process's, so what was resolved before is stale."""
        last = next(iter(group.resolved_regexes.values()), None)
        due_ms = 0 if last is None else last.timestamp + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS + 1
        group_id = group.group_id
        self.shard.timer.schedule(
            regex_key(group_id),
            max(0, due_ms - now_ms),
            lambda now_ms: self._resolve_regexes(group_id, now_ms),
        )

    def _resolve_regexes(self, group_id: str, now_ms: int) -> Result:
        """The `regex-<group>` timer: resolve every regex the group uses now. Emits a
        RegularExpression record per regex, then ConsumerGroupMetadata (epoch + 1) if a
        regex's topics or the metadata hash changed. Nothing for a group gone meanwhile."""
        result = Result()
        group = self.groups.get(group_id)
        if group is None or group.dead or not group.regex_subscribers:
            self.regex_visible.pop(group_id, None)
            return result
        image = self.shard.topics
        change = GroupChange()
        records = result.records
        bump = False
        names = image.topic_names()
        visible = self.regex_visible.get(group_id)
        if visible is None and self.shard.config.regex_needs_member_check:
            # No member's check known (a restart): resolve at the next heartbeat's
            # arming, which sets one, rather than with every topic.
            return result
        if visible is not None:  # an authorizer: only topics the member may DESCRIBE
            names = [name for name in names if visible(name)]
        resolutions = resolve_all(sorted(group.regex_subscribers), names)
        for regex, topics in resolutions.items():
            known = group.resolved_regexes.get(regex)
            if known is None or known.topics != topics:
                bump = True
                change.resolved[regex] = topics
            records.append(
                (
                    ConsumerGroupRegularExpressionKey(group_id, regex),
                    ConsumerGroupRegularExpressionValue(topics, image.version, now_ms),
                )
            )
        metadata_hash = self.metadata_hash(group, change)
        if bump or metadata_hash != group.metadata_hash:
            self.rebalances += 1
            records.append(
                (
                    ConsumerGroupMetadataKey(group_id),
                    ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash),
                )
            )
            if group.has_legacy_partition_metadata:
                records.append((ConsumerGroupPartitionMetadataKey(group_id), None))
        return result
