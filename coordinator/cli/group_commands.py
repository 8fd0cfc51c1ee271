"""`groupcoord groups ...`: list, describe, timeline, reset-offsets, delete, delete-offsets."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from . import group_view, offset_reset, timeline
from .kafka_client import AdminClient, KafkaError
from .output import Exit, error, kafka_table, print_json

# Kafka's group states (GroupState) and types, as ListGroups filters take them.
STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
TYPES = ("classic", "consumer")


def _choices(text: str, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    by_lower = {v.lower(): v for v in valid}
    chosen = []
    for item in text.split(","):
        name = by_lower.get(item.strip().lower())
        if name is None:
            raise argparse.ArgumentTypeError(
                f"invalid {what} {item.strip()!r}; valid: {', '.join(valid)}"
            )
        chosen.append(name)
    return tuple(chosen)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    groups = sub.add_parser("groups", help="consumer groups: list, describe, reset offsets...")
    cmds = groups.add_subparsers(dest="groups_command", metavar="COMMAND")
    groups.set_defaults(run=lambda args, parser: _help(groups))

    p = cmds.add_parser("list", parents=[common], help="list groups")
    p.add_argument(
        "--state",
        type=lambda t: _choices(t, STATES, "state"),
        default=(),
        help=f"only groups in these states (comma-separated: {', '.join(STATES)})",
    )
    p.add_argument(
        "--type",
        type=lambda t: _choices(t, TYPES, "type"),
        default=(),
        help="only groups of these types (classic, consumer)",
    )
    p.set_defaults(run=list_groups, uses="kafka")

    p = cmds.add_parser(
        "describe",
        parents=[common],
        help="members, assignments, committed offsets and lag of a group",
    )
    p.add_argument("group")
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--offsets",
        action="store_true",
        help="partitions: committed offset, log end offset, LAG, owner (the default)",
    )
    view.add_argument(
        "--members", action="store_true", help="members: host, client id, partitions owned"
    )
    view.add_argument(
        "--state", action="store_true", help="state, coordinator, assignor, member count"
    )
    p.set_defaults(run=describe, uses="kafka")

    p = cmds.add_parser(
        "timeline", parents=[common], help="the coordinator's rebalance timeline (ours only)"
    )
    p.add_argument("group")
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="the server's HTTP port, or https://HOST:PORT (default: the bootstrap host, "
        "port 9464)",
    )
    p.add_argument(
        "--http-token-file",
        metavar="FILE",
        help="a file holding the bearer token the HTTP port requires (http_auth_token_file)",
    )
    p.set_defaults(run=show_timeline, uses="http")

    p = cmds.add_parser(
        "reset-offsets",
        parents=[common],
        help="reset a group's committed offsets (dry run unless --execute)",
        description="Reset the committed offsets of a group that has no live member, as "
        "kafka-consumer-groups.sh --reset-offsets does. Prints the new offsets; changes "
        "nothing unless --execute is given.",
    )
    p.add_argument("group")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="a topic (every partition) or some of its partitions; repeatable",
    )
    where.add_argument(
        "--all-topics", action="store_true", help="every partition the group has offsets for"
    )
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (within the log)")
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after that time (no zone: local time)",
    )
    to.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (may be < 0)"
    )
    to.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first offset at or after now minus the duration (e.g. PT1H)",
    )
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument(
        "--dry-run", action="store_true", help="print the new offsets only (the default)"
    )
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(run=reset_offsets, uses="kafka")

    p = cmds.add_parser("delete", parents=[common], help="delete groups (with no live member)")
    p.add_argument("group", nargs="+")
    p.set_defaults(run=delete, uses="kafka")

    p = cmds.add_parser(
        "delete-offsets", parents=[common], help="delete a group's offsets of some topics"
    )
    p.add_argument("group")
    p.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="a topic (every partition) or some of its partitions; repeatable",
    )
    p.set_defaults(run=delete_offsets, uses="kafka")


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return Exit.USAGE


# -- list -------------------------------------------------------------------------------


def list_groups(args: argparse.Namespace, client: AdminClient) -> int:
    listed = client.list_groups(args.state, args.type)
    groups = sorted(listed, key=lambda g: g.group_id)
    if args.json:
        print_json(
            [
                {
                    "group": g.group_id,
                    "type": getattr(g, "group_type", "") or None,
                    "state": getattr(g, "group_state", "") or None,
                    "protocol_type": g.protocol_type,
                }
                for g in groups
            ]
        )
        return Exit.OK
    width = max([15, *(len(g.group_id) for g in groups)]) + 10
    print(f"{'GROUP':<{width}} {'TYPE':<20} {'STATE':<20}")
    for g in groups:
        kind = getattr(g, "group_type", "") or "-"
        state = getattr(g, "group_state", "") or "-"
        print(f"{g.group_id:<{width}} {kind:<20} {state:<20}")
    return Exit.OK


# -- describe ---------------------------------------------------------------------------


def load_group(client: AdminClient, group_id: str) -> group_view.Group:
    """The group as a consumer group (KIP-848) if it is one, else as a classic group; Kafka's
    admin client asks in the same order."""
    node = client.coordinator(group_id)
    described = client.describe_consumer(group_id, node)
    if described is not None:
        return group_view.from_consumer(described, node)
    return group_view.from_classic(client.describe_classic(group_id, node), node)


def describe(args: argparse.Namespace, client: AdminClient) -> int:
    group = load_group(client, args.group)
    if group.state == "Dead":
        error(f"consumer group {args.group!r} does not exist")
        return Exit.KAFKA_ERROR
    if not args.json and (args.members or args.state):
        _warn_state(group)
        if args.members:
            _print_members(group)
        else:
            host, port = client.broker(group.coordinator)
            kafka_table(
                ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                [
                    (
                        group.group_id,
                        f"{host}:{port}  ({group.coordinator})",
                        group.protocol or None,
                        group.state,
                        len(group.members),
                    )
                ],
                (None, max(25, len(f"{host}:{port}  ({group.coordinator})")), 20, 20, None),
            )
        return Exit.OK
    committed = client.committed(args.group, group.coordinator)
    partitions = group_view.partitions_of(group, committed)
    log_end = client.list_offsets(partitions, offset_reset.LATEST) if partitions else {}
    rows = group_view.offset_rows(group, committed, log_end)
    if args.json:
        print_json(group_view.describe_json(group, rows))
        return Exit.OK
    _warn_state(group)
    if rows:
        kafka_table(
            (
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ),
            [
                (
                    r.group,
                    r.topic,
                    r.partition,
                    r.current_offset,
                    r.log_end_offset,
                    r.lag,
                    r.consumer_id,
                    r.host,
                    r.client_id,
                )
                for r in rows
            ],
            (None, None, 10, 15, 15, 15, None, None, None),
        )
    return Exit.OK


def _warn_state(group: group_view.Group) -> None:
    """What Kafka's tool says on stderr of an empty or rebalancing group."""
    if group.state == "Empty":
        print(f"\nConsumer group '{group.group_id}' has no active members.", file=sys.stderr)
    elif group.state in group_view.REBALANCING:
        print(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)


