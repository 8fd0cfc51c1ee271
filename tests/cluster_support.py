"""Three `serve --cluster` nodes on one real PostgreSQL for integration tests (issue 22):
the `Cluster` of node processes, waits, and the client loads (commits, classic rebalances,
a KIP-848 member) the cluster tests drive, with the checks that nothing acknowledged was
lost. The module-scoped fixture is `cluster_fixture` (tests bind it with
`cluster = pytest.fixture(scope="module", name="cluster")(cluster_fixture)`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.netns import VethNamespace
from tests.postgres_server import PostgresServer, postgres_server
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, free_port
from tests.tls_certs import make_pki

SHARDS = 6
LEASE_MS = 3000
RENEW_MS = 500
TOPIC = "t"
PARTITIONS = 4
WAIT_S = 90  # generous: the machine is loaded


def node_args(dsn: str, node_id: int) -> list[str]:
    return [
        "--cluster",
        dsn,
        "--node-id",
        str(node_id),
        *("--set", f"cluster_lease_duration_ms={LEASE_MS}"),
        *("--set", f"cluster_lease_renew_interval_ms={RENEW_MS}"),
        *("--set", f"offsets_partitions={SHARDS}"),
        *("--set", f"transaction_state_partitions={SHARDS}"),
    ]


class Cluster:
    """Three nodes on `pg`; with `ns` (tests/netns.py), node `ns_node` runs in that network
    namespace at its inner address and reaches PostgreSQL and the others through the veth
    pair, whose host end the other nodes listen at. `secured`: each node also has a
    SASL_PLAINTEXT listener with SCRAM-SHA-256 (`sasl_bootstrap(i)`) and an authorizer that
    allows what no ACL names. `peer_tls` ("none" or "required": cluster_peer_ssl_client_auth):
    the peer listeners speak TLS (cluster_peer_security_protocol=SASL_SSL), each node with
    its own certificate signed by the CA `pki` (tests/tls_certs.py)."""

    def __init__(
        self,
        pg: PostgresServer,
        directory: Path,
        ns: VethNamespace | None = None,
        ns_node: int = 3,
        extra_args: Sequence[str] = (),
        secured: bool = False,
        peer_tls: str | None = None,
    ) -> None:
        """`extra_args`: more `serve` arguments for every node."""
        self.pg = pg
        self.ns = ns
        self.extra_args = list(extra_args)
        self.nodes = {i: self._node(directory, i, ns_node) for i in (1, 2, 3)}
        self.pki = make_pki(directory / "pki") if peer_tls is not None else None
        for i, node in self.nodes.items() if self.pki is not None else ():
            cert, key = self.pki.issue(f"node{i}", f"/CN=groupcoord-node-{i}", node=True)
            node.extra_args += [
                *("--set", "cluster_peer_security_protocol=SASL_SSL"),
                *("--set", f"cluster_peer_ssl_client_auth={peer_tls}"),
                *("--set", f"ssl_certificate_file={cert}"),
                *("--set", f"ssl_key_file={key}"),
                *("--set", f"ssl_truststore_file={self.pki.ca}"),
            ]
        self.sasl_ports: dict[int, int] = {}
        if secured:
            for i, node in self.nodes.items():
                self.sasl_ports[i] = free_port()
                listeners = (
                    f"PLAINTEXT://{node.host}:{node.port},"
                    f"SASL_PLAINTEXT://{node.host}:{self.sasl_ports[i]}"
                )
                node.extra_args += [
                    *("--set", f"listeners={listeners}"),
                    *("--set", "sasl_enabled_mechanisms=SCRAM-SHA-256"),
                    *("--set", "authorizer_enabled=true"),
                    *("--set", "allow_everyone_if_no_acl_found=true"),
                ]

    def _node(self, directory: Path, i: int, ns_node: int) -> ServerProcess:
        ns = self.ns
        if ns is None:
            args = node_args(self.pg.dsn, i) + self.extra_args
            return ServerProcess(directory / f"node{i}", args)
        args = node_args(self.pg.dsn_at(ns.host_address), i) + self.extra_args
        if i != ns_node:
            return ServerProcess(directory / f"node{i}", args, host=ns.host_address)
        return ServerProcess(directory / f"node{i}", args, host=ns.inner_address, prefix=ns.prefix)

    def sasl_bootstrap(self, node_id: int) -> str:
        return f"{self.nodes[node_id].host}:{self.sasl_ports[node_id]}"

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def query(self, sql: str, *args: Any) -> list[Any]:
        async def run() -> list[Any]:
            conn = await asyncpg.connect(self.pg.dsn)
            try:
                return list(await conn.fetch(sql, *args))
            finally:
                await conn.close()

        return asyncio.run(run())

    def owner(self, group: str) -> tuple[int, int]:
        """(owner node, epoch) of `group`'s shard lease, if valid now; (-1, -1) if none."""
        rows = self.query(
            "SELECT owner_node, epoch FROM leases WHERE resource = $1 AND expires_at > now()",
            f"group-shard:{shard_for(group, SHARDS)}",
        )
        return (rows[0][0], rows[0][1]) if rows else (-1, -1)

    def held(self, kind: str = "group-shard") -> dict[int, int]:
        """Valid leases of one kind (`group-shard`, `partition`) per node."""
        rows = self.query(
            "SELECT owner_node, count(*) FROM leases"
            " WHERE expires_at > now() AND resource LIKE $1 || ':%' GROUP BY 1",
            kind,
        )
        return {r[0]: r[1] for r in rows}

    def partition_owner(self, topic: str, partition: int) -> tuple[int, int]:
        """(owner node, epoch) of the partition's lease, if valid now; (-1, -1) if none."""
        rows = self.query(
            "SELECT owner_node, epoch FROM leases WHERE resource = $1 AND expires_at > now()",
            f"partition:{topic}:{partition}",
        )
        return (rows[0][0], rows[0][1]) if rows else (-1, -1)

    def epochs_in_order(self, group: str) -> list[int]:
        """The writer epochs of the group shard's rows, by seq (one writer at a time:
        never decreasing)."""
        rows = self.query(
            "SELECT epoch FROM shard_batches WHERE resource = $1 ORDER BY seq",
            f"group-shard:{shard_for(group, SHARDS)}",
        )
        return [r[0] for r in rows]


