"""What a consumer-group handler carries while it works: the change it is making (not yet
replayed into the group) and the error that discards it."""

from __future__ import annotations

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import ConsumerGroupMemberMetadataValue

from .group import TopicAssignment


class HeartbeatError(Exception):
    """A request's top-level error: nothing the request emitted is kept."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


class GroupChange:
    """What one request changes in its group, before the records are replayed: members'
    new metadata (None: removed), their targets (None: removed), the member id a static
    rejoin replaces, and regular expressions (re)resolved now (None: dropped)."""

    def __init__(self) -> None:
        self.metadata: dict[str, ConsumerGroupMemberMetadataValue | None] = {}
        self.target: dict[str, TopicAssignment | None] = {}
        self.resolved: dict[str, tuple[str, ...] | None] = {}
        self.replaced: str | None = None
