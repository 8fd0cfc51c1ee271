"""THE list of what the conformance comparison does not take literally. Nothing else is
normalised: every other field of every response must be equal, Kafka's and ours.

Each rule names the fields it touches and why two correct servers may answer them differently.
`python -m tests.conformance` prints this list as a table (for the README), with the count of
sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    fields: str
    apis: str
    how: str
    why: str


NORMALISED: tuple[Rule, ...] = (
    Rule(
        fields="throttle_time",
        apis="every response",
        how="set to 0",
        why="quota throttling is a broker policy; neither server is throttling here",
    ),
    Rule(
        fields="error_message (anywhere in a response)",
        apis="every response that has one",
        how="a non-empty text becomes <message>; null and '' are compared literally",
        why="free text for people, reworded between Kafka releases; whether a message is "
        "there at all is still compared",
    ),
    Rule(
        fields="member_id, leader (anywhere in a response)",
        apis="JoinGroup, LeaveGroup, DescribeGroups, ConsumerGroupHeartbeat v0, ...",
        how="a value the server generated (first seen in a response, never sent before by the "
        "sequence) becomes <id#n>, numbered by first appearance; ids the sequence chose "
        "itself are compared literally",
        why="member ids are random per server (client id + UUID); equality and who-is-who "
        "are still compared through the numbering",
    ),
    Rule(
        fields="members (JoinGroup, DescribeGroups and ConsumerGroupDescribe member lists)",
        apis="JoinGroup, DescribeGroups, ConsumerGroupDescribe",
        how="sorted by (normalised) member id",
        why="Kafka keeps a group's members in a hash map: their order is arbitrary, and "
        "clients sort them themselves",
    ),
    Rule(
        fields="topics (and their partitions) of an OffsetFetch asking for all offsets",
        apis="OffsetFetch with topics=null (v2+)",
        how="topics sorted by name, partitions by index",
        why="Kafka lists a group's offsets in hash-map order, not in any order a client "
        "could rely on",
    ),
    Rule(
        fields="groups of a request naming several groups",
        apis="DescribeGroups, ConsumerGroupDescribe, DeleteGroups (results), OffsetFetch v8+",
        how="sorted by group id",
        why="Kafka splits such a request by coordinator shard and answers in the order the "
        "shards complete",
    ),
    Rule(
        fields="topic_id (anywhere in a response), and the order of assigned topics",
        apis="ConsumerGroupHeartbeat, ConsumerGroupDescribe, Metadata, ...",
        how="a topic id becomes <id of NAME> (looked up with Metadata on the same server); "
        "lists of assigned topic partitions are sorted by it",
        why="topic ids are random per cluster; Kafka builds assignments in hash-map order",
    ),
    Rule(
        fields="partitions of a ListOffsets answer",
        apis="ListOffsets",
        how="sorted by partition index",
        why="Kafka answers a topic's partitions in hash-map order",
    ),
    Rule(
        fields="topics and partitions of a DeleteRecords answer",
        apis="DeleteRecords",
        how="topics sorted by name, partitions by index",
        why="Kafka merges its per-partition answers in hash maps and groups them by topic",
    ),
    Rule(
        fields="producer_id; the crc of fetched record batches",
        apis="InitProducerId, EndTxn, DescribeProducers, DescribeTransactions, "
        "ListTransactions; Fetch (records[].producer_id, records[].crc, "
        "aborted_transactions[].producer_id)",
        how="a producer id >= 0 becomes <pid>; a batch's CRC becomes 'valid' when it checks "
        "(else its value is kept)",
        why="producer ids come from each server's own counter (shared by every sequence on "
        "it), and a batch's CRC covers its producer id",
    ),
    Rule(
        fields="transaction_start_time; last_timestamp; the timestamps of control batches",
        apis="DescribeTransactions; DescribeProducers; Fetch (records[].base_timestamp and "
        "max_timestamp of a commit/abort marker batch)",
        how="a time >= 0 becomes <time> (-1 is compared literally)",
        why="the coordinator's clock when the transaction started, or the marker was "
        "written (a producer's last timestamp is its marker's once a transaction ends); the "
        "timestamps of the records a sequence produces are its own and compared",
    ),
    Rule(
        fields="topics and partitions of a transaction",
        apis="AddPartitionsToTxn (results), DescribeTransactions (topics)",
        how="topics sorted by name, partitions by index",
        why="Kafka keeps a transaction's partitions in a hash set and answers in its order",
    ),
    Rule(
        fields="transactions listed",
        apis="ListTransactions",
        how="only the sequence's own transactional ids, sorted",
        why="one server per test module serves every sequence of the module; the order of a "
        "listing is unspecified",
    ),
    Rule(
        fields="configs of a described resource",
        apis="DescribeConfigs",
        how="sorted by config name",
        why="Kafka lists a resource's configs in hash-map order (CreateTopics v5+ lists "
        "them sorted, and is compared as it is)",
    ),
    Rule(
        fields="cluster_id",
        apis="Metadata, DescribeCluster",
        how="set to <cluster>",
        why="a random id per cluster",
    ),
    Rule(
        fields="host, port of the coordinator / brokers",
        apis="FindCoordinator, Metadata, DescribeCluster",
        how="set to <host>, <port>",
        why="the two servers listen on different ports (node ids are compared: the reference "
        "broker runs as node 0, groupcoord's default)",
    ),
    Rule(
        fields="groups listed",
        apis="ListGroups",
        how="only the groups the sequence itself created, sorted by group id",
        why="one server per test module serves every sequence of the module (and Kafka's "
        "probes); the order of a listing is unspecified",
    ),
)

GENERATED_ID_FIELDS = frozenset({"member_id", "leader"})
END_TXN, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 26, 61, 65, 66
ADD_PARTITIONS_TO_TXN = 24
INIT_PRODUCER_ID, FETCH = 22, 1
PRODUCER_ID_APIS = frozenset(
    {INIT_PRODUCER_ID, FETCH, END_TXN, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS}
)
TIME_FIELDS = {
    "transaction_start_time": DESCRIBE_TRANSACTIONS,
    "last_timestamp": DESCRIBE_PRODUCERS,
}
CONTROL_BATCH = 0x20  # attributes bit of a control (marker) batch
BATCH_TIMESTAMPS = ("base_timestamp", "max_timestamp")
NODE_FIELDS = {"host": "<host>", "port": "<port>"}
LIST_OFFSETS = 2
DELETE_RECORDS = 21
DESCRIBE_CONFIGS = 32
NODE_APIS = frozenset({3, 10, 60})  # Metadata, FindCoordinator, DescribeCluster
LIST_GROUPS = 16
OFFSET_FETCH = 9
TOPIC_PARTITION_LISTS = frozenset({"topic_partitions", "assigned_partitions", "topics"})
# api key -> (list field, group id field) of multi-group responses
MULTI_GROUP = {
    15: ("groups", "group_id"),
    69: ("groups", "group_id"),
    42: ("results", "group_id"),
    9: ("groups", "group_id"),
}
MEMBER_LIST_APIS = frozenset({11, 15, 69})  # JoinGroup, DescribeGroups, ConsumerGroupDescribe


class IdNumbering:
    """Server-generated ids -> <id#n>, in order of first appearance within one transcript."""

    def __init__(self) -> None:
        self.sent: set[str] = set()
        self.numbers: dict[str, str] = {}

    def saw_request(self, request: Any) -> None:
        for value in _strings(request):
            self.sent.add(value)

    def name(self, value: str) -> str:
        if value in self.numbers:
            return self.numbers[value]
        if value == "" or value in self.sent:
            return value
        self.numbers[value] = f"<id#{len(self.numbers) + 1}>"
        return self.numbers[value]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _all_have(value: Any, key: str) -> bool:
    """A list of dicts that all hold `key`."""
    return isinstance(value, list) and all(isinstance(t, dict) and key in t for t in value)


