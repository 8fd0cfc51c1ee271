"""The ACL log (security/acl_store.py): changes persisted, replayed on reopen, a record that
is no ACL refused by name; compacted as it grows, safe against a crash at any step."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.security.acl_binding import AclBinding
from groupcoord.coordinator.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.acl_store import (
    COMPACT_SLACK_BYTES,
    AclStore,
    decode_acl,
    encode_acl,
)
from groupcoord.coordinator.security.standard_authorizer import StandardAuthorizer
from groupcoord.protocol.batches import DefaultRecordBatchBuilder, parse_header
from groupcoord.storage import DataDirError


def acl(name: str, perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, PatternType.LITERAL, "User:a", "*", AclOperation.READ, perm
    )


def reopened(directory: Path) -> StandardAuthorizer:
    authorizer = StandardAuthorizer()
    store = AclStore(directory, authorizer)
    store.open(salvage=False)
    store.close()
    return authorizer


def test_changes_are_replayed_in_order(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acls", StandardAuthorizer())
    store.open(salvage=False)

    async def changes() -> None:
        await store.change([acl("a"), acl("b"), acl("a")], [])
        await store.change([acl("c")], [acl("a")])
        await store.change([], [acl("nothing")])  # nothing to remove: nothing written
        await store.change([acl("a", AclPermissionType.DENY)], [])

    asyncio.run(changes())
    assert store.log is not None and store.log.next_offset == 5
    expected = [acl("b"), acl("c"), acl("a", AclPermissionType.DENY)]
    assert store.authorizer.acls() == expected
    store.close()
    assert reopened(tmp_path / "acls").acls() == expected


def test_encoding_round_trips() -> None:
    odd = AclBinding(
        ResourceType.GROUP,
        'a "quoted"\x1f name ✓',
        PatternType.PREFIXED,
        "User:CN=x,O=y",
        "10.0.0.0/8",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    assert decode_acl(encode_acl(odd)) == odd
    for bad in (
        b"[]",
        b'[2, "t", 3, "User:a", "*", 3, 99]',
        b"not json",
        b'[2, 5, 3, "p", "*", 3, 3]',
    ):
        with pytest.raises((ValueError, TypeError)):
            decode_acl(bad)


def test_a_record_that_is_no_acl_is_refused_by_name(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acls", StandardAuthorizer())
    log = store.open(salvage=False)
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    builder.append(0, 0, b'["garbage"]', b"x", [])
    data = builder.build()
    log.append(data, [parse_header(data)])
    log.flush()
    store.close()
    with pytest.raises(DataDirError, match=r"ACL log .*acls: the record at offset 0 is no ACL"):
        reopened(tmp_path / "acls")


# compaction ----------------------------------------------------------------------------

# An upper bound on the bytes of one ACL's record in its own batch (61-byte header, the
# record with the encoded ACL as key and value).
_ONE_ACL_BYTES = 200


def _cycles(store: AclStore, live: list[AclBinding], cycles: int) -> None:
    """`live` created, then `cycles` create/delete cycles of other ACLs: each change creates
    the next one and deletes the one before (one record batch each)."""

    async def run() -> None:
        await store.change(live, [])
        for i in range(cycles + 1):
            await store.change(
                [acl(f"cycle-{i}")] if i < cycles else [],
                [acl(f"cycle-{i - 1}")] if i else [],
            )

    asyncio.run(run())


@pytest.mark.parametrize(
    "cycles", [pytest.param(2_500), pytest.param(10_000, marks=pytest.mark.slow)]
)
def test_create_delete_cycles_leave_a_log_bounded_by_the_live_set(
    tmp_path: Path, cycles: int
) -> None:
    store = AclStore(tmp_path / "acls", StandardAuthorizer())
    store.open(salvage=False)
    live = [acl(f"live-{i}") for i in range(40)]
    _cycles(store, live, cycles)
    assert store.compactions >= cycles // 1_000
    log = store.log
    assert log is not None
    # Twice the live set's records, plus the changes since the last compaction (fewer than
    # the slack), plus the change that would trigger the next one.
    bound = 2 * len(live) * _ONE_ACL_BYTES + COMPACT_SLACK_BYTES + 2 * _ONE_ACL_BYTES
    on_disk = sum(p.stat().st_size for p in (tmp_path / "acls").glob("*.log"))
    assert log.size_bytes == on_disk <= bound
    assert log.segment_count <= 2  # the compacted segment and the active one
    store.close()
    assert reopened(tmp_path / "acls").acls() == live


def test_a_crash_at_any_step_of_a_compaction_replays_the_live_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory as a SIGKILL would leave it (every file write done, the process gone)
    before each rename and deletion of the compaction, and after it: each replays to
    exactly the ACLs live then (those of the change that triggered it included: it was
    durable before the compaction began)."""
    directory = tmp_path / "acls"
    store = AclStore(directory, StandardAuthorizer())
    store.open(salvage=False)
    live = [acl(f"live-{i}") for i in range(20)]
    snapshots: list[tuple[Path, list[AclBinding]]] = []

    def snapshot() -> None:
        copy = tmp_path / f"crash-{len(snapshots)}"
        shutil.copytree(directory, copy)
        snapshots.append((copy, store.authorizer.acls()))

    def before(call: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            snapshot()
            return call(*args, **kwargs)

        return wrapped

    async def run() -> None:
        await store.change(live, [])
        i = 0
        while store.log is not None and store.log.size_bytes < COMPACT_SLACK_BYTES - 1_000:
            await store.change([acl(f"cycle-{i + 1}")], [acl(f"cycle-{i}")] if i else [])
            i += 1
        await store.change([], [acl(f"cycle-{i}")])
        for name in ("rename", "replace", "unlink"):
            monkeypatch.setattr(os, name, before(getattr(os, name)))
        while not store.compactions:  # the change that reaches the threshold compacts
            i += 1
            await store.change([acl(f"cycle-{i}")], [])
            await store.change([], [acl(f"cycle-{i}")])
        monkeypatch.undo()
        snapshot()

    asyncio.run(run())
    store.close()
    assert len(snapshots) >= 5  # renames of the three files, the marker's deletion, after
    assert snapshots[-1][1] == live
    # Mid-swap states among them: the marker (the commit point) written, not yet removed.
    assert any((copy / "cleaner-swap").exists() for copy, _ in snapshots)
    for copy, expected in snapshots:
        assert reopened(copy).acls() == expected, copy
