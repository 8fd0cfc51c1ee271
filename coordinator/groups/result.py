"""What a shard handler hands back to the runtime, and the services injected into shards.

Theory of operation: a handler runs synchronously against the shard's state and returns a
Result: the records to append to the shard's log and the replies to deliver. The runtime
replays `records` into the shard (offsets and consumer groups change state only that way),
appends them and `applied_records` (records whose change the handler already made in
memory: classic-group handlers update their rebalance state directly, as Kafka does, and
their GroupMetadata records only persist it; they are replayed only when loading), and
delivers every reply once all of them are durable. A parked request (JoinGroup,
SyncGroup) keeps its `reply` callback in the group and is answered from a later Result,
typically one returned by a timer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# A record is (key, value); value None is a tombstone. Key/value are protocol.records types.
Record = tuple[Any, Any]
Reply = Callable[[Any], None]


@dataclass(slots=True, init=False)  # one per shard event: no instance dict
class Result:
    records: list[Record]
    applied_records: list[Record]
    replies: list[tuple[Reply, Any]]

    def __init__(
        self,
        records: list[Record] | None = None,
        applied_records: list[Record] | None = None,
        replies: list[tuple[Reply, Any]] | None = None,
    ) -> None:
        # By hand: the generated __init__ calls a default factory per field, per event.
        self.records = [] if records is None else records
        self.applied_records = [] if applied_records is None else applied_records
        self.replies = [] if replies is None else replies

    def reply(self, callback: Reply, response: Any) -> None:
        self.replies.append((callback, response))

    def extend(self, other: Result) -> None:
        """Fold another result in (e.g. a rebalance completed as part of a request)."""
        self.records.extend(other.records)
        self.applied_records.extend(other.applied_records)
        self.replies.extend(other.replies)


TimerCallback = Callable[[int], Result]
# Work offloaded from the shard: `compute()` runs off the shard's loop on inputs it owns;
# `finish(value, now_ms)` (value: compute's return, or the exception it raised) runs as an
# event of the shard, like a timer.
OffloadFinish = Callable[[Any, int], Result]


class Timer(Protocol):
    """Keyed, replaceable timers. The callback runs as an event of the shard, gets now_ms,
    and its Result goes through the same append-then-reply pipeline as a request's."""

    def schedule(self, key: str, delay_ms: int, callback: TimerCallback) -> None: ...

    def cancel(self, key: str) -> None: ...

    def is_scheduled(self, key: str) -> bool: ...

    def offload(
        self, key: str, compute: Callable[[], Any], finish: OffloadFinish, *, plugin: bool = False
    ) -> None:
        """Run `compute` off the loop, then `finish` as a shard event. A newer offload
        with the same key (or a cancel of the key) makes the older one's finish not run.
        `plugin`: compute runs code the coordinator did not ship (a plugin assignor), kept
        apart from the threads the server's own work needs. An exception compute raises
        is logged by the runtime, then handed to finish."""
        ...


class IdSource(Protocol):
    def new_uuid(self) -> str: ...
