"""What the web page shows of the groups, read from a shard between events (the HTTP
endpoint's GET /api/groups and /api/groups/<group>, observability/group_api.py, which adds
lag): every group's summary, and one group's members, assignment and committed offsets.

Reads only: nothing here writes a record or changes a group. A classic group's members'
assignments are decoded from their ConsumerProtocolAssignment bytes when the group speaks
the consumer protocol (another protocol's bytes are opaque: no partitions shown)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..groups.classic.consumer_protocol import ConsumerProtocolError, decode_assignment
from ..groups.classic.group import ClassicGroup
from ..groups.consumer.describe import CONSUMER_GROUP_TYPE
from ..groups.consumer.migration import CONSUMER_PROTOCOL_TYPE
from ..groups.shard import GroupShard

CLASSIC_GROUP_TYPE = "classic"


def group_summaries(
    shard: GroupShard, high_watermark: Callable[[str, int], int | None]
) -> list[dict[str, Any]]:
    """Every group of the shard as the list of groups shows it: {"group", "type",
    "protocol_type", "protocol", "state", "members", "partitions", "lag"} (`partitions`:
    its offsets on existing partitions, `lag`: records behind summed over them). A simple
    group (offsets only) is a classic group in state Empty."""
    lag = shard.offsets.lag_by_group(high_watermark)
    none = (0, 0)
    out = []
    for group_id, group in shard.groups.items():
        partitions, behind = lag.get(group_id, none)
        out.append(
            {
                "group": group_id,
                "type": CLASSIC_GROUP_TYPE,
                "protocol_type": group.protocol_type or "",
                "protocol": group.protocol_name or "",
                "state": group.state.value,
                "members": len(group.members),
                "partitions": partitions,
                "lag": behind,
            }
        )
    for group_id, consumer in shard.consumer_groups.items():
        partitions, behind = lag.get(group_id, none)
        out.append(
            {
                "group": group_id,
                "type": CONSUMER_GROUP_TYPE,
                "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocol": consumer.preferred_assignor() or "",
                "state": consumer.state().value,
                "members": len(consumer),
                "partitions": partitions,
                "lag": behind,
            }
        )
    return out


def group_page(shard: GroupShard, group_id: str) -> dict[str, Any] | None:
    """One group: its summary fields, members (each with its assignment as
    {topic: [partitions]}) and committed offsets [[topic, partition, offset]]; None for a
    group the shard does not hold."""
    classic = shard.classic_group(group_id)
    consumer = shard.consumer_groups.get(group_id)
    if consumer is not None:
        described = shard.consumer.describe(group_id)
        page: dict[str, Any] = {
            "group": group_id,
            "type": CONSUMER_GROUP_TYPE,
            "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocol": described.assignor_name,
            "state": described.group_state,
            "epoch": described.group_epoch,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "epoch": m.member_epoch,
                    "assignment": {t.topic_name: t.partitions for t in m.assignment},
                }
                for m in described.members
            ],
        }
    elif classic is not None:
        page = _classic_page(classic)
    else:
        return None
    page["offsets"] = [
        [topic, partition, offset.offset]
        for topic, partitions in sorted(shard.offsets.group_offsets(group_id).items())
        for partition, offset in sorted(partitions.items())
    ]
    return page


def _classic_page(group: ClassicGroup) -> dict[str, Any]:
    consumer = group.protocol_type == CONSUMER_PROTOCOL_TYPE
    members = []
    for m in group.members.values():
        assignment: dict[str, list[int]] = {}
        if consumer and m.assignment:
            try:
                decoded = decode_assignment(m.assignment)
            except ConsumerProtocolError:
                decoded = None
            if decoded is not None:
                for topic, partitions in decoded.partitions:
                    assignment.setdefault(topic, []).extend(sorted(partitions))
        members.append(
            {
                "member_id": m.member_id,
                "instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "epoch": group.generation_id,
                "assignment": assignment,
            }
        )
    return {
        "group": group.group_id,
        "type": CLASSIC_GROUP_TYPE,
        "protocol_type": group.protocol_type or "",
        "protocol": group.protocol_name or "",
        "state": group.state.value,
        "epoch": group.generation_id,
        "members": members,
    }
