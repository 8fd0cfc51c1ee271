"""GroupShard: the pure state machine of one coordinator shard (one __consumer_offsets
partition): its classic groups, their offsets, and (issue 4) consumer groups.

No asyncio, clock, uuid or I/O here: time comes in as `now_ms`, ids from `ids`, timers
through `timer`. Request handlers live in the managers (classic/manager.py, offsets.py);
this class owns what they share (the group registry) and routes replayed records.
"""

from __future__ import annotations

from typing import Any

from protocol.records import GroupMetadataKey, OffsetCommitKey

from .classic.group import ClassicGroup, GroupState
from .classic.manager import ClassicGroupManager
from .config import GroupConfig
from .offsets import OffsetManager
from .result import IdSource, Result, Timer


class GroupShard:
    def __init__(self, shard_id: int, config: GroupConfig, timer: Timer, ids: IdSource) -> None:
        self.shard_id = shard_id
        self.config = config
        self.timer = timer
        self.ids = ids
        self.groups: dict[str, ClassicGroup] = {}
        self.classic = ClassicGroupManager(self)
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
        # Consumer-group records (issue 4) are ignored until that protocol is served.

    def on_loaded(self, now_ms: int) -> Result:
        """After loading: re-arm member session timers and the offset-expiration timer; the
        Result holds what that starts (e.g. rebalances of groups over the size limit)."""
        result = self.classic.on_loaded(now_ms)
        self.offsets.on_loaded(now_ms)
        return result
