"""The per-API ACL checks (issue 21 item 4) against Apache Kafka 4.x with StandardAuthorizer:
the same ACLs on both, the same requests, the answers' error codes (and messages where
Kafka sets them) compared.

One principal suffices on PLAINTEXT: the client is User:ANONYMOUS, not a super user, with
allow.everyone.if.no.acl.found=true on both brokers, so it may do what no ACL names (the
cluster resource stays without ACLs: CreateAcls, CreateTopics and the broker's own work
pass), while the `mine-` resources carry ALLOW ACLs for it and the `theirs-` resources
carry ACLs for User:alice only, which refuse it (an ACL exists, none matches).
"""

from __future__ import annotations

import datetime
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.jvm.artifacts import JvmArtifactsMissing, classpath
from tests.jvm.kafka_broker import KafkaBroker
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm]

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP, TXN = 2, 3, 5
PREFIXED, LITERAL = 4, 3
ALL, ALLOW = 2, 3
ACLS = [
    (TOPIC, "mine-", PREFIXED, "User:ANONYMOUS", "*", ALL, ALLOW),
    (GROUP, "mine-", PREFIXED, "User:ANONYMOUS", "*", ALL, ALLOW),
    (TXN, "mine-", PREFIXED, "User:ANONYMOUS", "*", ALL, ALLOW),
    (TOPIC, "theirs-", PREFIXED, "User:alice", "*", ALL, ALLOW),
    (GROUP, "theirs-", PREFIXED, "User:alice", "*", ALL, ALLOW),
    (TXN, "theirs-", PREFIXED, "User:alice", "*", ALL, ALLOW),
]
SECONDS_30 = datetime.timedelta(seconds=30)


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    try:
        classpath("broker")
    except JvmArtifactsMissing as exc:
        pytest.fail(f"reference Kafka unavailable: {exc}", pytrace=False)
    overrides = {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "allow.everyone.if.no.acl.found": "true",
    }
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-acl-enforce"), overrides)
    try:
        yield broker.start(timeout_s=240)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("acl-enforce-ours") / "data"
    with serving(data, authorizer_enabled="true", allow_everyone_if_no_acl_found="true") as proc:
        yield proc


def _cls(api_key: int, version: int, name: str | None = None) -> Any:
    cls = request_class(api_key, version)
    return cls if name is None else getattr(sys.modules[cls.__module__], name)


def _req(client: RawClient, api_key: int, version: int, **fields: Any) -> Any:
    return client.request(api_key, version, _cls(api_key, version)(**fields))


