"""Group limits against the real server over real sockets (issue 16, item 10): oversized
classic protocol metadata and SyncGroup assignments are refused with UNKNOWN_SERVER_ERROR
and never reach the shard logs (the server goes on answering), and past groups_max a
request that would create a group is refused GROUP_MAX_SIZE_REACHED, before and after a
SIGKILL and restart, while the existing groups go on."""

from __future__ import annotations

from pathlib import Path

from tests.integration import raw_groups as rg
from tests.integration.test_clients import create_topic
from tests.integration.test_kip848_raw import cg_heartbeat
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving

UNKNOWN_SERVER_ERROR = -1
GROUP_MAX_SIZE_REACHED = 81
LIMIT = 65_536
MARKER = b"OVERSIZED-GROUP-DATA"


def oversized() -> bytes:
    """A subscription of topic t padded past LIMIT with MARKER (found in no log after)."""
    return rg.subscription(["t"]) + MARKER * (2 * LIMIT // len(MARKER))


def assert_not_logged(server: ServerProcess) -> None:
    for path in server.data_dir.rglob("*.log"):
        assert MARKER not in path.read_bytes(), path


def limited(tmp_path: Path, **settings: object) -> ServerProcess:
    return ServerProcess(
        tmp_path / "data",
        [
            arg
            for name, value in {
                "group_member_metadata_bytes_max": LIMIT,
                "group_member_assignment_bytes_max": LIMIT,
                "group_initial_rebalance_delay_ms": 0,
                **settings,
            }.items()
            for arg in ("--set", f"{name}={value}")
        ],
    )


def test_oversized_join_group_metadata_is_refused_and_never_written(tmp_path: Path) -> None:
    server = limited(tmp_path).start()
    try:
        with RawClient(server.bootstrap) as client:
            for _ in range(10):  # ten members, each with 128 KiB of metadata
                refused = rg.join(client, "big", protocols=[("range", oversized())], version=3)
                assert refused.error_code == UNKNOWN_SERVER_ERROR
                assert refused.member_id == ""
            # The server goes on answering, and a member of normal size joins.
            joined = rg.join_until_member(client, "big")
            assert joined.error_code == 0 and joined.leader == joined.member_id
            assert rg.sync(client, "big", 1, joined.member_id, {}).error_code == 0
        server.kill()
        assert_not_logged(server)
    finally:
        server.kill()


def test_oversized_sync_group_assignment_is_refused_and_never_written(tmp_path: Path) -> None:
    server = limited(tmp_path).start()
    try:
        with RawClient(server.bootstrap) as client:
            leader = rg.join_until_member(client, "g")
            assert leader.error_code == 0
            member_id = leader.member_id
            refused = rg.sync(client, "g", 1, member_id, {member_id: MARKER * LIMIT})
            assert refused.error_code == UNKNOWN_SERVER_ERROR
            # The group rebalances: the member rejoins and syncs a normal assignment.
            assert rg.heartbeat(client, "g", 1, member_id).error_code == 27  # rejoin
            again = rg.join(client, "g", member_id=member_id)
            assert again.error_code == 0 and again.generation_id == 2
            assert rg.sync(client, "g", 2, member_id, {member_id: b"ok"}).error_code == 0
        server.kill()
        assert_not_logged(server)
    finally:
        server.kill()


def commit_error(client: RawClient, group: str) -> int:
    response = rg.commit(client, group, {("t", 0): 7})
    (error,) = {p.error_code for topic in response.topics for p in topic.partitions}
    return int(error)


def test_groups_max_refuses_new_groups_across_a_restart(tmp_path: Path) -> None:
    with serving(tmp_path / "data", groups_max=3) as server:
        create_topic(server.bootstrap, "t", 1)
        with RawClient(server.bootstrap) as client:
            for group in ("g1", "g2", "g3"):
                assert commit_error(client, group) == 0  # OffsetCommit, generation -1
            assert commit_error(client, "g4") == GROUP_MAX_SIZE_REACHED
            joined = cg_heartbeat(
                client, "g5", "member-1", 0, topics=["t"], owned={}, rebalance_timeout_ms=30_000
            )
            assert joined.error_code == GROUP_MAX_SIZE_REACHED
            assert "groups_max" in joined.error_message
            assert rg.join(client, "g6", version=3).error_code == GROUP_MAX_SIZE_REACHED
            assert commit_error(client, "g1") == 0  # an existing group goes on
        server.kill()
        server.start()
        with RawClient(server.bootstrap) as client:
            assert commit_error(client, "g4") == GROUP_MAX_SIZE_REACHED
            for group in ("g1", "g2", "g3"):
                assert rg.fetch_offsets(client, group, {"t": [0]}) == {("t", 0): 7}
            assert commit_error(client, "g2") == 0
