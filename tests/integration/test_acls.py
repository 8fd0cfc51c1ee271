"""CreateAcls / DescribeAcls / DeleteAcls against the real server: confluent-kafka's and
kafka-python's admin clients, Kafka's errors (raw client), the cluster gate, ACLs across
SIGKILL and restart, and a damaged ACL log reported by name."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType

from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
INVALID_REQUEST, CLUSTER_AUTH, SECURITY_DISABLED, UNKNOWN_SERVER_ERROR = 42, 31, 54, -1


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An authorizer, the PLAINTEXT client (User:ANONYMOUS) a super user."""
    data = tmp_path_factory.mktemp("acls") / "data"
    with serving(data, authorizer_enabled="true", super_users="User:ANONYMOUS") as proc:
        yield proc


def _admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _binding(
    name: str,
    principal: str = "User:alice",
    op: AclOperation = AclOperation.READ,
    perm: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    rtype: ResourceType = ResourceType.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def _create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _describe(admin: AdminClient, f: AclBindingFilter) -> set[tuple[Any, ...]]:
    found = admin.describe_acls(f).result(timeout=30)
    return {
        (
            b.restype,
            b.name,
            b.resource_pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        )
        for b in found
    }


def _key(b: AclBinding) -> tuple[Any, ...]:
    return (
        b.restype,
        b.name,
        b.resource_pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )


ANY_FILTER = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def test_confluent_admin_creates_describes_and_deletes(acl_server: ServerProcess) -> None:
    admin = _admin(acl_server)
    bindings = [
        _binding("orders"),
        _binding("orders", "User:bob", AclOperation.WRITE, AclPermissionType.DENY),
        _binding("ord", pattern=ResourcePatternType.PREFIXED),
        _binding("*", "User:*", AclOperation.DESCRIBE),
        _binding("team-a.", rtype=ResourceType.GROUP, pattern=ResourcePatternType.PREFIXED),
        _binding(
            "kafka-cluster", op=AclOperation.ALTER, rtype=ResourceType.BROKER, host="10.0.0.1"
        ),
    ]
    _create(admin, bindings)
    _create(admin, bindings[:1])  # creating an existing ACL succeeds and adds nothing
    assert _describe(admin, ANY_FILTER) == {_key(b) for b in bindings}
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert _describe(admin, match) == {_key(b) for b in bindings[:4]}
    deny = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.DENY,
    )
    assert _describe(admin, deny) == {_key(bindings[1])}

    deleted = admin.delete_acls([deny, match])
    results = {f: future.result(timeout=30) for f, future in deleted.items()}
    # An ACL matching both filters is listed under both, as Kafka does.
    assert {_key(b) for b in results[deny]} == {_key(bindings[1])}
    assert {_key(b) for b in results[match]} == {_key(b) for b in bindings[:4]}
    assert _describe(admin, ANY_FILTER) == {_key(b) for b in bindings[4:]}
    for future in admin.delete_acls([ANY_FILTER]).values():
        future.result(timeout=30)
    assert _describe(admin, ANY_FILTER) == set()


def test_kafka_python_admin(acl_server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=acl_server.bootstrap, request_timeout_ms=30_000)
    try:
        acl = ACL(
            principal="User:carol",
            host="*",
            operation=ACLOperation.WRITE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(
                KpResourceType.TOPIC, "kp-topic", ACLResourcePatternType.LITERAL
            ),
        )
        created = admin.create_acls([acl])
        assert created["succeeded"] == [acl] and not created["failed"]
        acl_filter = ACLFilter(
            principal="User:carol",
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                KpResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        found, error = admin.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:carol", ACLOperation.WRITE, "kp-topic")
        ]
        [(_f, matching, error)] = admin.delete_acls([acl_filter])
        assert error.errno == 0 and [a.resource_pattern.resource_name for a in matching] == [
            "kp-topic"
        ]
        assert admin.describe_acls(acl_filter)[0] == []
    finally:
        admin.close()


def _creation(version: int, **kw: Any) -> Any:
    cls = request_class(CREATE_ACLS, version)
    creation = dict(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:x",
        host="*",
        operation=3,
        permission_type=3,
    )
    creation.update(kw)
    module = __import__(cls.__module__, fromlist=["AclCreation"])
    return module.AclCreation(**creation)


