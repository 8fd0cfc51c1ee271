"""A small synchronous Kafka admin client on the project's codec, for the command line.

Theory of operation. One blocking socket per broker, opened on first use: the bootstrap
server answers ApiVersions (which fixes the version used for each API: the highest both
sides support, within what this client's requests are written for) and Metadata (the
brokers); a group's requests go to its coordinator (FindCoordinator). Every request is
built with `protocol.api.build`, which drops fields a version lacks, so one code path
serves every version in a range. Errors the server answers become `KafkaError` (exit code
1); a server that cannot be reached or that closes the connection, `ConnectionFailed`
(exit code 3)."""

from __future__ import annotations

import datetime
import socket
import struct
import sys
from typing import Any

from groupcoord.protocol.api import ApiKey, build, request_schema
from groupcoord.protocol.client_codec import decode_response, encode_request
from groupcoord.protocol.errors import ErrorCode

_SIZE = struct.Struct(">i")
CLIENT_ID = "groupcoord-cli"

# The versions this client's requests are written for: (lowest, highest). The highest both
# this client and the server support is used.
VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (4, 12),
    ApiKey.FIND_COORDINATOR: (4, 4),
    ApiKey.LIST_GROUPS: (3, 5),
    ApiKey.DESCRIBE_GROUPS: (3, 5),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    ApiKey.OFFSET_FETCH: (8, 8),
    ApiKey.LIST_OFFSETS: (4, 8),
    ApiKey.OFFSET_COMMIT: (6, 8),
    ApiKey.DELETE_GROUPS: (2, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CREATE_TOPICS: (5, 7),
    ApiKey.DELETE_TOPICS: (4, 6),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
}
API_VERSIONS_VERSION = 3


class KafkaError(Exception):
    """The server answered with an error code."""

    def __init__(self, code: int, message: str | None = None, what: str = "") -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        detail = f": {message}" if message else ""
        super().__init__(f"{what + ': ' if what else ''}{name}{detail}")
        self.code = code
        self.name = name


class ConnectionFailed(Exception):
    """The server cannot be reached, or the connection broke."""


def check(code: int, message: str | None = None, what: str = "") -> None:
    if code:
        raise KafkaError(code, message, what)


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class _Connection:
    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise ConnectionFailed(f"cannot connect to {host}:{port}: {e}") from None
        self.address = f"{host}:{port}"
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        try:
            self.sock.sendall(
                encode_request(api_key, version, self.correlation_id, body, CLIENT_ID)
            )
            size = _SIZE.unpack(self._recv_exact(4))[0]
            frame = self._recv_exact(size)
        except OSError as e:
            raise ConnectionFailed(f"{self.address}: {e}") from None
        correlation_id, response = decode_response(api_key, version, frame)
        if correlation_id != self.correlation_id:
            raise ConnectionFailed(f"{self.address}: response out of order")
        return response

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionFailed(f"{self.address}: connection closed by the server")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


