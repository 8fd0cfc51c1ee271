"""CreateAcls, DescribeAcls and DeleteAcls against Apache Kafka 4.x with StandardAuthorizer
(authorizer.class.name set, super.users=User:ANONYMOUS so the PLAINTEXT client may manage
ACLs) and groupcoord with its authorizer: the same ACLs created on both, then the same
filters described and deleted; the answers compared (resources and ACLs as sets: Kafka
groups them in hash order)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jvm.artifacts import JvmArtifactsMissing, classpath
from tests.jvm.kafka_broker import KafkaBroker
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm]

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
VERSION = 3
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# (resource type, name, pattern type, principal, host, operation, permission)
ACLS = [
    (2, "orders", 3, "User:alice", "*", 3, 3),
    (2, "orders", 3, "User:bob", "*", 4, 2),
    (2, "ord", 4, "User:alice", "*", 8, 3),
    (2, "*", 3, "User:*", "*", 8, 3),
    (2, "orders-eu", 3, "User:carol", "10.0.0.1", 2, 3),
    (3, "team-a.", 4, "User:alice", "*", 3, 3),
    (3, "team-a.consumers", 3, "User:bob", "*", 6, 2),
    (4, "kafka-cluster", 3, "User:admin", "*", 7, 3),
    (4, "kafka-cluster", 3, "User:ops", "*", 10, 3),
    (5, "tx-", 4, "User:alice", "*", 4, 3),
]
# Creations Kafka refuses one by one (INVALID_REQUEST), between valid ones.
BAD_CREATIONS = [
    (4, "my-cluster", 3, "User:x", "*", 7, 3),
    (2, "", 3, "User:x", "*", 3, 3),
    (2, "t", 3, "nocolon", "*", 3, 3),
]
# (resource type, name, pattern type, principal, host, operation, permission) filters.
FILTERS = [
    (1, None, 1, None, None, 1, 1),  # everything
    (2, None, 1, None, None, 1, 1),  # every topic ACL
    (2, "orders", 2, None, None, 1, 1),  # MATCH: literal, wildcard and prefixes of it
    (2, "orders", 1, None, None, 1, 1),  # ANY pattern: exactly that name
    (2, "ord", 4, None, None, 1, 1),  # PREFIXED, exact name
    (2, "ord", 3, None, None, 1, 1),  # LITERAL: none
    (3, "team-a.consumers", 2, None, None, 1, 1),
    (1, None, 1, "User:alice", None, 1, 1),
    (1, None, 1, None, "10.0.0.1", 1, 1),
    (1, None, 1, None, None, 8, 1),  # DESCRIBE only (no implication in filters)
    (1, None, 1, None, None, 1, 2),  # DENY only
    (1, None, 3, None, None, 1, 1),  # LITERAL, any name
    (4, "kafka-cluster", 2, "User:ops", None, 10, 3),
    (5, "tx-1", 2, None, None, 1, 1),
    (2, "nothing", 3, None, None, 1, 1),
]
MATCH_CREATION = (2, "m", 2, "User:x", "*", 3, 3)
# Filters with codes Kafka reads as UNKNOWN (9: no such resource type or operation).
UNKNOWN_FILTERS = [(9, None, 1, None, None, 1, 1), (1, None, 1, None, None, 99, 1)]
# DeleteAcls filters, applied in order (two in one request, to show overlap).
DELETIONS = [
    [(2, "orders", 2, None, None, 1, 2), (1, None, 1, "User:bob", None, 1, 1)],
    [(3, None, 4, None, None, 1, 1)],
    [(1, None, 1, None, None, 1, 1)],
]


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The reference broker with StandardAuthorizer (a variant of `reference_kafka`)."""
    try:
        classpath("broker")
    except JvmArtifactsMissing as exc:
        pytest.fail(f"reference Kafka unavailable: {exc}", pytrace=False)
    overrides = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-acls"), overrides)
    try:
        # A generous bound: the machine is shared, and the authorizer waits for the
        # metadata log before the broker listens.
        yield broker.start(timeout_s=240)
    finally:
        broker.stop()


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", authorizer_enabled="true", super_users="User:ANONYMOUS") as p:
        yield p


def _create(client: RawClient, acls: list[tuple[Any, ...]]) -> list[tuple[int, str | None]]:
    cls = request_class(CREATE_ACLS, VERSION)
    module = __import__(cls.__module__, fromlist=["AclCreation"])
    creations = tuple(
        module.AclCreation(
            resource_type=t,
            resource_name=n,
            resource_pattern_type=p,
            principal=pr,
            host=h,
            operation=o,
            permission_type=pe,
        )
        for t, n, p, pr, h, o, pe in acls
    )
    response = client.request(CREATE_ACLS, VERSION, cls(creations=creations))
    return [(int(r.error_code), r.error_message) for r in response.results]


