"""Group events: what happened to a group, for operators (one INFO log line each, written
by the runtime through the injected `sink`) and for the rebalance timeline (the last
`timeline_events` of each group, served on the HTTP port).

Theory of operation. Events are derived from the records the shard writes (event_records.py),
by the same code when a record is written and when the log is replayed at load, so the
timeline is rebuilt by replay and survives a restart; a replayed event carries the time of
the batch that holds its record (`replay_time_ms`, set by the loader). What the records do
not say is supplied live by the managers, before the records they write:

* `cause(group, member, event, why)`: why a member is about to disappear (session or
  rebalance timeout, LeaveGroup, a static replacement), or why a group is deleted
  (DeleteGroups). The derived event uses it; replayed, the same record gives the generic
  "member_left" / "group_deleted" with cause "replayed from the log: ...".
* `announce(...)`: an event the records show late or never: a classic group's rebalance
  start (Kafka persists no PreparingRebalance), a classic member joining or leaving (its
  GroupMetadata record is written only when the rebalance completes), an admin reset or
  deletion of offsets (an OffsetCommit or its tombstone, like any other). It is logged and
  kept now; the record derivation skips what was announced.

Nothing here runs per heartbeat or per commit: steady heartbeats write no records, commits
write only OffsetCommit records, which derive nothing (an admin reset is recognised by the
shard facade from a commit with no generation to a group that has no members).

Memory: at most `timeline_events` per group and `total_max` in all (the oldest events of the
shard go first once the total is reached); details carry at most MOVED_LISTED moved
partitions.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

MOVED_LISTED = 50  # partitions listed in an event's details (all are counted)


@dataclass(slots=True)
class GroupEvent:
    seq: int  # order in its shard (total eviction)
    time_ms: int
    group_id: str
    event: str
    generation_or_epoch: int
    member_id: str | None
    cause: str
    details: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The timeline endpoint's form of the event."""
        return {
            "time_ms": self.time_ms,
            "event": self.event,
            "generation_or_epoch": self.generation_or_epoch,
            "member_id": self.member_id,
            "cause": self.cause,
            "details": self.details,
        }


EventSink = Callable[[GroupEvent], None]

_NONE: Mapping[str, Any] = {}  # an empty mapping to read from, never written
_NO_IDS: frozenset[str] = frozenset()


