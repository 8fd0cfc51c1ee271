"""The classic group data model (Kafka's ClassicGroup / ClassicGroupMember), without the
request handling, which lives in manager.py.

State held only in memory (awaiting join/sync replies, pending members, the new-member
flag) is what Kafka also keeps only in memory; what survives a restart is the
GroupMetadata record: generation, protocol, leader, members with their subscription and
assignment. `to_record()` writes it, `from_record()` rebuilds a group from it (Stable with
members, Empty without).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from itertools import islice

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata

from ..result import Reply


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# target state -> states it may be entered from (Kafka's ClassicGroupState.validPreviousStates)
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}

Protocol = tuple[str, bytes]  # (name, metadata)

# Members one removal copies into the member table being rebuilt (ClassicGroup._compact_step):
# the most a removal adds to a shard event, however large the group.
COMPACT_STEP = 512


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[Protocol]
    assignment: bytes = b""
    # A JoinGroup/SyncGroup of this member parked until the phase completes.
    awaiting_join: Reply | None = None
    awaiting_sync: Reply | None = None
    # The JoinGroup version that is parked, for the shape of its eventual answer.
    join_version: int = 0
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise KeyError(protocol_name)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """The member's first preferred protocol among the candidates."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def matches(self, protocols: list[Protocol]) -> bool:
        """Same protocols, metadata and order (Kafka's JoinGroupRequestProtocolCollection
        equality): a rejoin with unchanged metadata need not rebalance."""
        return self.protocols == list(protocols)

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: a parked member counts as alive, unless it is brand new (bounded by the
        new-member join timeout instead)."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    _leader: str | None = None  # leader_id, unless _leader_left
    _leader_left: bool = False
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out by MEMBER_ID_REQUIRED
    pending_sync_members: set[str] = field(default_factory=set)
    # Initial rebalance (Empty -> PreparingRebalance): when it started and when the latest
    # member joined; the join completes one initial delay after the latest join.
    initial_join_started_ms: int = -1
    last_join_ms: int = -1
    # Protocol name -> how many members support it.
    supported_protocols: Counter[str] = field(default_factory=Counter)
    # Members with a parked JoinGroup (set through set_awaiting_join): "has everyone
    # joined" is asked at every join and expiry of a rebalance, so it must not count.
    joined: int = 0
    # Members removed since `members` was last rebuilt: a dict keeps the slots of removed
    # keys until it grows, and iteration (the next leader is the first member) walks them,
    # which made removing 20,000 members one by one quadratic.
    _removed_since_copy: int = 0
    # The rebuild in progress (None: none is): the first len(_fresh) members of `members`,
    # in order, copied COMPACT_STEP per removal rather than all in one event (a copy of
    # 10,000 members stalled the loop for milliseconds); `members` stays the table every
    # reader uses until the rebuild holds all of them. `_fresh_removed`: members removed
    # from it since it began (its own removed slots).
    _fresh: dict[str, ClassicMember] | None = None
    _fresh_removed: int = 0

    @property
    def leader_id(self) -> str | None:
        if self._leader_left:
            # The leader left: its successor is the first member (Kafka: the first key of
            # its member map), found when asked rather than at every removal, so that a
            # mass expiry does not walk the dict's run of removed slots once per member.
            self._leader_left = False
            self._leader = next(iter(self.members), None)
        return self._leader

    @leader_id.setter
    def leader_id(self, value: str | None) -> None:
        self._leader = value
        self._leader_left = False

    # -- state -----------------------------------------------------------------------------

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise AssertionError(f"group {self.group_id}: illegal {self.state} -> {target}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    def is_empty(self) -> bool:
        return not self.members

    def is_simple(self) -> bool:
        """A group only offset commits made (no protocol type, no member, nobody joining):
        Kafka's isSimpleGroup. No GroupMetadata record backs it."""
        return self.protocol_type is None and not self.members and not self.pending_members

    @property
    def size(self) -> int:
        return len(self.members)

    def awaiting_join_count(self) -> int:
        return self.joined

    def all_members_joined(self) -> bool:
        return not self.pending_members and self.joined == len(self.members)

    def set_awaiting_join(self, member: ClassicMember, reply: Reply | None) -> None:
        """Park (or, None, take) a member's JoinGroup reply, counted in `joined` while the
        member is in the group."""
        if self.members.get(member.member_id) is member:
            self.joined += (reply is not None) - (member.awaiting_join is not None)
        member.awaiting_join = reply

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- members ---------------------------------------------------------------------------

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if self._fresh is not None and member.member_id in self._fresh:
            self._fresh[member.member_id] = member  # a rebuild keeps the same objects
        self.joined += member.awaiting_join is not None
        self.supported_protocols.update(member.protocol_names())
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.joined -= member.awaiting_join is not None
        self._removed_since_copy += 1
        fresh = self._fresh
        if fresh is not None and fresh.pop(member_id, None) is not None:
            self._fresh_removed += 1
        # Rebuilt from half as many removed slots as members: at COMPACT_STEP (> 4) members
        # copied per removal, the rebuild is in place before the removed slots outnumber
        # the members (then the table is at most about twice its compact size).
        if fresh is not None or 2 * self._removed_since_copy > len(self.members) + 32:
            self._compact_step()
        self.supported_protocols.subtract(member.protocol_names())
        self.supported_protocols += Counter()  # drop zero counts
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self._leader == member_id:
            self._leader_left = True
        return member

    def _compact_step(self) -> None:
        """Copy the next COMPACT_STEP members into the table being rebuilt (starting one if
        none is), and make it `members` once it holds them all. The rebuild holds the first
        len(_fresh) members in order (a removal takes a member out of both tables, an
        addition goes after them), so that is where the next step starts."""
        fresh = self._fresh
        if fresh is None:
            fresh = self._fresh = {}
            self._fresh_removed = 0
        copied = len(fresh)
        fresh.update(islice(self.members.items(), copied, copied + COMPACT_STEP))
        if len(fresh) == len(self.members):
            self.members = fresh
            self._removed_since_copy = self._fresh_removed
            self._fresh = None

    def update_protocols(self, member: ClassicMember, protocols: list[Protocol]) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        self.supported_protocols += Counter()

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's validateMember: UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID, else NONE."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[ClassicMember, ClassicMember]:
        """KIP-345: give a static member a new member id, keeping everything else (client,
        timeouts, protocols, assignment, leadership, its place in the member order).
        Returns (old, new); the caller answers the old one's parked requests (fencing)."""
        old = self.members[old_member_id]
        new = ClassicMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=list(old.protocols),
            assignment=old.assignment,
        )
        self.members = {
            (new_member_id if mid == old_member_id else mid): (new if mid == old_member_id else m)
            for mid, m in self.members.items()
        }
        self.joined -= old.awaiting_join is not None
        self._removed_since_copy = 0
        self._fresh = None  # the new table is compact: any rebuild in progress is moot
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return old, new

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka's maybeElectNewJoinedLeader: keep the leader if it rejoined, else hand
        leadership to the first member that did. False if nobody rejoined (or no leader)."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        """Bump the generation: CompletingRebalance with the selected protocol when members
        remain, else Empty without protocol."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    # -- protocols -------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        count = len(self.members)
        return {name for name, n in self.supported_protocols.items() if n == count}

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; most votes wins. Ties go to
        the lexicographically smallest name (Kafka leaves ties to HashMap order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError("no protocol is supported by every member")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        return min(name for name, n in votes.items() if n == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from consumer-protocol subscriptions; None when
        unknown (not the consumer protocol, or metadata that cannot be parsed)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(parse_subscription_topics(member.metadata(self.protocol_name)))
            except (KeyError, ValueError):
                return None
        return topics

    # -- persistence -----------------------------------------------------------------------

    def to_record(self, assignments: dict[str, bytes] | None = None) -> tuple[object, object]:
        """The GroupMetadata record of the group as it stands (assignments override the
        members' current ones, for the leader's SyncGroup)."""
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name) if self.protocol_name else b"",
                assignment=(assignments or {}).get(m.member_id, m.assignment),
            )
            for m in self.members.values()
        )
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id if self.members else None,
            current_state_timestamp=self.state_timestamp_ms,
            members=members,
        )
        return GroupMetadataKey(self.group_id), value

    def empty_record(self) -> tuple[GroupMetadataKey, GroupMetadataValue]:
        """The record Kafka writes when a JoinGroup creates the group (newEmptyGroupMetadataRecord):
        no protocol type, generation 0, whatever the join did to the live group."""
        value = GroupMetadataValue(
            protocol_type="",
            generation=0,
            protocol=None,
            leader=None,
            current_state_timestamp=self.state_timestamp_ms,
            members=(),
        )
        return GroupMetadataKey(self.group_id), value

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue, now_ms: int) -> ClassicGroup:
        group = cls(group_id)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state_timestamp_ms = (
            value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
        )
        for m in value.members:
            member = ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout
                if m.rebalance_timeout >= 0
                else m.session_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
            group.add(member)
        group.leader_id = value.leader if value.members else None
        group.protocol_type = value.protocol_type or None
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version): int16 version, then an
    array of int16-length topic names. Raises ValueError on anything else."""
    import struct

    if len(metadata) < 6:
        raise ValueError("subscription too short")
    (version,) = struct.unpack_from(">h", metadata, 0)
    if version < 0:
        raise ValueError("bad subscription version")
    (count,) = struct.unpack_from(">i", metadata, 2)
    pos = 6
    if count < 0 or count > len(metadata):
        raise ValueError("bad topic count")
    topics = []
    for _ in range(count):
        if pos + 2 > len(metadata):
            raise ValueError("truncated")
        (size,) = struct.unpack_from(">h", metadata, pos)
        pos += 2
        if size < 0 or pos + size > len(metadata):
            raise ValueError("truncated")
        topics.append(metadata[pos : pos + size].decode())
        pos += size
    return topics
