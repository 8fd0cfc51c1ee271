"""`groupcoord topics ...`: list, describe, create, delete, alter-config."""

from __future__ import annotations

import argparse
from typing import Any

from .kafka_client import AdminClient, check
from .output import Exit, print_json

DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config_source of a topic's own setting
SET, DELETE = 0, 1  # IncrementalAlterConfigs' operations


def _config(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser("topics", help="topics: list, describe, create, delete, alter-config")
    cmds = topics.add_subparsers(dest="topics_command", metavar="COMMAND")
    topics.set_defaults(run=lambda args, parser: (topics.print_help(), Exit.USAGE)[1])

    p = cmds.add_parser("list", parents=[common], help="list topics")
    p.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave out internal topics (__consumer_offsets, ...), as kafka-topics.sh does",
    )
    p.set_defaults(run=list_topics, uses="kafka")

    p = cmds.add_parser(
        "describe", parents=[common], help="partitions, leaders and own configs of topics"
    )
    p.add_argument("topic", nargs="*", help="topics (default: all)")
    p.set_defaults(run=describe, uses="kafka")

    p = cmds.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=-1, help="default: the server's")
    p.add_argument("--replication-factor", type=int, default=-1, help="default: the server's")
    p.add_argument("--config", type=_config, action="append", default=[], metavar="NAME=VALUE")
    p.set_defaults(run=create, uses="kafka")

    p = cmds.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("topic", nargs="+")
    p.set_defaults(run=delete, uses="kafka")

    p = cmds.add_parser("alter-config", parents=[common], help="set or remove configs of a topic")
    p.add_argument("topic")
    p.add_argument("--set", type=_config, action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--delete", action="append", default=[], metavar="NAME")
    p.set_defaults(run=alter_config, uses="kafka")


def list_topics(args: argparse.Namespace, client: AdminClient) -> int:
    names = sorted(
        t.name
        for t in client.metadata(None).topics
        if not (args.exclude_internal and t.is_internal)
    )
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return Exit.OK


def describe(args: argparse.Namespace, client: AdminClient) -> int:
    metadata = client.metadata(args.topic or None)
    described = []
    for topic in sorted(metadata.topics, key=lambda t: t.name):
        check(topic.error_code, what=f"topic {topic.name}")
        configs = {
            c.name: c.value
            for c in client.describe_topic_configs(topic.name)
            if c.config_source == DYNAMIC_TOPIC_CONFIG
        }
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        described.append(
            {
                "topic": topic.name,
                "topic_id": str(topic.topic_id) if getattr(topic, "topic_id", None) else None,
                "partition_count": len(partitions),
                "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
                "configs": configs,
                "partitions": [
                    {
                        "partition": p.partition_index,
                        "leader": p.leader_id,
                        "replicas": list(p.replica_nodes),
                        "isr": list(p.isr_nodes),
                    }
                    for p in partitions
                ],
            }
        )
    if args.json:
        print_json(described)
        return Exit.OK
    for t in described:  # kafka-topics.sh --describe's layout
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        print(
            f"Topic: {t['topic']}\tTopicId: {t['topic_id'] or '-'}\t"
            f"PartitionCount: {t['partition_count']}\t"
            f"ReplicationFactor: {t['replication_factor']}\tConfigs: {configs}"
        )
        for p in t["partitions"]:
            print(
                f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                f"Replicas: {','.join(map(str, p['replicas']))}\t"
                f"Isr: {','.join(map(str, p['isr']))}"
            )
    return Exit.OK


def create(args: argparse.Namespace, client: AdminClient) -> int:
    result = client.create_topic(
        args.topic, args.partitions, args.replication_factor, dict(args.config)
    )
    if args.json:
        print_json(
            {
                "topic": args.topic,
                "partitions": getattr(result, "num_partitions", None),
                "replication_factor": getattr(result, "replication_factor", None),
            }
        )
    else:
        print(f"Created topic {args.topic}.")
    return Exit.OK


def delete(args: argparse.Namespace, client: AdminClient) -> int:
    for topic in args.topic:
        client.delete_topic(topic)
        if not args.json:
            print(f"Deleted topic {topic}.")
    if args.json:
        print_json({"deleted": args.topic})
    return Exit.OK


def alter_config(args: argparse.Namespace, client: AdminClient) -> int:
    changes: list[tuple[str, int, str | None]] = [(k, SET, v) for k, v in args.set]
    changes += [(k, DELETE, None) for k in args.delete]
    if not changes:
        print("groupcoord: nothing to change: give --set NAME=VALUE or --delete NAME")
        return Exit.USAGE
    client.alter_topic_config(args.topic, changes)
    if args.json:
        print_json({"topic": args.topic, "set": dict(args.set), "deleted": args.delete})
    else:
        print(f"Completed updating config for topic {args.topic}.")
    return Exit.OK
