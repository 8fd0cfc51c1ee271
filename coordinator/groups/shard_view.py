"""What a shard's managers see of the shard and of each other: structural types.

GroupShard (shard.py) holds the three managers, and each manager reaches the shard's
registries, clock-free services and its sibling managers through the shard. Typing that
reference as GroupShard made every manager import shard.py back (under TYPE_CHECKING, still
an import cycle); typing it as the ShardView below, which names only what the managers use,
lets the imports run one way: shard -> managers -> this module -> plain data types. The
protocol's own calls across managers (a commit touching a classic member's session, a
classic request answered by a consumer group's classic-protocol members, a downgrade) are
the ports below; mypy checks that GroupShard and the managers satisfy them.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from groupcoord.protocol.records import ConsumerGroupMemberMetadataValue

from .classic.group import ClassicGroup
from .classic.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from .config import ConsumerGroupSettings, GroupConfig
from .consumer.change import GroupChange
from .consumer.group import ConsumerGroup
from .consumer.member import ConsumerGroupMember
from .events import GroupEvents
from .release import SlicedRelease
from .result import IdSource, Record, Reply, Result, Timer
from .topics import TopicImage


class MigrationPort(Protocol):
    """The classic-protocol members of a consumer group (consumer/migration.py)."""

    def join(
        self, group: ConsumerGroup, request: JoinGroupRequest, reply: Reply, now_ms: int
    ) -> Result: ...

    def sync(
        self, group: ConsumerGroup, request: SyncGroupRequest, reply: Reply, now_ms: int
    ) -> Result: ...

    def heartbeat(
        self, group: ConsumerGroup, request: HeartbeatRequest, reply: Reply, now_ms: int
    ) -> Result: ...

    def leave(
        self, group: ConsumerGroup, request: LeaveGroupRequest, reply: Reply, now_ms: int
    ) -> Result: ...


class ClassicPort(Protocol):
    """What the other managers ask of the classic group manager."""

    def touch_member(self, group: ClassicGroup | str, member_id: str, now_ms: int) -> None: ...

    def join_classic_group(
        self, request: JoinGroupRequest, reply: Reply, now_ms: int, result: Result
    ) -> Result: ...

    def adopt(self, group: ClassicGroup) -> None: ...

    def after_downgrade(self, group_id: str, now_ms: int) -> Result: ...


class ConsumerPort(Protocol):
    """What the other managers ask of the consumer group manager."""

    @property
    def migration(self) -> MigrationPort: ...

    def deletion_records(self, group: ConsumerGroup) -> list[Record]: ...


class ConsumerManagerView(Protocol):
    """What the classic-protocol members of a consumer group (migration.py) use of the
    consumer group manager that owns them."""

    @property
    def shard(self) -> ShardView: ...

    @property
    def groups(self) -> dict[str, ConsumerGroup]: ...

    def cancel_member_timers(self, group_id: str, member_id: str) -> None: ...

    def deletion_records(self, group: ConsumerGroup) -> list[Record]: ...

    def fence_later(self, group: ConsumerGroup, member_id: str, fired_key: str) -> None: ...

    def metadata_hash(self, group: ConsumerGroup, change: GroupChange | None = None) -> int: ...

    def removal_records(
        self, group: ConsumerGroup, member_ids: list[str], now_ms: int
    ) -> list[Record]: ...

    def replacement_records(
        self, group: ConsumerGroup, old_id: str, member: ConsumerGroupMember
    ) -> list[Record]: ...

    def schedule_session_timeout(
        self, group_id: str, member_id: str, timeout_ms: int | None = None
    ) -> None: ...

    def update_member(
        self,
        group: ConsumerGroup,
        change: GroupChange,
        member: ConsumerGroupMember,
        old_meta: ConsumerGroupMemberMetadataValue | None,
        new_meta: ConsumerGroupMemberMetadataValue,
        owned: list[tuple[uuid.UUID, list[int]]] | None,
        now_ms: int,
        records: list[Record],
        session_timeout_ms: int | None = None,
    ) -> tuple[ConsumerGroupMember, int, int]: ...


class ShardView(Protocol):
    """The shard as its managers see it: settings, the injected timer, ids and topic
    image, the group registries (a group id names a classic or a consumer group, never
    both), and the sibling managers' ports."""

    config: GroupConfig
    timer: Timer
    ids: IdSource
    topics: TopicImage
    groups: dict[str, ClassicGroup]
    consumer_groups: dict[str, ConsumerGroup]
    events: GroupEvents
    release: SlicedRelease

    @property
    def classic(self) -> ClassicPort: ...

    @property
    def consumer(self) -> ConsumerPort: ...

    def classic_group(self, group_id: str) -> ClassicGroup | None: ...

    def get_or_create_classic_group(self, group_id: str, now_ms: int) -> ClassicGroup: ...

    def consumer_group(self, group_id: str) -> ConsumerGroup | None: ...

    def has_group(self, group_id: str) -> bool: ...

    def groups_full(self) -> str | None: ...

    def remove_group(self, group_id: str) -> None: ...

    def consumer_settings(self, group_id: str) -> ConsumerGroupSettings: ...
