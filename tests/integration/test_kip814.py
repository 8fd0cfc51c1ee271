"""KIP-814 with a raw JoinGroup v9 client (no client library here sends v9): a static leader
that rejoins with an empty member id gets SkipAssignment=true with the member list, keeps
the generation, and the replaced member id is fenced. Below v9 the answer names the old
leader id, so the returning member never thinks it must assign."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.raw_groups import heartbeat, join, join_until_member, sync
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=200) as proc:
        yield proc


def _stable_group(server: ServerProcess, group: str) -> tuple[str, str, int]:
    """A Stable group of a static leader ("leader", joined first) and a static follower;
    returns the leader's member id and instance id, and the generation."""
    results: dict[str, object] = {}

    def in_thread(name: str, fn: object) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.setdefault(name, fn()))  # type: ignore[operator]
        thread.start()
        return thread

    with RawClient(server.bootstrap) as a, RawClient(server.bootstrap) as b:
        ta = in_thread("a", lambda: join(a, group, instance_id="leader"))
        time.sleep(0.05)
        tb = in_thread("b", lambda: join(b, group, instance_id="follower"))
        ta.join(10)
        tb.join(10)
        ja, jb = results["a"], results["b"]
        generation = ja.generation_id  # type: ignore[attr-defined]
        assert ja.leader == ja.member_id  # type: ignore[attr-defined]
        tf = in_thread(
            "sf",
            lambda: sync(
                b,
                group,
                generation,
                jb.member_id,  # type: ignore[attr-defined]
                instance_id="follower",
            ),
        )
        sl = sync(
            a,
            group,
            generation,
            ja.member_id,  # type: ignore[attr-defined]
            {ja.member_id: b"L", jb.member_id: b"F"},
            instance_id="leader",
        )  # type: ignore[attr-defined]
        tf.join(10)
        assert sl.error_code == 0 and results["sf"].assignment == b"F"  # type: ignore[attr-defined]
        return ja.member_id, "leader", generation  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", [9, 8, 5])
def test_static_leader_rejoin(group_server: ServerProcess, version: int) -> None:
    group = f"kip814-v{version}"
    leader_id, instance, generation = _stable_group(group_server, group)
    with RawClient(group_server.bootstrap) as client:
        resp = join(client, group, member_id="", instance_id=instance, version=version)
        assert resp.error_code == 0
        assert resp.generation_id == generation  # no rebalance
        assert resp.member_id != leader_id
        assert resp.protocol_name == "range"
        if version >= 9:
            assert resp.skip_assignment is True
            assert resp.leader == resp.member_id
            assert len(resp.members) == 2
        else:
            assert resp.leader == leader_id  # the old id: the client will not assign
            assert resp.members == ()
        # The rejoined leader gets its old assignment from SyncGroup without assigning.
        synced = sync(client, group, generation, resp.member_id, instance_id=instance)
        assert synced.error_code == 0 and synced.assignment == b"L"
        # The replaced member id is fenced; without the instance id it is unknown.
        assert (
            heartbeat(client, group, generation, leader_id, instance_id=instance).error_code == 82
        )
        assert sync(client, group, generation, leader_id, instance_id=instance).error_code == 82
        assert sync(client, group, generation, leader_id).error_code == 25
        assert (
            join(
                client, group, member_id=leader_id, instance_id=instance, version=version
            ).error_code
            == 82
        )


def test_dynamic_member_id_required_round_trip(group_server: ServerProcess) -> None:
    with RawClient(group_server.bootstrap) as client:
        first = join(client, "dyn", version=9)
        assert first.error_code == 79 and first.member_id.startswith("rawclient-")
        second = join_until_member(client, "dyn", version=9)
        assert second.error_code == 0 and second.generation_id == 1
        assert second.leader == second.member_id and len(second.members) == 1