class GroupEvents:
    """The events of one shard's groups: the timelines, the live causes pending for the
    next records, and the sink (None while loading: replayed events are not logged)."""

    # The shard derives events from the records it writes and replays (events_off.py's
    # test-only stand-in says False).
    derived = True

    def __init__(self, timeline_events: int, total_max: int) -> None:
        self.timeline_events = max(timeline_events, 0)
        self.total_max = max(total_max, 0)
        self.sink: EventSink | None = None
        # The time of the batch being replayed (the loader's), None when live.
        self.replay_time_ms: int | None = None
        self._timelines: dict[str, deque[GroupEvent]] = {}
        self._order: deque[GroupEvent] = deque()  # every held event, oldest first (lazily)
        self._held = 0
        self._seq = 0
        # group -> member ("" for the group itself) -> (event, cause): set by the managers
        # before the records that remove the member (or the group) are written.
        self._causes: dict[str, dict[str, tuple[str, str]]] = {}
        # group -> "joined" | "removed" | "created" -> member ("" for the group) -> cause:
        # announced live, not to be derived again. Kept by kind so that a record removing
        # 20,000 announced members is settled without a Python step per member.
        self._announced: dict[str, dict[str, dict[str, str]]] = {}
        # Classic groups: group -> the member ids of its last GroupMetadata record, and how
        # many of them were announced removed since (the record that empties a group of
        # 20,000 expired members learns they were all announced from one comparison).
        self._record_ids: dict[str, frozenset[str]] = {}
        self._record_removed: dict[str, int] = {}
        # What settle() lets go of in bulk, handed to the shard's sliced release.
        self.release: Callable[[Any], None] | None = None
        # group -> why it is rebalancing (member events since its last rebalance start).
        self._reasons: dict[str, list[str]] = {}
        # Consumer groups (event_records.py): the target being written, as partition ->
        # [from, to]; the target epoch whose completion was reported; the partitions moved
        # since the last completion.
        self.moves: dict[str, dict[tuple[uuid.UUID, int], list[str | None]]] = {}
        self.completed: dict[str, int] = {}
        self.moved_since_completed: dict[str, int] = {}

    # -- what the managers say -------------------------------------------------------------

    def cause(self, group_id: str, member_id: str, event: str, why: str) -> None:
        """The cause of the next removal of `member_id` (or of the group: member "") that
        the records will show; `event` names it (member_expired, member_fenced, ...)."""
        self._causes.setdefault(group_id, {})[member_id] = (event, why)

    def take_cause(self, group_id: str, member_id: str) -> tuple[str, str] | None:
        causes = self._causes.get(group_id)
        if causes is None:
            return None
        found = causes.pop(member_id, None)
        if not causes:
            del self._causes[group_id]
        return found

    def announce(
        self,
        group_id: str,
        event: str,
        generation_or_epoch: int,
        member_id: str | None,
        cause: str,
        now_ms: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        """An event seen live (module docstring): kept and logged now. A member event is a
        reason of the group's next rebalance, and is not derived again from the records."""
        if member_id is not None:
            kind = "joined" if event == "member_joined" else "removed"
            announced = self._announced.setdefault(group_id, {}).setdefault(kind, {})
            if (
                kind == "removed"
                and member_id not in announced
                and member_id in self._record_ids.get(group_id, _NO_IDS)
            ):
                self._record_removed[group_id] += 1
            announced[member_id] = cause
            self.reason(group_id, f"{member_id} {event.removeprefix('member_')}: {cause}")
        elif event == "group_created":
            self._announced.setdefault(group_id, {})["created"] = {"": cause}
        self.emit(group_id, event, generation_or_epoch, member_id, cause, now_ms, details)

    def announced(self, group_id: str, member_id: str, kind: str) -> str | None:
        """The cause the member's event of `kind` was announced with, None if it was not."""
        return self.announced_all(group_id, kind).get(member_id)

    def announced_all(self, group_id: str, kind: str) -> Mapping[str, str]:
        """Member -> the cause its event of `kind` was announced with (read only)."""
        return self._announced.get(group_id, _NONE).get(kind, _NONE)

    def track_record(self, group_id: str, member_ids: frozenset[str]) -> None:
        """The member ids of the classic group's GroupMetadata record just written or
        replayed (after its events were derived): announcements of their removal are
        counted from now on (all_removed_announced)."""
        self._record_ids[group_id] = member_ids
        self._record_removed[group_id] = 0

    def all_removed_announced(self, group_id: str, member_ids: frozenset[str]) -> bool:
        """Were all of `member_ids` announced removed since the group's last record? One
        comparison when they are that record's member ids (the same set object, as for
        a group emptied), else a set operation."""
        removed = self.announced_all(group_id, "removed")
        if not removed:
            return not member_ids
        if member_ids is self._record_ids.get(group_id):
            return self._record_removed[group_id] == len(member_ids)
        return removed.keys() >= member_ids

    def take_causes(self, group_id: str, member_ids: Container[str]) -> dict[str, tuple[str, str]]:
        """take_cause of each of `member_ids`: those that had a cause, with it (a step per
        pending cause, not per member)."""
        causes = self._causes.get(group_id)
        if causes is None:
            return {}
        taken = [member_id for member_id in causes if member_id in member_ids]
        found = {member_id: causes.pop(member_id) for member_id in taken}
        if not causes:
            del self._causes[group_id]
        return found

    def settle(self, group_id: str, members: Container[str]) -> None:
        """The group's record, with these `members`, was derived: what it shows of the
        announcements is written (a member joined and in it, any removal, the creation),
        and the reasons gathered for its rebalance are spent. A member that joined and is
        not in it yet (a new group's first record is written empty) stays announced."""
        announced = self._announced.pop(group_id, None)
        if announced:
            removed = announced.get("removed", _NONE)
            joined = {
                member_id: cause
                for member_id, cause in announced.get("joined", _NONE).items()
                if member_id not in members and member_id not in removed
            }
            if joined:
                self._announced[group_id] = {"joined": joined}
            if self.release is not None and removed:
                self.release(removed)  # 20,000 removals announced: freed in slices
        self._reasons.pop(group_id, None)

    def reason(self, group_id: str, why: str) -> None:
        """A reason for the group's next rebalance (bounded: the first few are kept)."""
        reasons = self._reasons.setdefault(group_id, [])
        if len(reasons) < 10:
            reasons.append(why)

    def take_reasons(self, group_id: str, default: str) -> str:
        reasons = self._reasons.pop(group_id, None)
        return "; ".join(reasons) if reasons else default

    def rebalance_started(self, group_id: str, generation: int, now_ms: int) -> None:
        """A classic group prepares a rebalance (live only: no record says so)."""
        cause = self.take_reasons(group_id, "a member rejoined or changed its metadata")
        self.emit(group_id, "rebalance_started", generation, None, cause, now_ms)

    def forget(self, group_id: str) -> None:
        """The group is gone: drop its pending causes (its timeline stays, for the record)."""
        self._causes.pop(group_id, None)
        self._announced.pop(group_id, None)
        self._record_ids.pop(group_id, None)
        self._record_removed.pop(group_id, None)
        self._reasons.pop(group_id, None)
        self.moves.pop(group_id, None)
        self.completed.pop(group_id, None)
        self.moved_since_completed.pop(group_id, None)

    # -- the timeline ----------------------------------------------------------------------

    def emit(
        self,
        group_id: str,
        event: str,
        generation_or_epoch: int,
        member_id: str | None,
        cause: str,
        now_ms: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Keep the event in the group's timeline and hand it to the sink."""
        time_ms = self.replay_time_ms if self.replay_time_ms is not None else now_ms
        self._seq += 1
        entry = GroupEvent(
            self._seq,
            time_ms,
            group_id,
            event,
            generation_or_epoch,
            member_id,
            cause,
            details if details is not None else {},
        )
        self._keep(entry)
        if self.sink is not None:
            self.sink(entry)

    def _keep(self, entry: GroupEvent) -> None:
        if self.timeline_events == 0 or self.total_max == 0:
            return
        timeline = self._timelines.get(entry.group_id)
        if timeline is None:
            timeline = self._timelines[entry.group_id] = deque()
        elif len(timeline) >= self.timeline_events:
            timeline.popleft()
            self._held -= 1
        timeline.append(entry)
        self._held += 1
        order = self._order
        order.append(entry)
        while self._held > self.total_max:
            oldest = order.popleft()
            held = self._timelines.get(oldest.group_id)
            if held and held[0] is oldest:
                held.popleft()
                self._held -= 1
                if not held:
                    del self._timelines[oldest.group_id]
        if len(order) > 2 * self._held + 64:
            # Entries a group's own limit dropped linger in `order`: drop them, once they
            # are as many as the events held (amortised O(1) an event). Bounded by the
            # total alone, one busy group's 100 events kept up to 200,000 dropped ones
            # alive (a mass join and expiry: 3 tracked objects each, walked by every
            # gen-2 collection). `order` is in seq order; a group's timeline drops its
            # oldest first, so an entry is held iff its seq is not below its timeline's first.
            timelines = self._timelines
            self._order = deque(
                e for e in order if (t := timelines.get(e.group_id)) and t[0].seq <= e.seq
            )

    def timeline(self, group_id: str) -> list[GroupEvent] | None:
        """The group's last events, oldest first; None for a group never seen (or whose
        events were all dropped)."""
        timeline = self._timelines.get(group_id)
        return None if timeline is None else list(timeline)

    def held(self) -> int:
        return self._held