def _setup(client: RawClient) -> None:
    creation = _cls(30, 3, "AclCreation")
    created = _req(
        client,
        30,
        3,
        creations=tuple(
            creation(
                resource_type=t,
                resource_name=n,
                resource_pattern_type=p,
                principal=pr,
                host=h,
                operation=o,
                permission_type=pe,
            )
            for t, n, p, pr, h, o, pe in ACLS
        ),
    )
    assert [r.error_code for r in created.results] == [0] * len(ACLS)
    topic = _cls(19, 7, "CreatableTopic")
    made = _req(
        client,
        19,
        7,
        topics=tuple(
            topic(name=n, num_partitions=1, replication_factor=1, assignments=(), configs=())
            for n in ("mine-t", "theirs-t")
        ),
        timeout=SECONDS_30,
        validate_only=False,
    )
    assert [t.error_code for t in made.topics] == [0, 0]
    # Kafka: wait until the new topics have a leader (ACLs reach the authorizer too).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = _req(
            client,
            3,
            12,
            topics=tuple(
                _cls(3, 12, "MetadataRequestTopic")(name=n, topic_id=uuid.UUID(int=0))
                for n in ("mine-t",)
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        if all(t.error_code == 0 and t.partitions for t in meta.topics):
            break
        time.sleep(0.2)


def _commit(client: RawClient, group: str, topic: str) -> list[int]:
    part = _cls(8, 8, "OffsetCommitRequestPartition")
    top = _cls(8, 8, "OffsetCommitRequestTopic")
    answer = _req(
        client,
        8,
        8,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            top(
                name=topic,
                partitions=(
                    part(
                        partition_index=0,
                        committed_offset=0,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    return [int(p.error_code) for t in answer.topics for p in t.partitions]


def _script(bootstrap: str) -> list[Any]:
    seen: list[Any] = []
    with RawClient(bootstrap, timeout_s=30) as c:
        _setup(c)
        meta_topic = _cls(3, 12, "MetadataRequestTopic")
        meta = _req(
            c,
            3,
            12,
            topics=tuple(
                meta_topic(name=n, topic_id=uuid.UUID(int=0)) for n in ("theirs-t", "mine-t")
            ),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=True,
        )
        seen.append(
            (
                "metadata",
                [(t.name, int(t.error_code), t.topic_authorized_operations) for t in meta.topics],
            )
        )
        everything = _req(
            c,
            3,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        listed = {t.name for t in everything.topics}
        seen.append(("metadata all", "mine-t" in listed, "theirs-t" in listed))
        found = _req(c, 10, 4, key_type=0, coordinator_keys=("theirs-g", "mine-g"))
        seen.append(
            ("find", [(x.key, int(x.error_code), x.node_id, x.host) for x in found.coordinators])
        )
        txn = _req(c, 10, 4, key_type=1, coordinator_keys=("theirs-x",))
        seen.append(("find txn", [int(x.error_code) for x in txn.coordinators]))
        seen.append(("commit theirs group", _commit(c, "theirs-g", "mine-t")))
        seen.append(("commit theirs topic", _commit(c, "mine-g", "theirs-t")))
        seen.append(("commit mine", _commit(c, "mine-g", "mine-t")))
        fetch_group = _cls(9, 8, "OffsetFetchRequestGroup")
        fetch_topic = _cls(9, 8, "OffsetFetchRequestTopics")
        fetched = _req(
            c,
            9,
            8,
            groups=(
                fetch_group(group_id="theirs-g", topics=None),
                fetch_group(
                    group_id="mine-g",
                    topics=(
                        fetch_topic(name="theirs-t", partition_indexes=(0,)),
                        fetch_topic(name="mine-t", partition_indexes=(0,)),
                    ),
                ),
            ),
            require_stable=False,
        )
        seen.append(
            (
                "offset fetch",
                [
                    (
                        g.group_id,
                        int(g.error_code),
                        sorted(
                            (t.name, int(p.error_code), p.committed_offset)
                            for t in g.topics
                            for p in t.partitions
                        ),
                    )
                    for g in fetched.groups
                ],
            )
        )
        protocol = _cls(11, 5, "JoinGroupRequestProtocol")(name="range", metadata=b"")
        joined = _req(
            c,
            11,
            5,
            group_id="theirs-g",
            session_timeout=SECONDS_30,
            rebalance_timeout=SECONDS_30,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(protocol,),
        )
        seen.append(("join", int(joined.error_code), joined.member_id, joined.generation_id))
        beat = _req(
            c, 12, 4, group_id="theirs-g", generation_id=1, member_id="m", group_instance_id=None
        )
        seen.append(("heartbeat", int(beat.error_code)))
        described = _req(
            c, 15, 5, groups=("theirs-g", "mine-g"), include_authorized_operations=True
        )
        seen.append(
            (
                "describe groups",
                [
                    (g.group_id, int(g.error_code), g.group_state, g.authorized_operations)
                    for g in described.groups
                ],
            )
        )
        cgh = _req(
            c,
            68,
            0,
            group_id="mine-g2",
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout=SECONDS_30,
            subscribed_topic_names=("mine-t", "theirs-t"),
            topic_partitions=(),
        )
        seen.append(("consumer heartbeat theirs topic", int(cgh.error_code)))
        cgh = _req(
            c,
            68,
            0,
            group_id="theirs-g2",
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout=SECONDS_30,
            subscribed_topic_names=("mine-t",),
            topic_partitions=(),
        )
        seen.append(("consumer heartbeat theirs group", int(cgh.error_code)))
        resource = _cls(32, 4, "DescribeConfigsResource")
        configs = _req(
            c,
            32,
            4,
            resources=(
                resource(resource_type=2, resource_name="theirs-t", configuration_keys=None),
                resource(
                    resource_type=2, resource_name="mine-t", configuration_keys=("retention.ms",)
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        seen.append(
            (
                "describe configs",
                [(r.resource_name, int(r.error_code), r.error_message) for r in configs.results],
            )
        )
        alter = _cls(44, 1, "AlterConfigsResource")
        alterable = _cls(44, 1, "AlterableConfig")
        altered = _req(
            c,
            44,
            1,
            resources=(
                alter(
                    resource_type=2,
                    resource_name="theirs-t",
                    configs=(alterable(name="retention.ms", config_operation=0, value="1"),),
                ),
            ),
            validate_only=True,
        )
        seen.append(
            ("alter configs", [(int(r.error_code), r.error_message) for r in altered.responses])
        )
        partitions = _cls(37, 3, "CreatePartitionsTopic")
        grown = _req(
            c,
            37,
            3,
            topics=(partitions(name="theirs-t", count=2, assignments=None),),
            timeout=SECONDS_30,
            validate_only=True,
        )
        seen.append(("create partitions", [int(r.error_code) for r in grown.results]))
        init = _req(
            c,
            22,
            4,
            transactional_id="theirs-x",
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        seen.append(("init producer id", int(init.error_code), init.producer_id))
        dr_topic = _cls(21, 2, "DeleteRecordsTopic")
        dr_part = _cls(21, 2, "DeleteRecordsPartition")
        trimmed = _req(
            c,
            21,
            2,
            topics=tuple(
                dr_topic(name=n, partitions=(dr_part(partition_index=0, offset=-1),))
                for n in ("theirs-t", "mine-t", "mine-none")
            ),
            timeout=SECONDS_30,
        )
        seen.append(
            (
                "delete records",
                sorted(
                    (t.name, int(p.low_watermark), int(p.error_code))
                    for t in trimmed.topics
                    for p in t.partitions
                ),
            )
        )
        od_topic = _cls(47, 0, "OffsetDeleteRequestTopic")
        od_part = _cls(47, 0, "OffsetDeleteRequestPartition")
        od = _req(
            c,
            47,
            0,
            group_id="theirs-g",
            topics=(od_topic(name="mine-t", partitions=(od_part(partition_index=0),)),),
        )
        seen.append(("offset delete", int(od.error_code)))
        deleted = _req(c, 42, 2, groups_names=("theirs-g",))
        seen.append(("delete groups", [(r.group_id, int(r.error_code)) for r in deleted.results]))
    return seen


def test_per_api_checks_answer_as_kafka(acl_kafka: KafkaBroker, ours: ServerProcess) -> None:
    theirs = _script(acl_kafka.bootstrap)
    mine = _script(ours.bootstrap)
    differing = [(m, t) for m, t in zip(mine, theirs, strict=True) if m != t]
    assert differing == []