class AdminClient:
    """Requests to a cluster reached through `bootstrap` (HOST:PORT)."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        host, port = split_address(bootstrap)
        self._bootstrap = _Connection(host, port, timeout_s)
        self._connections: dict[int, _Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self.versions = self._negotiate()

    def close(self) -> None:
        self._bootstrap.close()
        for conn in self._connections.values():
            conn.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    def _negotiate(self) -> dict[int, int]:
        cls = request_schema(ApiKey.API_VERSIONS, API_VERSIONS_VERSION)
        body = build(cls, client_software_name="groupcoord-cli", client_software_version="1")
        response = self._bootstrap.request(ApiKey.API_VERSIONS, API_VERSIONS_VERSION, body)
        check(response.error_code, what="ApiVersions")
        served = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        versions = {}
        for api_key, (low, high) in VERSIONS.items():
            span = served.get(int(api_key))
            if span is not None and max(low, span[0]) <= min(high, span[1]):
                versions[int(api_key)] = min(high, span[1])
        return versions

    def request_class(self, api_key: int) -> type[Any]:
        version = self.version(api_key)
        cls = request_schema(api_key, version)
        assert cls is not None
        return cls

    def nested(self, api_key: int, name: str) -> type[Any]:
        """A nested entity class of the request at the version in use (e.g. a topic)."""
        return getattr(sys.modules[self.request_class(api_key).__module__], name)  # type: ignore[no-any-return]

    def version(self, api_key: int) -> int:
        version = self.versions.get(int(api_key))
        if version is None:
            low, high = VERSIONS[api_key]
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"the server does not serve {ApiKey(api_key).name} v{low}-{high}",
            )
        return version

    def send(self, api_key: int, node: int | None = None, **fields: Any) -> Any:
        """One request to `node` (None: the bootstrap server); its response."""
        body = build(self.request_class(api_key), **fields)
        conn = self._bootstrap if node is None else self._connection(node)
        return conn.request(api_key, self.version(api_key), body)

    def _connection(self, node: int) -> _Connection:
        conn = self._connections.get(node)
        if conn is None:
            if node not in self._brokers:
                self.metadata([])
            if node not in self._brokers:
                raise ConnectionFailed(f"broker {node} is not in the cluster's metadata")
            host, port = self._brokers[node]
            conn = self._connections[node] = _Connection(host, port, self.timeout_s)
        return conn

    # -- cluster -------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None) -> Any:
        """Metadata of `topics` (None: every topic; []: none, the brokers only)."""
        topic_cls = self.nested(ApiKey.METADATA, "MetadataRequestTopic")
        wanted = None if topics is None else tuple(build(topic_cls, name=t) for t in topics)
        response = self.send(ApiKey.METADATA, topics=wanted, allow_auto_topic_creation=False)
        self._brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        return response

    def partitions(self, topics: list[str] | None) -> dict[str, list[int]]:
        """{topic: partitions} of existing topics; a missing topic raises KafkaError."""
        out = {}
        for topic in self.metadata(topics).topics:
            check(topic.error_code, what=f"topic {topic.name}")
            out[topic.name] = sorted(p.partition_index for p in topic.partitions)
        return out

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """{(topic, partition): leader node} of existing topics (unknown ones left out)."""
        out = {}
        for topic in self.metadata(topics).topics:
            if topic.error_code == ErrorCode.NONE:
                for p in topic.partitions:
                    out[(topic.name, p.partition_index)] = p.leader_id
        return out

    def broker(self, node: int) -> tuple[str, int]:
        """(host, port) of a broker the client has heard of."""
        if node not in self._brokers:
            self.metadata([])
        return self._brokers.get(node, ("?", -1))

    def coordinator(self, group: str) -> int:
        response = self.send(ApiKey.FIND_COORDINATOR, key_type=0, coordinator_keys=(group,))
        (found,) = response.coordinators
        check(found.error_code, found.error_message, f"group {group}")
        self._brokers[found.node_id] = (found.host, found.port)
        return int(found.node_id)

    def list_offsets(
        self, partitions: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset} for `timestamp` (-2 earliest, -1 latest, else the
        first offset at or after that time; -1 where no record is that late). Partitions
        whose leader is unknown are left out."""
        leaders = self.leaders(sorted({t for t, _ in partitions}))
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            leader = leaders.get((topic, partition))
            if leader is not None and leader >= 0:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
        topic_cls = self.nested(ApiKey.LIST_OFFSETS, "ListOffsetsTopic")
        part_cls = self.nested(ApiKey.LIST_OFFSETS, "ListOffsetsPartition")
        out: dict[tuple[str, int], int] = {}
        for leader, topics in by_leader.items():
            response = self.send(
                ApiKey.LIST_OFFSETS,
                leader,
                replica_id=-1,
                isolation_level=0,
                topics=tuple(
                    build(
                        topic_cls,
                        name=topic,
                        partitions=tuple(
                            build(
                                part_cls,
                                partition_index=p,
                                current_leader_epoch=-1,
                                timestamp=timestamp,
                            )
                            for p in parts
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )
            for topic in response.topics:
                for p in topic.partitions:
                    check(p.error_code, what=f"{topic.name}-{p.partition_index}")
                    out[(topic.name, p.partition_index)] = int(p.offset)
        return out

    # -- groups --------------------------------------------------------------------------

    def list_groups(self, states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> list[Any]:
        """The groups of every broker (each lists those it coordinates), as Kafka's admin
        client asks."""
        self.metadata([])
        groups = []
        for node in sorted(self._brokers):
            response = self.send(ApiKey.LIST_GROUPS, node, states_filter=states, types_filter=types)
            check(response.error_code, what=f"ListGroups (broker {node})")
            groups.extend(response.groups)
        return groups

    def describe_classic(self, group: str, node: int) -> Any:
        response = self.send(ApiKey.DESCRIBE_GROUPS, node, groups=(group,))
        (described,) = response.groups
        check(described.error_code, what=f"group {group}")
        return described

    def describe_consumer(self, group: str, node: int) -> Any | None:
        """The KIP-848 description, or None when the group is not a consumer group (or the
        server has no ConsumerGroupDescribe)."""
        if int(ApiKey.CONSUMER_GROUP_DESCRIBE) not in self.versions:
            return None
        response = self.send(ApiKey.CONSUMER_GROUP_DESCRIBE, node, group_ids=(group,))
        (described,) = response.groups
        if described.error_code in (ErrorCode.GROUP_ID_NOT_FOUND,):
            return None
        check(described.error_code, described.error_message, f"group {group}")
        return described

    def committed(self, group: str, node: int) -> dict[tuple[str, int], int]:
        """{(topic, partition): committed offset} of a group (all its offsets)."""
        group_cls = self.nested(ApiKey.OFFSET_FETCH, "OffsetFetchRequestGroup")
        response = self.send(
            ApiKey.OFFSET_FETCH,
            node,
            groups=(build(group_cls, group_id=group, topics=None),),
            require_stable=False,
        )
        (fetched,) = response.groups
        check(fetched.error_code, what=f"group {group}")
        out = {}
        for topic in fetched.topics:
            for p in topic.partitions:
                check(p.error_code, what=f"{topic.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(topic.name, p.partition_index)] = int(p.committed_offset)
        return out

    def commit(self, group: str, node: int, offsets: dict[tuple[str, int], int]) -> None:
        """Commit as an admin (generation -1, no member): refused while the group has
        members."""
        topic_cls = self.nested(ApiKey.OFFSET_COMMIT, "OffsetCommitRequestTopic")
        part_cls = self.nested(ApiKey.OFFSET_COMMIT, "OffsetCommitRequestPartition")
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, offset))
        response = self.send(
            ApiKey.OFFSET_COMMIT,
            node,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time_ms=-1,
            topics=tuple(
                build(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        build(
                            part_cls,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )
        for topic in response.topics:
            for p in topic.partitions:
                check(p.error_code, what=f"group {group}, {topic.name}-{p.partition_index}")

    def delete_groups(self, groups: list[str]) -> dict[str, int]:
        """{group: error code}, asking each group's coordinator."""
        out = {}
        for group in groups:
            node = self.coordinator(group)
            response = self.send(ApiKey.DELETE_GROUPS, node, groups_names=(group,))
            for result in response.results:
                out[result.group_id] = int(result.error_code)
        return out

    def delete_offsets(
        self, group: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """(top-level error code, {(topic, partition): error code})."""
        node = self.coordinator(group)
        topic_cls = self.nested(ApiKey.OFFSET_DELETE, "OffsetDeleteRequestTopic")
        part_cls = self.nested(ApiKey.OFFSET_DELETE, "OffsetDeleteRequestPartition")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        response = self.send(
            ApiKey.OFFSET_DELETE,
            node,
            group_id=group,
            topics=tuple(
                build(
                    topic_cls,
                    name=t,
                    partitions=tuple(build(part_cls, partition_index=p) for p in ps),
                )
                for t, ps in by_topic.items()
            ),
        )
        results = {
            (t.name, p.partition_index): int(p.error_code)
            for t in response.topics
            for p in t.partitions
        }
        return int(response.error_code), results

    # -- topics --------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> Any:
        topic_cls = self.nested(ApiKey.CREATE_TOPICS, "CreatableTopic")
        config_cls = self.nested(ApiKey.CREATE_TOPICS, "CreatableTopicConfig")
        response = self.send(
            ApiKey.CREATE_TOPICS,
            None,  # a KRaft broker forwards topic changes to its controller
            topics=(
                build(
                    topic_cls,
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    assignments=(),
                    configs=tuple(build(config_cls, name=k, value=v) for k, v in configs.items()),
                ),
            ),
            timeout=_timedelta_ms(int(self.timeout_s * 1000)),
            validate_only=False,
        )
        (result,) = response.topics
        check(result.error_code, result.error_message, f"topic {name}")
        return result

    def delete_topic(self, name: str) -> None:
        state_cls = self.nested(ApiKey.DELETE_TOPICS, "DeleteTopicState")
        response = self.send(
            ApiKey.DELETE_TOPICS,
            None,  # a KRaft broker forwards topic changes to its controller
            topics=(build(state_cls, name=name),),
            topic_names=(name,),
            timeout=_timedelta_ms(int(self.timeout_s * 1000)),
        )
        (result,) = response.responses
        check(result.error_code, getattr(result, "error_message", None), f"topic {name}")

    def describe_topic_configs(self, name: str) -> list[Any]:
        resource_cls = self.nested(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigsResource")
        response = self.send(
            ApiKey.DESCRIBE_CONFIGS,
            resources=(
                build(resource_cls, resource_type=2, resource_name=name, configuration_keys=None),
            ),
            include_synonyms=False,
            include_documentation=False,
        )
        (result,) = response.results
        check(result.error_code, result.error_message, f"topic {name}")
        return list(result.configs)

    def alter_topic_config(self, name: str, changes: list[tuple[str, int, str | None]]) -> None:
        """`changes`: (config, operation: 0 set / 1 delete, value)."""
        resource_cls = self.nested(ApiKey.INCREMENTAL_ALTER_CONFIGS, "AlterConfigsResource")
        config_cls = self.nested(ApiKey.INCREMENTAL_ALTER_CONFIGS, "AlterableConfig")
        response = self.send(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            resources=(
                build(
                    resource_cls,
                    resource_type=2,
                    resource_name=name,
                    configs=tuple(
                        build(config_cls, name=k, config_operation=op, value=v)
                        for k, op, v in changes
                    ),
                ),
            ),
            validate_only=False,
        )
        (result,) = response.responses
        check(result.error_code, result.error_message, f"topic {name}")


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
