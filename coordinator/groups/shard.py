"""GroupShard: the pure state machine of one coordinator shard (one __consumer_offsets
partition): its classic groups, its consumer groups (KIP-848) and their offsets.

No asyncio, clock, uuid or I/O here: time comes in as `now_ms`, ids from `ids`, timers
through `timer`, topics from a read-only `topics` image. Request handlers live in the
managers (classic/manager.py, consumer/manager.py, offsets.py); this class owns what they
share (the group registries: a group id names a classic or a consumer group, never both)
and routes replayed records.
"""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.records import (
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
)

from .classic.group import ClassicGroup, GroupState
from .classic.manager import ClassicGroupManager
from .config import GroupConfig
from .consumer.group import ConsumerGroup
from .consumer.manager import ConsumerGroupManager
from .dynamic_config import (
    ConsumerGroupSettings,
    GroupConfigSource,
    InvalidGroupConfig,
    NoGroupConfigs,
    settings,
)
from .offsets import OffsetManager
from .result import IdSource, Result, Timer
from .topics import StaticTopicImage, TopicImage


class GroupShard:
    def __init__(
        self,
        shard_id: int,
        config: GroupConfig,
        timer: Timer,
        ids: IdSource,
        topics: TopicImage | None = None,
        group_configs: GroupConfigSource | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.config = config
        self.timer = timer
        self.ids = ids
        self.topics: TopicImage = topics if topics is not None else StaticTopicImage()
        self.group_configs: GroupConfigSource = (
            group_configs if group_configs is not None else NoGroupConfigs()
        )
        self._default_settings = settings(config, {})
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.offsets = OffsetManager(self)

    # -- the group registry ----------------------------------------------------------------

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def get_or_create_classic_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        """A new group is Empty, generation 0, with no protocol type (a 'simple' group until
        a member joins)."""
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id, state_timestamp_ms=now_ms)
            self.groups[group_id] = group
        return group

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer_groups.get(group_id)

    def has_group(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.consumer_groups

    def group_count(self) -> int:
        return len(self.groups) + len(self.consumer_groups)

    def consumer_settings(self, group_id: str) -> ConsumerGroupSettings:
        """The group's settings: its dynamic overrides over the broker's. Overrides that
        the broker's bounds no longer allow (changed since they were set) are ignored."""
        overrides = self.group_configs.overrides(group_id)
        if overrides:
            try:
                return settings(self.config, overrides)
            except InvalidGroupConfig:
                pass
        return self._default_settings

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD

    # -- replay and loading ----------------------------------------------------------------

    def replay(self, key: Any, value: Any, now_ms: int) -> None:
        """Apply one record. The only way durable state changes (and, at load, the only way
        state is rebuilt). Unknown record types are the loader's business, not ours."""
        if isinstance(key, OffsetCommitKey):
            self.offsets.replay(key, value, now_ms)
        elif isinstance(key, GroupMetadataKey):
            self.classic.replay(key, value, now_ms)
        else:
            self._replay_consumer(key, value)

    def _replay_consumer(self, key: Any, value: Any) -> None:
        """Kafka's replay of consumer-group records: a value creates the group if needed,
        a tombstone for a group that is not there is a no-op."""
        group_id = key.group_id
        group = self.consumer_groups.get(group_id)
        if group is None:
            if value is None:
                return
            classic = self.groups.get(group_id)
            if classic is not None and classic.is_simple():
                # Kafka's getOrMaybeCreatePersistedConsumerGroup replaces it: once compaction
                # has dropped the GroupMetadata tombstone written when the consumer group
                # took the id, the group's older offset commits replay first and make a
                # simple group, which would otherwise shadow the consumer group (listed
                # twice, and its offsets expired as a simple group's, subscriptions ignored).
                del self.groups[group_id]
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        if isinstance(key, ConsumerGroupMetadataKey) and value is None:
            group.dead = True
            del self.consumer_groups[group_id]
        else:
            group.apply(key, value)

    def on_loaded(self, now_ms: int) -> Result:
        """After loading: re-arm member session timers and the offset-expiration timer; the
        Result holds what that starts (e.g. rebalances of groups over the size limit)."""
        result = self.classic.on_loaded(now_ms)
        self.consumer.on_loaded(now_ms)
        self.offsets.on_loaded(now_ms)
        return result
