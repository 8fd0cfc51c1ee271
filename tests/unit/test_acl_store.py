"""The ACL log (security/acl_store.py): changes persisted, replayed on reopen, a record that
is no ACL refused by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from groupcoord.coordinator.security.acl_binding import AclBinding
from groupcoord.coordinator.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.acl_store import AclStore, decode_acl, encode_acl
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
