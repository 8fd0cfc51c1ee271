"""Version-independent requests and responses of the classic group protocol, as the pure
manager (manager.py) sees them. The kio adapters translate wire messages to and from these.

Where behaviour depends on the API version the request carries `api_version`:

* JoinGroup: v0 has no RebalanceTimeoutMs (the session timeout is used); v4+ requires a
  known member id (a dynamic member with MemberId "" gets MEMBER_ID_REQUIRED and an id);
  v9+ (KIP-814) gets `skip_assignment` and the real leader on a static leader's rejoin.
* SyncGroup: v5+ must carry ProtocolType and ProtocolName (None -> INCONSISTENT_GROUP_PROTOCOL).
* LeaveGroup: v0-2 carry one member (the adapter builds `members=[LeaveMember(member_id)]`)
  and answer with a top-level error only, which the manager sets to that member's error;
  v3+ is a batch with one error per member, echoing MemberId and GroupInstanceId.
* DescribeGroups: a missing group is answered GROUP_ID_NOT_FOUND from v6, NONE before.

Nullable wire strings are `None` here; protocols are `(name, metadata)` pairs in the
member's order of preference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.protocol.errors import ErrorCode

# DescribeGroups AuthorizedOperations when not requested (client-compat item 3).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


# -- JoinGroup (11) --------------------------------------------------------------------------


@dataclass
class JoinGroupRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # v0: absent, the session timeout applies
    group_instance_id: str | None = None  # v5+
    reason: str | None = None  # v8+
    client_id: str = ""  # from the request header
    client_host: str = ""  # the peer address, as Kafka prints it ("/127.0.0.1")
    api_version: int = 9


@dataclass
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass
class JoinGroupResponse:
    error_code: ErrorCode = ErrorCode.NONE
    generation_id: int = -1
    protocol_type: str | None = None  # v7+
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False  # v9+
    member_id: str = ""
    members: list[JoinGroupMember] = field(default_factory=list)


# -- SyncGroup (14) --------------------------------------------------------------------------


@dataclass
class SyncGroupRequest:
    group_id: str
    member_id: str
    generation_id: int
    assignments: list[tuple[str, bytes]] = field(default_factory=list)  # (member id, bytes)
    group_instance_id: str | None = None  # v3+
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    api_version: int = 5


@dataclass
class SyncGroupResponse:
    error_code: ErrorCode = ErrorCode.NONE
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignment: bytes = b""


# -- Heartbeat (12) --------------------------------------------------------------------------


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None  # v3+
    api_version: int = 4


@dataclass
class HeartbeatResponse:
    error_code: ErrorCode = ErrorCode.NONE


# -- LeaveGroup (13) -------------------------------------------------------------------------


@dataclass
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None  # v5+


@dataclass
class LeaveGroupRequest:
    group_id: str
    members: list[LeaveMember]  # v0-2: exactly one, built from the request's MemberId
    api_version: int = 5

    @classmethod
    def single(cls, group_id: str, member_id: str, api_version: int = 2) -> LeaveGroupRequest:
        """A v0-2 request (one member, no instance id)."""
        return cls(group_id, [LeaveMember(member_id)], api_version)


@dataclass
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode = ErrorCode.NONE


@dataclass
class LeaveGroupResponse:
    # v0-2: this is the only error sent (the member's own error); v3+: NONE unless the
    # whole request failed (Dead group, invalid group id).
    error_code: ErrorCode = ErrorCode.NONE
    members: list[LeaveMemberResponse] = field(default_factory=list)  # v3+


# -- DescribeGroups (15) / ListGroups (16) ---------------------------------------------------


@dataclass
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass
class DescribedGroup:
    group_id: str
    group_state: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None  # v6+
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedMember] = field(default_factory=list)
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED


@dataclass
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str  # v4+
    group_type: str = "classic"  # v5+