def until(condition: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class CommitLoad(threading.Thread):
    """Synchronous commits of growing offsets on every partition, as fast as acknowledged;
    `acked[p]`: the last offset acknowledged for partition p."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
                # A commit sent to a paused node is given up on sooner than the default 60 s.
                "socket.timeout.ms": 8000,
            }
        )
        self.acked = dict.fromkeys(range(PARTITIONS), -1)
        self.next_offset = 0
        self.commits = 0
        self.errors = 0
        self.last_ok = time.monotonic()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            offset = self.next_offset
            self.next_offset += 1
            batch = [TopicPartition(TOPIC, p, offset) for p in range(PARTITIONS)]
            try:
                results = self.consumer.commit(offsets=batch, asynchronous=False)
            except KafkaException:
                self.errors += 1
                time.sleep(0.05)
                continue
            for tp in results or ():
                if tp.error is None:
                    self.acked[tp.partition] = offset
            self.commits += 1
            self.last_ok = time.monotonic()

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        self.consumer.close()

    def wait_commits(self, more: int) -> None:
        target = self.commits + more
        until(lambda: self.commits >= target, f"{more} more acknowledged commits")


class RebalanceLoad(threading.Thread):
    """A classic group whose second member joins and leaves over and over, the first
    polling: rebalances on the same coordinator shard as the commit load."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.group = group
        self.assignments = 0
        self.stopping = threading.Event()

    def member(self) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([TOPIC], on_assign=lambda _c, _p: self._assigned())
        return consumer

    def _assigned(self) -> None:
        self.assignments += 1

    def run(self) -> None:
        steady = self.member()
        try:
            while not self.stopping.is_set():
                joiner = self.member()
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline and not self.stopping.is_set():
                    steady.poll(0.1)
                    joiner.poll(0.1)
                joiner.close()
        finally:
            steady.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)


