"""The listeners the server opens (config `listeners`), each with its own view of the
node: a Node advertising that listener's address and a handler context carrying the
listener's name, so Metadata, FindCoordinator and DescribeCluster answer each client with
the address of the listener it came in on (Kafka's request.context.listenerName)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..security.listeners import ListenerSpec
from ..topics.context import Node
from .context import GroupContext


@dataclass(slots=True, eq=False)
class ServedListener:
    spec: ListenerSpec
    node: Node
    context: GroupContext  # the server's context with this listener's node and name


def served_listeners(specs: list[ListenerSpec], base: GroupContext) -> list[ServedListener]:
    """One ServedListener per spec; the first keeps the server's own Node (base.node)."""
    served = []
    for index, spec in enumerate(specs):
        if index == 0:
            node = base.node
            node.host, node.port = spec.advertised_host, spec.advertised_port
        else:
            node = Node(
                base.node.node_id,
                spec.advertised_host,
                spec.advertised_port,
                ownership=base.node.ownership,
            )
        context = dataclasses.replace(base, node=node, listener_name=spec.name)
        served.append(ServedListener(spec, node, context))
    return served