def _print_members(group: group_view.Group) -> None:
    """kafka-consumer-groups.sh --describe --members: GROUP-INSTANCE-ID only when a member
    has one."""
    static = any(m.instance_id for m in group.members)
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    widths: list[int | None] = [None, None, None, None, None]
    if static:
        header.insert(2, "GROUP-INSTANCE-ID")
        widths.insert(2, max([17, *(len(m.instance_id or "") for m in group.members)]))
    rows = []
    for m in group.members:
        row: list[object] = [group.group_id, m.member_id, m.host, m.client_id]
        if static:
            row.insert(2, m.instance_id or "")
        rows.append([*row, len(set(m.assignment))])
    kafka_table(header, rows, widths)


# -- timeline ---------------------------------------------------------------------------


def show_timeline(args: argparse.Namespace, client: None) -> int:
    address = timeline.http_address(args.http, args.bootstrap_server)
    try:
        token = None
        if args.http_token_file:
            with open(args.http_token_file) as f:
                token = f.read().strip()
        data = timeline.fetch(address, args.group, args.timeout, token)
    except timeline.TimelineNotFound as e:
        error(str(e))
        return Exit.KAFKA_ERROR
    except OSError as e:
        error(f"cannot read the timeline from {address}: {e}")
        return Exit.UNREACHABLE
    if args.json:
        print_json(data)
    else:
        timeline.print_table(data)
    return Exit.OK


# -- reset-offsets ----------------------------------------------------------------------


def _partitions(
    client: AdminClient, scope: offset_reset.Scope, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if scope.all_topics:
        return sorted(committed)
    chosen = set(scope.partitions)
    if scope.whole_topics:
        for topic, parts in client.partitions(list(scope.whole_topics)).items():
            chosen.update((topic, p) for p in parts)
    if scope.partitions:
        known = client.partitions(sorted({t for t, _ in scope.partitions}))
        missing = [tp for tp in scope.partitions if tp[1] not in known.get(tp[0], [])]
        if missing:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "no such partitions: " + ", ".join(f"{t}-{p}" for t, p in missing),
            )
    return sorted(chosen)