def _describe(client: RawClient, f: tuple[Any, ...]) -> tuple[int, set[tuple[Any, ...]]]:
    cls = request_class(DESCRIBE_ACLS, VERSION)
    t, n, p, pr, h, o, pe = f
    response = client.request(
        DESCRIBE_ACLS,
        VERSION,
        cls(
            resource_type_filter=t,
            resource_name_filter=n,
            pattern_type_filter=p,
            principal_filter=pr,
            host_filter=h,
            operation=o,
            permission_type=pe,
        ),
    )
    found = {
        (
            int(r.resource_type),
            r.resource_name,
            int(r.pattern_type),
            a.principal,
            a.host,
            int(a.operation),
            int(a.permission_type),
        )
        for r in response.resources
        for a in r.acls
    }
    return int(response.error_code), found


def _delete(
    client: RawClient, filters: list[tuple[Any, ...]]
) -> list[tuple[int, set[tuple[Any, ...]]]]:
    cls = request_class(DELETE_ACLS, VERSION)
    module = __import__(cls.__module__, fromlist=["DeleteAclsFilter"])
    body = cls(
        filters=tuple(
            module.DeleteAclsFilter(
                resource_type_filter=t,
                resource_name_filter=n,
                pattern_type_filter=p,
                principal_filter=pr,
                host_filter=h,
                operation=o,
                permission_type=pe,
            )
            for t, n, p, pr, h, o, pe in filters
        )
    )
    response = client.request(DELETE_ACLS, VERSION, body)
    return [
        (
            int(r.error_code),
            r.error_message,
            {
                (
                    int(m.resource_type),
                    m.resource_name,
                    int(m.pattern_type),
                    m.principal,
                    m.host,
                    int(m.operation),
                    int(m.permission_type),
                    int(m.error_code),
                    m.error_message,
                )
                for m in r.matching_acls
            },
        )
        for r in response.filter_results
    ]


def _script(bootstrap: str) -> list[Any]:
    """Everything the scenario observes on one broker."""
    seen: list[Any] = []
    with RawClient(bootstrap, timeout_s=30) as client:
        seen.append(("create", _create(client, ACLS[:5] + BAD_CREATIONS + ACLS[5:])))
        seen.append(("create again", _create(client, ACLS[:2])))
        # A filter's MATCH in a creation: Kafka cannot build the ACL, the request fails.
        seen.append(("create match", [c for c, _ in _create(client, [ACLS[0], MATCH_CREATION])]))
        seen.append(("delete unknown", _delete(client, UNKNOWN_FILTERS)))
        # Kafka answers CreateAcls/DeleteAcls once the controller committed the change; its
        # broker's authorizer applies it from the metadata log a moment later, so a describe
        # right after may not see it yet (groupcoord applies before answering). Wait for it.
        _settled(client, lambda found: len(found) >= len(ACLS))
        for f in FILTERS:
            seen.append(("describe", f, _describe(client, f)))
        for filters in DELETIONS:
            deleted = _delete(client, filters)
            seen.append(("delete", filters, deleted))
            gone = {m[:7] for _, _, matching in deleted for m in matching if m[7] == 0}
            seen.append(("after", _settled(client, lambda found, gone=gone: not found & gone)))
    return seen


def _settled(
    client: RawClient, done: Callable[[set[tuple[Any, ...]]], bool]
) -> tuple[int, set[tuple[Any, ...]]]:
    """Describe every ACL until `done(found)` (at most 30 s); the last answer."""
    deadline = time.monotonic() + 30
    answer = _describe(client, FILTERS[0])
    while not done(answer[1]) and time.monotonic() < deadline:
        time.sleep(0.1)
        answer = _describe(client, FILTERS[0])
    return answer


def test_acl_apis_answer_as_kafka(acl_kafka: KafkaBroker, ours: ServerProcess) -> None:
    theirs = _script(acl_kafka.bootstrap)
    mine = _script(ours.bootstrap)
    codes = [code for code, _ in theirs[0][1]]
    assert codes == [0] * 5 + [42] * 3 + [0] * 5  # the scenario is sound
    differences = [(k, t, m) for k, (t, m) in enumerate(zip(theirs, mine, strict=True)) if t != m]
    assert not differences, "\n".join(
        f"{k}: kafka {t!r}\n   ours  {m!r}" for k, t, m in differences
    )