def _create_raw(
    server: ServerProcess, version: int, creations: list[Any]
) -> list[tuple[int, str | None]]:
    cls = request_class(CREATE_ACLS, version)
    with RawClient(server.bootstrap) as client:
        response = client.request(CREATE_ACLS, version, cls(creations=tuple(creations)))
    return [(r.error_code, r.error_message) for r in response.results]


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_acls_errors_are_kafkas(acl_server: ServerProcess, version: int) -> None:
    c = lambda **kw: _creation(version, **kw)  # noqa: E731
    results = _create_raw(
        acl_server,
        version,
        [
            c(resource_name=f"ok-{version}"),
            c(resource_type=4, resource_name="my-cluster"),
            c(resource_name=""),
            c(principal="alice"),
            c(host=""),
            c(host="10.0.0.0/99"),
            c(operation=0),
            c(resource_type=9),
        ],
    )
    assert [code for code, _ in results] == [0] + [INVALID_REQUEST] * 7
    assert results[1][1] == "The only valid name for the CLUSTER resource is kafka-cluster"
    assert results[2][1] == "Invalid empty resource name"
    assert results[3][1] is not None and results[3][1].startswith(
        "Could not parse principal from `alice`"
    )
    assert results[6][1] == "Invalid operation UNKNOWN"
    assert results[7][1] == "Invalid resourceType UNKNOWN"
    # A filter's ANY or MATCH in a creation: Kafka cannot build the ACL and the whole
    # request fails.
    results = _create_raw(
        acl_server, version, [c(resource_name="fine"), c(resource_pattern_type=2)]
    )
    assert [code for code, _ in results] == [UNKNOWN_SERVER_ERROR] * 2