def _by_index(partition: dict[str, Any]) -> Any:
    return partition["partition_index"]


def _asks_all_offsets(request: Any) -> bool:
    if request.get("topics", ()) is None:
        return True
    return any(g.get("topics", ()) is None for g in request.get("groups", ()))


def normalise_response(
    api_key: int,
    request: Any,
    response: Any,
    ids: IdNumbering,
    own_groups: frozenset[str],
    topic_names: dict[str, str] | None = None,
) -> Any:
    """One plain response (wire.plain) to a plain request, with the rules above applied."""
    asked_all = api_key == OFFSET_FETCH and _asks_all_offsets(request)

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, v in value.items():
            if key == "throttle_time":
                v = 0
            elif key == "topic_id" and isinstance(v, str) and v in (topic_names or {}):
                v = f"<id of {(topic_names or {})[v]}>"
            elif key == "error_message" and isinstance(v, str) and v != "":
                v = "<message>"
            elif key == "cluster_id" and api_key in NODE_APIS:
                v = "<cluster>"
            elif key in NODE_FIELDS and api_key in NODE_APIS:
                v = NODE_FIELDS[key]
            elif key == "producer_id" and api_key in PRODUCER_ID_APIS and v >= 0:
                v = "<pid>"
            elif TIME_FIELDS.get(key) == api_key and isinstance(v, int) and v >= 0:
                v = "<time>"
            elif (
                key in BATCH_TIMESTAMPS
                and api_key == FETCH
                and isinstance(value.get("attributes"), int)
                and value["attributes"] & CONTROL_BATCH
            ):
                v = "<time>"
            elif key == "crc" and api_key == FETCH and isinstance(v, int):
                v = "valid" if value.get("crc_valid") else v
            elif key == "crc_valid":
                continue
            elif key in GENERATED_ID_FIELDS and isinstance(v, str):
                v = ids.name(v)
            else:
                v = walk(v)
                if key in TOPIC_PARTITION_LISTS and _all_have(v, "topic_id"):
                    v = sorted(v, key=lambda t: str(t.get("topic_id")))
                if (
                    key == "partitions"
                    and api_key == LIST_OFFSETS
                    and _all_have(v, "partition_index")
                ):
                    v = sorted(v, key=_by_index)
                if key == "configs" and api_key == DESCRIBE_CONFIGS and _all_have(v, "name"):
                    v = sorted(v, key=lambda c: str(c["name"]))
                if key == "members" and api_key in MEMBER_LIST_APIS and isinstance(v, list):
                    v = sorted(v, key=lambda m: str(m.get("member_id")))
            out[key] = v
        return out

    result = walk(response)
    if api_key == OFFSET_FETCH and asked_all and isinstance(result, dict):
        for holder in [result, *result.get("groups", [])]:
            if "topics" in holder:
                holder["topics"] = sorted(
                    (
                        {**t, "partitions": sorted(t["partitions"], key=_by_index)}
                        for t in holder["topics"]
                    ),
                    key=lambda t: t["name"],
                )
    if api_key == DELETE_RECORDS and isinstance(result, dict):
        result["topics"] = sorted(
            ({**t, "partitions": sorted(t["partitions"], key=_by_index)} for t in result["topics"]),
            key=lambda t: t["name"],
        )
    if api_key in MULTI_GROUP and isinstance(result, dict):
        field, key = MULTI_GROUP[api_key]
        if isinstance(result.get(field), list):
            result[field] = sorted(result[field], key=lambda g: str(g.get(key)))
    if api_key in (ADD_PARTITIONS_TO_TXN, DESCRIBE_TRANSACTIONS) and isinstance(result, dict):
        _sort_transaction_partitions(result)
    if api_key == LIST_TRANSACTIONS and isinstance(result, dict):
        mine = [
            t for t in result.get("transaction_states", []) if t["transactional_id"] in own_groups
        ]
        result["transaction_states"] = sorted(mine, key=lambda t: t["transactional_id"])
    if api_key == LIST_GROUPS and isinstance(result, dict):
        mine = [g for g in result.get("groups", []) if g.get("group_id") in own_groups]
        result["groups"] = sorted(mine, key=lambda g: g["group_id"])
    return result


def _sort_transaction_partitions(response: dict[str, Any]) -> None:
    """AddPartitionsToTxn results and DescribeTransactions topics: by topic name, then
    partition index."""
    holders: list[dict[str, Any]] = [response]
    holders += response.get("results_by_transaction", [])
    holders += response.get("transaction_states", [])
    for holder in holders:
        for field in ("results_by_topic_v3_and_below", "topic_results", "topics"):
            topics = holder.get(field)
            if not isinstance(topics, list):
                continue
            for topic in topics:
                if "results_by_partition" in topic:
                    topic["results_by_partition"] = sorted(
                        topic["results_by_partition"], key=_by_index
                    )
                elif isinstance(topic.get("partitions"), list):
                    topic["partitions"] = sorted(topic["partitions"])
            holder[field] = sorted(topics, key=lambda t: str(t.get("name", t.get("topic"))))