def plan_reset(
    args: argparse.Namespace, client: AdminClient, node: int
) -> dict[tuple[str, int], int]:
    committed = client.committed(args.group, node)
    scope = offset_reset.parse_scope(args.topic or [], args.all_topics)
    partitions = _partitions(client, scope, committed)
    if not partitions:
        return {}
    if args.to_earliest:
        return client.list_offsets(partitions, offset_reset.EARLIEST)
    log_end = client.list_offsets(partitions, offset_reset.LATEST)
    if args.to_latest:
        return log_end
    if args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            when_ms = offset_reset.parse_datetime_ms(args.to_datetime)
        else:
            when_ms = int(time.time() * 1000) - offset_reset.parse_duration_ms(args.by_duration)
        by_time = client.list_offsets(partitions, when_ms)
        return offset_reset.at_time(partitions, by_time, log_end)
    if args.to_offset is not None:
        requested = dict.fromkeys(partitions, args.to_offset)
    else:
        requested = offset_reset.shifted(partitions, committed, args.shift_by)
    log_start = client.list_offsets(partitions, offset_reset.EARLIEST)
    return offset_reset.clamp(requested, log_start, log_end)


def reset_offsets(args: argparse.Namespace, client: AdminClient) -> int:
    group = load_group(client, args.group)
    if group.state not in ("Empty", "Dead"):
        error(
            f"Assignments can only be reset if the group '{args.group}' is inactive, but the "
            f"current state is {group.state}."
        )
        return Exit.KAFKA_ERROR
    try:
        plan = plan_reset(args, client, group.coordinator)
    except ValueError as e:  # ResetError, and arguments found bad only now
        error(str(e))
        return Exit.KAFKA_ERROR if isinstance(e, offset_reset.ResetError) else Exit.USAGE
    if args.execute and plan:
        client.commit(args.group, group.coordinator, plan)
    if args.json:
        print_json(
            {
                "group": args.group,
                "executed": bool(args.execute),
                "offsets": [
                    {"topic": t, "partition": p, "new_offset": o}
                    for (t, p), o in sorted(plan.items())
                ],
            }
        )
        return Exit.OK
    if plan:
        kafka_table(
            ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
            [(args.group, t, p, o) for (t, p), o in sorted(plan.items())],
            (None, None, 10, None),
        )
    if not args.execute:
        print("(dry run: nothing changed; --execute commits these offsets)", file=sys.stderr)
    return Exit.OK


# -- delete -----------------------------------------------------------------------------


def delete(args: argparse.Namespace, client: AdminClient) -> int:
    results = client.delete_groups(list(dict.fromkeys(args.group)))
    failed = {g: c for g, c in results.items() if c}
    if args.json:
        print_json(
            [
                {"group": g, "error": ErrorCode(c).name if c else None}
                for g, c in sorted(results.items())
            ]
        )
    else:
        ok = [g for g in results if not results[g]]
        if ok:
            names = ", ".join(f"'{g}'" for g in ok)
            print(f"Deletion of requested consumer groups ({names}) was successful.")
        for g, c in sorted(failed.items()):
            error(f"group '{g}' was not deleted: {_name(c)}")
    return Exit.KAFKA_ERROR if failed else Exit.OK


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def delete_offsets(args: argparse.Namespace, client: AdminClient) -> int:
    scope = offset_reset.parse_scope(args.topic, False)
    partitions = set(scope.partitions)
    if scope.whole_topics:
        for topic, parts in client.partitions(list(scope.whole_topics)).items():
            partitions.update((topic, p) for p in parts)
    top, results = client.delete_offsets(args.group, sorted(partitions))
    failed = bool(top) or any(results.values())
    if args.json:
        print_json(
            {
                "group": args.group,
                "error": _name(top) if top else None,
                "partitions": [
                    {"topic": t, "partition": p, "error": _name(c) if c else None}
                    for (t, p), c in sorted(results.items())
                ],
            }
        )
        return Exit.KAFKA_ERROR if failed else Exit.OK
    if top:
        error(f"offsets of group '{args.group}' were not deleted: {_name(top)}")
    else:
        print(f"Request succeeded for deleting offsets from group {args.group}.")
    if results:
        kafka_table(
            ("TOPIC", "PARTITION", "STATUS"),
            [
                (t, p, f"Error: {_name(c)}" if c else "Successful")
                for (t, p), c in sorted(results.items())
            ],
            (None, 10, None),
        )
    return Exit.KAFKA_ERROR if failed else Exit.OK
