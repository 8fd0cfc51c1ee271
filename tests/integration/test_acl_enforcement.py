"""Issue 21 item 4: every API checks what Kafka checks, against the real StandardAuthorizer.

One server per module: a PLAINTEXT listener whose client (User:ANONYMOUS) is a super user
and sets the scene, and a SASL_PLAINTEXT listener with two PLAIN users: alice owns the
`team-a` groups and `a-` topics (prefixed ACLs), mallory owns only `m-` ones. Mallory
replays the attacks of the issue's Why against alice's group and topic; each is refused
with Kafka's error and the victim is untouched. Then the ACL matrix (allowed with the ACL,
refused without, hidden where Kafka hides) and S48 (a regex subscription resolves only
the topics the member may DESCRIBE).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from groupcoord.protocol.acl_operations import GROUP_OPERATIONS_ALL
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, free_port, serving

TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH = 29, 30, 31
VICTIM_GROUP = "team-a-orders"
VICTIM_TOPIC = "a-orders"
VICTIM_INSTANCE = "a-consumer-1"


class Acl:
    def __init__(self, proc: ServerProcess, ports: dict[str, int]) -> None:
        self.proc = proc
        self.ports = ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def denials(self, api: str, resource_type: str) -> float:
        prefix = (
            f'groupcoord_authorization_denials_total{{api="{api}",resource_type="{resource_type}"}}'
        )
        for line in self.proc.metrics_text().splitlines():
            if line.startswith(prefix):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def _allow(principal: str, rtype: ResourceType, prefix: str, op: AclOperation) -> AclBinding:
    return AclBinding(
        rtype, prefix, ResourcePatternType.PREFIXED, principal, "*", op, AclPermissionType.ALLOW
    )


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acl]:
    tmp = tmp_path_factory.mktemp("acl-enforce")
    users = tmp / "plain-users"
    users.write_text("alice:alice-secret\nmallory:mallory-secret\n")
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT")}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    with serving(
        tmp / "data",
        listeners=listeners,
        sasl_plain_users_file=users,
        authorizer_enabled="true",
        super_users="User:ANONYMOUS",
        auto_create_topics="false",
    ) as proc:
        env = Acl(proc, ports)
        admin = AdminClient({"bootstrap.servers": env.bootstrap("PLAINTEXT")})
        bindings = [
            _allow(user, ResourceType.GROUP, group, AclOperation.ALL)
            for user, group in (("User:alice", "team-a"), ("User:mallory", "m-"))
        ] + [
            _allow(user, ResourceType.TOPIC, topic, AclOperation.ALL)
            for user, topic in (("User:alice", "a-"), ("User:mallory", "m-"))
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        topics = [NewTopic(t, 2, 1) for t in (VICTIM_TOPIC, "a-regex-1", "m-own", "m-regex-1")]
        for future in admin.create_topics(topics).values():
            future.result(timeout=30)
        yield env


def _sasl(acl: Acl, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": acl.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _login(acl: Acl, user: str) -> RawClient:
    client = RawClient(acl.bootstrap("SASL_PLAINTEXT"))
    assert _req(client, 17, 1, mechanism="PLAIN").error_code == 0
    token = f"\x00{user}\x00{user}-secret".encode()
    assert _req(client, 36, 2, auth_bytes=token).error_code == 0
    return client


def _req(client: RawClient, api_key: int, version: int, **fields: Any) -> Any:
    return client.request(api_key, version, request_class(api_key, version)(**fields))


def _entity(api_key: int, version: int, name: str) -> Any:
    import sys

    return getattr(sys.modules[request_class(api_key, version).__module__], name)


def _victim_state(acl: Acl) -> dict[str, Any]:
    """What the attacks must not change: alice's committed offsets, her static member, the
    topic's retention and its records (as the super user sees them)."""
    with RawClient(acl.bootstrap("PLAINTEXT")) as su:
        fetched = _req(su, 9, 8, groups=(_offset_fetch_group(VICTIM_GROUP),), require_stable=False)
        offsets = sorted(
            (p.partition_index, p.committed_offset)
            for t in fetched.groups[0].topics
            for p in t.partitions
        )
        described = _req(su, 15, 5, groups=(VICTIM_GROUP,), include_authorized_operations=False)
        members = sorted((m.member_id, m.group_instance_id) for m in described.groups[0].members)
    admin = AdminClient({"bootstrap.servers": acl.bootstrap("PLAINTEXT")})
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("TOPIC", VICTIM_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    consumer = Consumer({"bootstrap.servers": acl.bootstrap("PLAINTEXT"), "group.id": "su-probe"})
    try:
        marks = [
            consumer.get_watermark_offsets(TopicPartition(VICTIM_TOPIC, p), timeout=10)
            for p in (0, 1)
        ]
    finally:
        consumer.close()
    return {
        "offsets": offsets,
        "members": members,
        "state": described.groups[0].group_state,
        "retention": configs["retention.ms"].value,
        "marks": marks,
        "topics": set(admin.list_topics(timeout=10).topics),
    }


def _delete_records(client: RawClient, topics: dict[str, tuple[int, ...]]) -> dict[Any, Any]:
    """DeleteRecords v2 up to the high watermark: {(topic, partition): (low watermark,
    error code)}."""
    topic = _entity(21, 2, "DeleteRecordsTopic")
    part = _entity(21, 2, "DeleteRecordsPartition")
    answer = _req(
        client,
        21,
        2,
        topics=tuple(
            topic(name=name, partitions=tuple(part(partition_index=i, offset=-1) for i in indexes))
            for name, indexes in topics.items()
        ),
        timeout=datetime.timedelta(seconds=30),
    )
    return {
        (t.name, p.partition_index): (p.low_watermark, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def _offset_fetch_group(group: str) -> Any:
    return _entity(9, 8, "OffsetFetchRequestGroup")(group_id=group, topics=None)


def test_the_attacks_of_issue_21_are_refused_and_the_victim_is_untouched(acl: Acl) -> None:
    # Alice's team: records in the topic, a static classic member with committed offsets.
    producer = Producer(_sasl(acl, "alice"))
    for i in range(10):
        producer.produce(VICTIM_TOPIC, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **_sasl(acl, "alice"),
            "group.id": VICTIM_GROUP,
            "group.instance.id": VICTIM_INSTANCE,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 30000,
        }
    )
    consumer.subscribe([VICTIM_TOPIC])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == 10
    consumer.commit(asynchronous=False)
    before = _victim_state(acl)
    assert before["offsets"] == [(0, 5), (1, 5)]
    assert [i for _, i in before["members"]] == [VICTIM_INSTANCE]
    denials_before = acl.denials("JOIN_GROUP", "GROUP")

    with _login(acl, "mallory") as m:
        # 1. List the groups: alice's is hidden (not refused).
        listed = _req(m, 16, 4, states_filter=())
        assert listed.error_code == 0
        assert VICTIM_GROUP not in {g.group_id for g in listed.groups}
        # 2. Describe it to read the static member's instance id: refused, nothing shown.
        described = _req(m, 15, 5, groups=(VICTIM_GROUP,), include_authorized_operations=True)
        group = described.groups[0]
        assert (group.error_code, list(group.members)) == (GROUP_AUTH, [])
        # 3. Join with the instance id to fence alice's consumer: refused.
        protocol = _entity(11, 5, "JoinGroupRequestProtocol")(name="range", metadata=b"")
        joined = _req(
            m,
            11,
            5,
            group_id=VICTIM_GROUP,
            session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30),
            member_id="",
            group_instance_id=VICTIM_INSTANCE,
            protocol_type="consumer",
            protocols=(protocol,),
        )
        assert joined.error_code == GROUP_AUTH
        # 4. Reset its offsets to 0: every partition refused.
        part = _entity(8, 8, "OffsetCommitRequestPartition")
        topic = _entity(8, 8, "OffsetCommitRequestTopic")
        committed = _req(
            m,
            8,
            8,
            group_id=VICTIM_GROUP,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                topic(
                    name=VICTIM_TOPIC,
                    partitions=tuple(
                        part(
                            partition_index=i,
                            committed_offset=0,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for i in (0, 1)
                    ),
                ),
            ),
        )
        assert [p.error_code for t in committed.topics for p in t.partitions] == [GROUP_AUTH] * 2
        # 5. Delete the group: refused.
        deleted = _req(m, 42, 2, groups_names=(VICTIM_GROUP,))
        assert [r.error_code for r in deleted.results] == [GROUP_AUTH]
        # 6. Evict a KIP-848 member with a heartbeat at epoch -1: refused.
        beat = _req(
            m,
            68,
            0,
            group_id=VICTIM_GROUP,
            member_id=str(uuid.uuid4()),
            member_epoch=-1,
            topic_partitions=None,
        )
        assert beat.error_code == GROUP_AUTH
        # 7. Set retention.ms=1 on the topic: refused.
        resource = _entity(44, 1, "AlterConfigsResource")
        config = _entity(44, 1, "AlterableConfig")
        altered = _req(
            m,
            44,
            1,
            resources=(
                resource(
                    resource_type=2,
                    resource_name=VICTIM_TOPIC,
                    configs=(config(name="retention.ms", config_operation=0, value="1"),),
                ),
            ),
            validate_only=False,
        )
        assert [r.error_code for r in altered.responses] == [TOPIC_AUTH]
        # 8. Delete the topic: refused.
        gone = _req(m, 20, 4, topic_names=(VICTIM_TOPIC,), timeout=datetime.timedelta(seconds=30))
        assert [r.error_code for r in gone.responses] == [TOPIC_AUTH]
        # 9. Delete its records (DeleteRecords up to the high watermark): refused; on her own
        # topic (DELETE through her ALL) it moves the log start.
        records_gone = _delete_records(m, {VICTIM_TOPIC: (0, 1), "m-own": (0,)})
        assert records_gone == {
            (VICTIM_TOPIC, 0): (-1, TOPIC_AUTH),
            (VICTIM_TOPIC, 1): (-1, TOPIC_AUTH),
            ("m-own", 0): (0, 0),
        }
    after = _victim_state(acl)
    assert after == before
    assert acl.denials("JOIN_GROUP", "GROUP") == denials_before + 1
    consumer.close()


def test_acl_matrix_allowed_refused_hidden(acl: Acl) -> None:
    """For each API and resource: mallory may on her own `m-` resources, is refused on
    alice's, and alice's are hidden from her listings."""
    admin = AdminClient({"bootstrap.servers": acl.bootstrap("PLAINTEXT")})
    for future in admin.create_topics([NewTopic("m-matrix", 1, 1)]).values():
        future.result(timeout=30)
    with _login(acl, "mallory") as m:
        # Metadata: all topics hides alice's; by name: refused.
        everything = _req(
            m,
            3,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        )
        names = {t.name for t in everything.topics}
        assert "m-own" in names and VICTIM_TOPIC not in names
        own = next(t for t in everything.topics if t.name == "m-own")
        assert own.topic_authorized_operations > 0
        meta_topic = _entity(3, 12, "MetadataRequestTopic")
        by_name = _req(
            m,
            3,
            12,
            topics=(
                meta_topic(name=VICTIM_TOPIC, topic_id=uuid.UUID(int=0)),
                meta_topic(name="m-own", topic_id=uuid.UUID(int=0)),
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        assert {t.name: t.error_code for t in by_name.topics} == {
            VICTIM_TOPIC: TOPIC_AUTH,
            "m-own": 0,
        }
        # FindCoordinator: her group yes, alice's no.
        found = _req(m, 10, 4, key_type=0, coordinator_keys=("m-group", VICTIM_GROUP))
        assert {c.key: c.error_code for c in found.coordinators} == {
            "m-group": 0,
            VICTIM_GROUP: GROUP_AUTH,
        }
        # OffsetFetch: alice's group refused at the group level.
        fetched = _req(m, 9, 8, groups=(_offset_fetch_group(VICTIM_GROUP),), require_stable=False)
        assert fetched.groups[0].error_code == GROUP_AUTH
        # OffsetDelete on alice's group: refused at the top level.
        od_topic = _entity(47, 0, "OffsetDeleteRequestTopic")
        od_part = _entity(47, 0, "OffsetDeleteRequestPartition")
        offsets_deleted = _req(
            m,
            47,
            0,
            group_id=VICTIM_GROUP,
            topics=(od_topic(name=VICTIM_TOPIC, partitions=(od_part(partition_index=0),)),),
        )
        assert offsets_deleted.error_code == GROUP_AUTH
        # DescribeConfigs: her topic described, alice's refused and listed after it.
        dc = _entity(32, 4, "DescribeConfigsResource")
        configs = _req(
            m,
            32,
            4,
            resources=(
                dc(resource_type=2, resource_name=VICTIM_TOPIC, configuration_keys=None),
                dc(resource_type=2, resource_name="m-own", configuration_keys=None),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        assert [(r.resource_name, r.error_code) for r in configs.results] == [
            ("m-own", 0),
            (VICTIM_TOPIC, TOPIC_AUTH),
        ]
        assert configs.results[1].configs == ()
        # CreateTopics: under her prefix yes, under alice's no.
        creatable = _entity(19, 7, "CreatableTopic")
        created = _req(
            m,
            19,
            7,
            topics=tuple(
                creatable(
                    name=n, num_partitions=1, replication_factor=1, assignments=(), configs=()
                )
                for n in ("m-created", "a-created")
            ),
            timeout=datetime.timedelta(seconds=30),
            validate_only=False,
        )
        assert {t.name: t.error_code for t in created.topics} == {
            "m-created": 0,
            "a-created": TOPIC_AUTH,
        }
        # InitProducerId for a transactional id she has no ACL on; idempotent (WRITE on
        # some topic is enough).
        init = _req(
            m,
            22,
            4,
            transactional_id="a-txn",
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        assert init.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        idempotent = _req(
            m,
            22,
            4,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        assert idempotent.error_code == 0
        # Changing alice's SCRAM credential needs ALTER on the cluster.
        upsert = _entity(51, 0, "ScramCredentialUpsertion")
        scram = _req(
            m,
            51,
            0,
            deletions=(),
            upsertions=(
                upsert(
                    name="alice",
                    mechanism=2,
                    iterations=8192,
                    salt=b"s" * 16,
                    salted_password=b"p" * 64,
                ),
            ),
        )
        assert [(r.user, r.error_code) for r in scram.results] == [("alice", CLUSTER_AUTH)]

    # Real clients: she produces and consumes on her own topic, not on alice's.
    producer = Producer(_sasl(acl, "mallory"))
    producer.produce("m-matrix", value=b"x")
    assert producer.flush(30) == 0
    refused: list[Any] = []
    try:
        producer.produce(VICTIM_TOPIC, value=b"x", on_delivery=lambda err, msg: refused.append(err))
    except KafkaException as e:
        # librdkafka refuses at once when it already holds the topic's metadata error
        # (a metadata refresh can land before this call on a loaded machine).
        refused.append(e.args[0])
    producer.flush(30)
    assert refused and refused[0] is not None and refused[0].code() == TOPIC_AUTH
    own = Consumer(
        {**_sasl(acl, "mallory"), "group.id": "m-matrix-group", "auto.offset.reset": "earliest"}
    )
    own.subscribe(["m-matrix"])
    deadline = time.monotonic() + 60
    got = None
    while got is None and time.monotonic() < deadline:
        msg = own.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
    assert got == b"x"
    own.commit(asynchronous=False)
    own.close()
    # Her group is listed to her; alice's group not.
    with _login(acl, "mallory") as m:
        ids = {g.group_id for g in _req(m, 16, 4, states_filter=()).groups}
        assert "m-matrix-group" in ids and VICTIM_GROUP not in ids
        # Her group's authorized operations: everything a group supports (ACL ALL);
        # then she may delete it (empty), not alice's.
        mine = _req(m, 15, 5, groups=("m-matrix-group",), include_authorized_operations=True)
        assert mine.groups[0].error_code == 0
        assert mine.groups[0].authorized_operations == GROUP_OPERATIONS_ALL
        deleted = _req(m, 42, 2, groups_names=("m-matrix-group", VICTIM_GROUP))
        assert {r.group_id: r.error_code for r in deleted.results} == {
            "m-matrix-group": 0,
            VICTIM_GROUP: GROUP_AUTH,
        }


def test_s48_regex_subscription_keeps_only_describable_topics(acl: Acl) -> None:
    """S48: a KIP-848 member subscribing by regex gets only the matched topics its
    principal may DESCRIBE (no error)."""
    consumer = Consumer(
        {
            **_sasl(acl, "mallory"),
            "group.id": "m-regex-group",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["^(m|a)-regex-.*"])
        deadline = time.monotonic() + 60
        assigned: set[str] = set()
        while time.monotonic() < deadline:
            consumer.poll(0.5)
            assigned = {tp.topic for tp in consumer.assignment()}
            if assigned:
                break
        assert assigned == {"m-regex-1"}
    finally:
        consumer.close()


def test_the_group_apis_unchanged_for_the_owner(acl: Acl, tmp_path: Path) -> None:
    """The owner's own group works through the checked paths (fast paths included)."""
    consumer = Consumer(
        {
            **_sasl(acl, "alice"),
            "group.id": "team-a-kip848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([VICTIM_TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not consumer.assignment():
            consumer.poll(0.5)
        assert {tp.topic for tp in consumer.assignment()} == {VICTIM_TOPIC}
        consumer.commit(offsets=[TopicPartition(VICTIM_TOPIC, 0, 1)], asynchronous=False)
        committed = consumer.committed([TopicPartition(VICTIM_TOPIC, 0)], timeout=10)
        assert committed[0].offset == 1
    finally:
        consumer.close()
