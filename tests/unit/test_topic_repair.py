"""topic_repair.py: the last change of each topic wins, tombstones included, and a peer's
image read from its files (times first, then topics.json) leaves out a name mid-change."""

from __future__ import annotations

import json
from pathlib import Path

from groupcoord.coordinator.server.topic_repair import (
    NEVER,
    Action,
    PeerTopic,
    TopicChanges,
    plan_repair,
    read_peer_image,
)


def stamps(**known: int) -> object:
    def changed_ms(name: str, present: bool) -> int:
        return known.get(name, 0 if present else NEVER)

    return changed_ms


def test_the_later_side_wins_topic_by_topic() -> None:
    local = {"a": (4, {}), "b": (4, {}), "c": (4, {"retention.ms": "1"}), "d": (6, {})}
    peer = {
        "a": PeerTopic(20, True),  # deleted after our last change: deleted here
        "b": PeerTopic(5, True),  # deleted before we made it again: kept
        "c": PeerTopic(30, False, 8, {"retention.ms": "2"}),
        "d": PeerTopic(30, False, 2, {}),  # fewer partitions: deleted and made again
        "e": PeerTopic(30, False, 3, {}),  # made while we were down
        "f": PeerTopic(30, True),  # made and deleted while we were down
    }
    plan = plan_repair(local, stamps(a=10, b=10, c=10, d=10), peer)  # type: ignore[arg-type]
    assert plan == [
        Action("delete", "a", 20),
        Action("extend", "c", 30, 8),
        Action("configs", "c", 30, configs={"retention.ms": "2"}),
        Action("record", "c", 30),
        Action("recreate", "d", 30, 2, {}),
        Action("create", "e", 30, 3, {}),
        Action("record", "f", 30),
    ]
    # Ties and older changes of the peer change nothing.
    assert plan_repair(local, stamps(a=20, c=30, d=30), {k: peer[k] for k in "acd"}) == []  # type: ignore[arg-type]


def test_peer_image_leaves_out_names_mid_change(tmp_path: Path) -> None:
    changes = TopicChanges(tmp_path, clock_ms=lambda: 100)
    changes.record({"live": False, "dropped": True, "being-dropped": False, "made": True})
    listed = [
        {"name": n, "id": "0", "partitions": 2, "configs": {}} for n in ("live", "made", "old")
    ]
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": listed}))
    image = read_peer_image(tmp_path)
    assert image == {
        "live": PeerTopic(100, False, 2, {}),
        "dropped": PeerTopic(100, True),
        "old": PeerTopic(0, False, 2, {}),  # listed before change times were kept
    }
    reread = TopicChanges(tmp_path)
    reread.load()
    assert reread.changed_ms("dropped", False) == 100
    assert reread.changed_ms("old", True) == 0 and reread.changed_ms("nope", False) == NEVER