class Kip848Member(threading.Thread):
    """One KIP-848 consumer (group.protocol=consumer) polling and committing its position
    every half second: `commits_ok` counts the commits the coordinator took (each checks
    the member and its epoch), `epochs_lost` the fencing errors (a member the coordinator
    forgot would have to rejoin: UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "socket.timeout.ms": 8000,
            }
        )
        self.assigned: list[int] = []
        self.commits_ok = 0
        self.epochs_lost = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe(
            [TOPIC], on_assign=lambda _c, ps: self.assigned.extend(p.partition for p in ps)
        )
        offset = 0
        while not self.stopping.is_set():
            self.consumer.poll(0.5)
            if not self.assigned:
                continue
            offset += 1
            try:
                self.consumer.commit(
                    offsets=[TopicPartition(TOPIC, p, offset) for p in self.assigned],
                    asynchronous=False,
                )
                self.commits_ok += 1
            except KafkaException as e:
                if e.args[0].name() in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"):
                    self.epochs_lost += 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        self.consumer.close()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets. librdkafka's committed() gives up with NOT_COORDINATOR
    when it asks a node whose lease just moved (as with a Kafka coordinator moving), so it is
    asked again until the owner answers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                tps = consumer.committed(
                    [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30
                )
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException as error:
                retriable = error.args[0].code() in (
                    KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE,
                )
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def same_shard_group(group: str, prefix: str) -> str:
    """A group id on the same coordinator shard as `group`."""
    shard = shard_for(group, SHARDS)
    return next(f"{prefix}{i}" for i in range(1000) if shard_for(f"{prefix}{i}", SHARDS) == shard)


def check_nothing_lost(cluster: Cluster, group: str, load: CommitLoad) -> None:
    found = committed(cluster.bootstrap, group)
    for partition, offset in load.acked.items():
        assert found[partition] >= offset, (partition, found, load.acked)
        assert found[partition] < load.next_offset
    epochs = cluster.epochs_in_order(group)
    assert epochs == sorted(epochs), "two writers interleaved on one shard"


def transaction_across_nodes(cluster: Cluster) -> None:
    """A transaction coordinated by one node commits offsets of a group another node
    coordinates: the coordinator's WriteTxnMarkers goes to the group's node through its
    peer listener (server/peer_sasl.py). Asserts the offsets are committed."""
    group = next(f"peer-g{i}" for i in range(1000) if cluster.owner(f"peer-g{i}")[0] != -1)
    group_owner = cluster.owner(group)[0]
    txn_id = next(
        f"peer-tx{i}"
        for i in range(1000)
        if cluster.owner(f"peer-tx{i}")[0] not in (-1, group_owner)
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    member = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    producer.send_offsets_to_transaction(
        [TopicPartition(TOPIC, p, 7) for p in range(PARTITIONS)],
        member.consumer_group_metadata(),
        60,
    )
    producer.commit_transaction(60)
    member.close()
    # The offsets are committed once the group's node took the coordinator's marker.
    assert committed(cluster.bootstrap, group) == dict.fromkeys(range(PARTITIONS), 7)


def cluster_fixture(
    topic_on_every_node: bool = False, secured: bool = False, peer_tls: str | None = None
) -> Iterator[Cluster]:
    with running_cluster(
        topic_on_every_node=topic_on_every_node, secured=secured, peer_tls=peer_tls
    ) as c:
        yield c


@contextlib.contextmanager
def running_cluster(
    ns: VethNamespace | None = None,
    extra_args: Sequence[str] = (),
    topic_on_every_node: bool = False,
    secured: bool = False,
    peer_tls: str | None = None,
) -> Iterator[Cluster]:
    """Three started nodes splitting the shards and topic TOPIC, created through node 1
    (topics follow the metadata store in PostgreSQL). `topic_on_every_node`: CreateTopics
    sent to every node, as before topics followed the store (a node that has it already
    answers TOPIC_ALREADY_EXISTS, taken as done)."""
    more_addresses = [] if ns is None else [ns.host_address]
    with postgres_server(more_addresses=more_addresses) as pg:
        c = Cluster(
            pg, pg.directory.parent, ns, extra_args=extra_args, secured=secured, peer_tls=peer_tls
        )
        try:
            for node in c.nodes.values():
                node.start()
            creators = list(c.nodes.values())[: None if topic_on_every_node else 1]
            for node in creators:
                admin = AdminClient({"bootstrap.servers": node.bootstrap})
                for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
                    try:
                        future.result(30)
                    except KafkaException as e:
                        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                            raise
            until(lambda: sorted(c.held().values()) == [2, 2, 2], "three nodes splitting shards")
            until(lambda: all(has_topic(n.bootstrap, TOPIC) for n in c.nodes.values()), TOPIC)
            until(
                lambda: sum(c.held("partition").values()) == PARTITIONS,
                "every partition leased",
            )
            yield c
        finally:
            for node in c.nodes.values():
                node.kill()


def has_topic(bootstrap: str, topic: str) -> bool:
    """Whether the node at `bootstrap` itself lists `topic`."""
    return topic_error(bootstrap, topic) == 0


def topic_error(bootstrap: str, topic: str) -> int:
    """The error the node at `bootstrap` itself answers for `topic` (Metadata v12 to it
    alone, no auto-creation): 0 when it serves it."""
    m = request_module(3, 12)
    with RawClient(bootstrap) as client:
        answer = client.request(
            3,
            12,
            m.MetadataRequest(
                topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    return int(answer.topics[0].error_code)


def request_module(api_key: int, version: int) -> Any:
    """The module of a request's classes (its nested entities too)."""
    return sys.modules[request_class(api_key, version).__module__]