def _describe_raw(server: ServerProcess, version: int = 3) -> tuple[int, list[Any]]:
    cls = request_class(DESCRIBE_ACLS, version)
    with RawClient(server.bootstrap) as client:
        response = client.request(
            DESCRIBE_ACLS,
            version,
            cls(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
        )
    return response.error_code, list(response.resources)


def test_delete_and_describe_filter_errors(acl_server: ServerProcess) -> None:
    delete_cls = request_class(DELETE_ACLS, 3)
    module = __import__(delete_cls.__module__, fromlist=["DeleteAclsFilter"])

    def f(**kw: Any) -> Any:
        values = dict(
            resource_type_filter=1,
            resource_name_filter="nothing-matches",
            pattern_type_filter=1,
            principal_filter=None,
            host_filter=None,
            operation=1,
            permission_type=1,
        )
        values.update(kw)
        return module.DeleteAclsFilter(**values)

    with RawClient(acl_server.bootstrap) as client:
        response = client.request(
            DELETE_ACLS, 3, delete_cls(filters=(f(), f(pattern_type_filter=0), f(operation=0)))
        )
        assert [
            (r.error_code, r.error_message, r.matching_acls) for r in response.filter_results
        ] == [
            (0, None, ()),
            (INVALID_REQUEST, "Unknown patternFilter.", ()),
            (INVALID_REQUEST, "Unknown entryFilter.", ()),
        ]
        describe_cls = request_class(DESCRIBE_ACLS, 3)
        response = client.request(
            DESCRIBE_ACLS,
            3,
            describe_cls(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=0,
                permission_type=1,
            ),
        )
        assert (response.error_code, response.error_message) == (
            INVALID_REQUEST,
            "Unknown entryFilter.",
        )


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(server: ServerProcess) -> None:
    assert _create_raw(server, 3, [_creation(3)]) == [
        (SECURITY_DISABLED, "No Authorizer is configured.")
    ]
    assert _describe_raw(server) == (SECURITY_DISABLED, [])
    # librdkafka drops DescribeAcls' top-level error (a known librdkafka behaviour): the
    # listing is just empty; Create and Delete carry it per result.
    admin = _admin(server)
    assert admin.describe_acls(ANY_FILTER).result(timeout=30) == []
    with pytest.raises(KafkaException) as raised:
        for future in admin.delete_acls([ANY_FILTER]).values():
            future.result(timeout=30)
    assert raised.value.args[0].code() == SECURITY_DISABLED


def test_acls_survive_sigkill_damage_is_reported_and_the_cluster_gate_holds(
    tmp_path: Path,
) -> None:
    """allow_everyone_if_no_acl_found: User:ANONYMOUS may alter the cluster while no ACL
    names it. Acknowledged ACLs survive a SIGKILL. A flipped byte in the first ACL batch
    (found after a SIGKILL): the server names the ACL log and the offsets lost, counts it,
    and keeps the ACLs after it. Once the cluster has an ACL for someone else, ANONYMOUS
    gets CLUSTER_AUTHORIZATION_FAILED on every ACL API."""
    with serving(
        tmp_path / "data", authorizer_enabled="true", allow_everyone_if_no_acl_found="true"
    ) as proc:
        admin = _admin(proc)
        first = _binding("first")
        _create(admin, [first])  # batch 0, alone
        bindings = [_binding(f"topic-{i}", f"User:u{i % 7}") for i in range(50)]
        bindings.append(
            _binding("p-", pattern=ResourcePatternType.PREFIXED, perm=AclPermissionType.DENY)
        )
        _create(admin, bindings)
        doomed = AclBindingFilter(
            ResourceType.TOPIC,
            "topic-3",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for future in admin.delete_acls([doomed]).values():
            assert len(future.result(timeout=30)) == 1
        proc.kill()  # right after the acknowledgements: no clean stop
        proc.start()
        expected = {_key(b) for b in bindings if b.name != "topic-3"}
        assert _describe(_admin(proc), ANY_FILTER) == expected | {_key(first)}

        proc.kill()
        segment = next((proc.data_dir / "acls").glob("*.log"))
        data = bytearray(segment.read_bytes())
        data[80] ^= 0xFF  # inside the first batch's record
        segment.write_bytes(bytes(data))
        proc.start()
        reports = [line for line in proc.log_tail(400).splitlines() if "log damaged" in line]
        assert len(reports) == 1 and '"log": "acls"' in reports[0], reports
        assert str(proc.data_dir / "acls") in reports[0]
        assert '"offsets_dropped": [[0, 0]]' in reports[0], reports
        metrics = proc.metrics_text()
        assert 'groupcoord_storage_corrupt_batches_total{log="acls"} 1.0' in metrics
        admin = _admin(proc)
        assert _describe(admin, ANY_FILTER) == expected

        gate = _binding(
            "kafka-cluster", "User:admin", AclOperation.ALTER, rtype=ResourceType.BROKER
        )
        _create(admin, [gate])
        refused = _create_raw(proc, 3, [_creation(3, resource_name="late")])
        assert [code for code, _ in refused] == [CLUSTER_AUTH]
        assert _describe_raw(proc) == (CLUSTER_AUTH, [])


def test_the_acl_log_is_compacted_and_a_sigkill_meanwhile_keeps_exactly_the_live_acls(
    tmp_path: Path,
) -> None:
    """Create/delete cycles of 100 ACLs compact the ACL log again and again (issue 21); a
    SIGKILL while they run (during or between compactions) leaves, after the restart,
    exactly the live ACLs: those created up front, and the cycle in flight's only if its
    request was taken before the kill."""
    with serving(
        tmp_path / "data", authorizer_enabled="true", super_users="User:ANONYMOUS"
    ) as proc:
        admin = _admin(proc)
        live = [_binding(f"live-{i}", f"User:u{i % 3}") for i in range(20)]
        _create(admin, live)
        started: list[int] = []
        stop = threading.Event()

        def cycles() -> None:
            try:
                for k in itertools.count():
                    if stop.is_set():
                        return
                    started.append(k)
                    for future in admin.create_acls(_cycle(k), request_timeout=10).values():
                        future.result(timeout=30)
                    cycle_filter = AclBindingFilter(
                        ResourceType.TOPIC,
                        None,
                        ResourcePatternType.ANY,
                        f"User:cycle-{k}",
                        None,
                        AclOperation.ANY,
                        AclPermissionType.ANY,
                    )
                    deleting = admin.delete_acls([cycle_filter], request_timeout=10)
                    for future in deleting.values():
                        assert len(future.result(timeout=30)) == 100
            except KafkaException:
                return  # the server was killed

        worker = threading.Thread(target=cycles)
        worker.start()
        try:
            deadline = time.monotonic() + 120
            while proc.log_path.read_text().count("ACL log compacted") < 3:
                assert time.monotonic() < deadline and worker.is_alive(), proc.log_tail()
                time.sleep(0.05)
        finally:
            stop.set()
            proc.kill()  # amid the cycles: no clean stop
            worker.join(60)
        assert not worker.is_alive()
        proc.start()
        found = _describe(_admin(proc), ANY_FILTER)
        expected = {_key(b) for b in live}
        in_flight = {_key(b) for b in _cycle(started[-1])}
        assert found in (expected, expected | in_flight)
        log_bytes = sum(p.stat().st_size for p in (proc.data_dir / "acls").glob("*.log"))
        assert log_bytes < 2 * 1024 * 1024  # compacted: the cycles wrote more than that


def _cycle(k: int) -> list[AclBinding]:
    return [_binding(f"cycle-topic-{j}", f"User:cycle-{k}") for j in range(100)]
