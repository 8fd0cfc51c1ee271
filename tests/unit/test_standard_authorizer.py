"""The ACL decision (security/standard_authorizer.py) on the scenarios of Kafka's
StandardAuthorizerTest (kafka-security.md section 8, 28-34)."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.security.acl_binding import (
    AclBinding,
    AclBindingFilter,
    java_host,
)
from groupcoord.coordinator.security.acl_model import (
    AclOperation as Op,
)
from groupcoord.coordinator.security.acl_model import (
    AclPermissionType as Perm,
)
from groupcoord.coordinator.security.acl_model import (
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.standard_authorizer import StandardAuthorizer

TOPIC = ResourceType.TOPIC
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
ALLOW = Perm.ALLOW
DENY = Perm.DENY


def acl(
    name: str,
    principal: str,
    op: Op,
    perm: Perm = ALLOW,
    pattern: PatternType = LIT,
    host: str = "*",
    rtype: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, allow_everyone: bool = False, **kw: object) -> StandardAuthorizer:
    a = StandardAuthorizer(allow_everyone_if_no_acl_found=allow_everyone, **kw)  # type: ignore[arg-type]
    for entry in acls:
        assert a.add(entry)
    return a


def ok(a: StandardAuthorizer, principal: str, op: Op, name: str, host: str = "127.0.0.1") -> bool:
    return a.authorize(principal, host, op, TOPIC, name)


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_allow_everyone_if_no_acl_found(allow_everyone: bool) -> None:
    # 28: Bob is denied on topic1 (it has ACLs), and topic2 follows the setting.
    a = authorizer(acl("topic1", "User:Alice", Op.READ), allow_everyone=allow_everyone)
    assert not ok(a, "User:Bob", Op.READ, "topic1")
    assert ok(a, "User:Bob", Op.READ, "topic2") is allow_everyone
    assert ok(a, "User:Alice", Op.READ, "topic1")


def test_find_result_implication() -> None:
    # 29: ALLOW of DESCRIBE/READ/WRITE/DELETE/ALTER satisfy DESCRIBE, CREATE does not.
    for op in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL):
        assert ok(authorizer(acl("foo", "User:a", op)), "User:a", Op.DESCRIBE, "foo"), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert not ok(authorizer(acl("foo", "User:a", op)), "User:a", Op.DESCRIBE, "foo"), op
    # DENY of an implying operation does not deny DESCRIBE; DENY DESCRIBE does.
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = authorizer(acl("foo", "User:a", Op.DESCRIBE), acl("foo", "User:a", op, DENY))
        assert ok(a, "User:a", Op.DESCRIBE, "foo"), op
    a = authorizer(acl("foo", "User:a", Op.READ), acl("foo", "User:a", Op.DESCRIBE, DENY))
    assert not ok(a, "User:a", Op.DESCRIBE, "foo")
    assert ok(a, "User:a", Op.READ, "foo")
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS; its DENY does not deny DESCRIBE_CONFIGS.
    assert ok(
        authorizer(acl("foo", "User:a", Op.ALTER_CONFIGS)), "User:a", Op.DESCRIBE_CONFIGS, "foo"
    )
    a = authorizer(
        acl("foo", "User:a", Op.DESCRIBE_CONFIGS), acl("foo", "User:a", Op.ALTER_CONFIGS, DENY)
    )
    assert ok(a, "User:a", Op.DESCRIBE_CONFIGS, "foo")
    assert not ok(a, "User:a", Op.ALTER_CONFIGS, "foo")


def test_deny_precedence_with_operation_all() -> None:
    # 30
    a = authorizer(
        acl("foo", "User:alice", Op.ALL, DENY),
        acl("foo", "User:alice", Op.READ, ALLOW, PRE),
        acl("foo", "User:*", Op.ALL, DENY),
        acl("foo", "User:*", Op.DESCRIBE, ALLOW, PRE),
    )
    for op in (Op.WRITE, Op.READ, Op.DESCRIBE):
        assert not ok(a, "User:alice", op, "foo")
    assert ok(a, "User:alice", Op.READ, "foobar")
    assert ok(a, "User:bob", Op.DESCRIBE, "foobaz")
    assert not ok(a, "User:bob", Op.READ, "foobaz")


def test_prefix_acls() -> None:
    # 31
    a = authorizer(
        acl("fooa", "User:alice", Op.ALL, ALLOW, PRE),
        acl("foobar", "User:bob", Op.ALL),
        acl("f", "User:bob", Op.ALL, ALLOW, PRE),
    )
    assert ok(a, "User:bob", Op.WRITE, "foobarr")
    assert not ok(a, "User:bob", Op.READ, "goobar")
    assert ok(a, "User:bob", Op.READ, "fooa")
    assert ok(a, "User:alice", Op.DESCRIBE, "fooa")
    assert not ok(a, "User:alice", Op.WRITE, "bar")


def test_host_address_acls() -> None:
    # 32
    a = authorizer(
        acl("foo", "User:alice", Op.READ, DENY, host="192.168.1.1"),
        acl("foo", "User:alice", Op.READ),
        acl("bar", "User:bob", Op.READ, host="192.168.1.2"),
    )
    assert not ok(a, "User:alice", Op.READ, "foo", host="192.168.1.1")
    assert ok(a, "User:alice", Op.READ, "foo", host="192.168.1.2")
    assert not ok(a, "User:bob", Op.READ, "bar", host="127.0.0.1")
    assert ok(a, "User:bob", Op.READ, "bar", host="192.168.1.2")


def test_cidr_deny_narrow_allow_wide() -> None:
    # 34 (Kafka 4.4, KIP-1276)
    a = authorizer(
        acl("foo", "User:a", Op.READ, host="10.0.0.0/8"),
        acl("foo", "User:a", Op.READ, DENY, host="10.0.1.0/24"),
    )
    assert not ok(a, "User:a", Op.READ, "foo", host="10.0.1.5")
    assert ok(a, "User:a", Op.READ, "foo", host="10.0.2.1")
    assert not ok(a, "User:a", Op.READ, "foo", host="11.0.0.1")


def test_ipv6_hosts_are_compared_as_java_prints_them() -> None:
    assert java_host("::1") == "0:0:0:0:0:0:0:1"
    assert java_host("fe80::0a:1") == "fe80:0:0:0:0:0:a:1"
    a = authorizer(acl("foo", "User:a", Op.READ, host="0:0:0:0:0:0:0:1"))
    assert ok(a, "User:a", Op.READ, "foo", host="::1")


def test_super_users_win_over_deny() -> None:
    # 33's super user, and super users pass whatever DENY says.
    a = authorizer(acl("foo", "User:*", Op.ALL, DENY), super_users=["User:superman"])
    assert ok(a, "User:superman", Op.WRITE, "foo")
    assert not ok(a, "User:bob", Op.WRITE, "foo")
    assert StandardAuthorizer.from_settings(" User:a ; User:CN=b,O=x;", False, 10).super_users == {
        "User:a",
        "User:CN=b,O=x",
    }


def test_wildcards() -> None:
    a = authorizer(acl("*", "User:*", Op.DELETE))
    assert ok(a, "User:anyone", Op.DELETE, "t")
    assert ok(a, "User:anyone", Op.DESCRIBE, "t")
    assert not ok(a, "User:anyone", Op.READ, "t")
    # Group:* is no wildcard; a PREFIXED "*" is the prefix "*", not a wildcard.
    assert not ok(authorizer(acl("t", "Group:*", Op.READ)), "Group:x", Op.READ, "t")
    b = authorizer(acl("*", "User:a", Op.READ, ALLOW, PRE))
    assert not ok(b, "User:a", Op.READ, "t")
    assert ok(b, "User:a", Op.READ, "*t")


def test_resource_types_are_separate() -> None:
    a = authorizer(acl("g", "User:a", Op.READ, rtype=ResourceType.GROUP))
    assert a.authorize("User:a", "h", Op.READ, ResourceType.GROUP, "g")
    assert not a.authorize("User:a", "h", Op.READ, ResourceType.TOPIC, "g")


def test_cache_is_emptied_on_every_change_and_bounded() -> None:
    a = authorizer(cache_entries=3)
    entry = acl("foo", "User:a", Op.READ)
    assert not ok(a, "User:a", Op.READ, "foo")
    a.add(entry)
    assert ok(a, "User:a", Op.READ, "foo")
    a.add(acl("f", "User:a", Op.READ, DENY, PRE))
    assert not ok(a, "User:a", Op.READ, "foo")
    a.remove(acl("f", "User:a", Op.READ, DENY, PRE))
    assert ok(a, "User:a", Op.READ, "foo")
    for i in range(10):
        ok(a, "User:a", Op.READ, f"t{i}")
    assert len(a._cache) <= 3
    none = authorizer(entry, cache_entries=0)
    assert ok(none, "User:a", Op.READ, "foo") and not none._cache


def test_remove_keeps_the_prefix_index_right() -> None:
    a = authorizer(
        acl("ab", "User:a", Op.READ, ALLOW, PRE), acl("cd", "User:a", Op.READ, ALLOW, PRE)
    )
    assert a.remove(acl("ab", "User:a", Op.READ, ALLOW, PRE))
    assert not a.remove(acl("ab", "User:a", Op.READ, ALLOW, PRE))
    assert ok(a, "User:a", Op.READ, "cde")
    assert not ok(a, "User:a", Op.READ, "abc")
    assert a.remove(acl("cd", "User:a", Op.READ, ALLOW, PRE))
    assert not a._prefix_lengths and not a._prefixed and not a._literal


def test_authorize_by_resource_type() -> None:
    def by_type(a: StandardAuthorizer, principal: str = "User:a") -> bool:
        return a.authorize_by_resource_type(principal, "1.2.3.4", Op.WRITE, TOPIC)

    assert not by_type(authorizer())
    assert by_type(authorizer(allow_everyone=True))
    assert by_type(authorizer(super_users=["User:a"]))
    assert by_type(authorizer(acl("t1", "User:a", Op.WRITE)))
    assert by_type(authorizer(acl("t1", "User:*", Op.ALL)))
    # No implication: READ does not count for WRITE (Kafka's idempotent-producer check).
    assert not by_type(authorizer(acl("t1", "User:a", Op.READ)))
    assert not by_type(authorizer(acl("t1", "User:b", Op.WRITE)))
    assert not by_type(
        authorizer(acl("t1", "User:a", Op.WRITE), acl("t1", "User:a", Op.WRITE, DENY))
    )
    assert not by_type(
        authorizer(acl("t1", "User:a", Op.WRITE), acl("t", "User:a", Op.WRITE, DENY, PRE))
    )
    assert by_type(
        authorizer(acl("t1", "User:a", Op.WRITE), acl("t2", "User:a", Op.WRITE, DENY, PRE))
    )
    assert not by_type(authorizer(acl("*", "User:a", Op.WRITE), acl("*", "User:a", Op.WRITE, DENY)))
    assert by_type(authorizer(acl("*", "User:a", Op.WRITE), acl("x", "User:a", Op.WRITE, DENY)))
    assert by_type(authorizer(acl("pre", "User:a", Op.WRITE, ALLOW, PRE)))
    assert not by_type(authorizer(acl("t1", "User:a", Op.WRITE, host="9.9.9.9")))


def test_filters() -> None:
    acls = [
        acl("foo", "User:a", Op.READ),
        acl("*", "User:a", Op.READ),
        acl("fo", "User:a", Op.READ, pattern=PRE),
        acl("foobar", "User:b", Op.WRITE, DENY),
        acl("g", "User:a", Op.READ, rtype=ResourceType.GROUP),
    ]
    a = authorizer(*acls)

    def names(
        rtype: ResourceType, name: str | None, pattern: PatternType, **kw: object
    ) -> set[str]:
        f = AclBindingFilter(
            rtype,
            name,
            pattern,
            kw.get("principal"),  # type: ignore[arg-type]
            kw.get("host"),  # type: ignore[arg-type]
            kw.get("op", Op.ANY),  # type: ignore[arg-type]
            kw.get("perm", Perm.ANY),  # type: ignore[arg-type]
        )
        return {b.resource_name for b in a.acls(f)}

    assert names(ResourceType.ANY, None, PatternType.ANY) == {"foo", "*", "fo", "foobar", "g"}
    assert names(TOPIC, "foo", PatternType.MATCH) == {"foo", "*", "fo"}
    assert names(TOPIC, "foo", PatternType.ANY) == {"foo"}
    assert names(TOPIC, "fo", PatternType.LITERAL) == set()
    assert names(TOPIC, "fo", PatternType.PREFIXED) == {"fo"}
    assert names(TOPIC, None, PatternType.LITERAL) == {"foo", "*", "foobar"}
    assert names(TOPIC, None, PatternType.MATCH) == {"foo", "*", "fo", "foobar"}
    assert names(ResourceType.ANY, None, PatternType.ANY, principal="User:b") == {"foobar"}
    assert names(ResourceType.ANY, None, PatternType.ANY, perm=DENY) == {"foobar"}
    assert names(ResourceType.ANY, None, PatternType.ANY, op=Op.WRITE) == {"foobar"}
    assert names(ResourceType.ANY, None, PatternType.ANY, host="1.2.3.4") == set()
