"""What a request handler gets in place of the connection: the narrow context every handler
of the dispatch table (coordinator/server/dispatch.py) takes, with the request.

Theory of operation. The server builds one context with its services (Server.context);
each connection copies it with its client's address (`for_client`) and keeps `read_at` and
`closed` up to date, so a request costs no context of its own. A handler reads `read_at`
before its first await: a later read on the same connection moves it.

It lives here, with the data plane's handlers, because the group coordinator's handlers
(server/) use it too and import topics/ anyway, while topics/ must import neither server/
nor groups/: the group coordinator is `groups`, typed by what the handler needs -- the
gateway (runtime/gateway.py) for server/, the part of it the data plane uses
(group_admin.GroupAdmin) for topics/. Tests build a context from parts: a registry on a
temp dir, a gateway over a shard or two, or no coordinator at all.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from groupcoord.storage import GroupCommitter

from ..config import Config
from ..group_admin import GroupAdmin
from ..observability.metrics import ServerMetrics
from ..ownership import OwnershipView
from ..security.acl_model import ALLOW_ALL, AclOperation, Authorizer, ResourceType
from .registry import TopicRegistry


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


# A handler's answer when the request gets none (Produce with acks=0).
NO_RESPONSE: Any = _NoResponse()


@dataclass(slots=True, eq=False)
class Node:
    """This node as clients see it: its id, advertised address (the port is the real one
    once listening) and cluster id (known once started), and whether it is stopping."""

    node_id: int
    host: str
    port: int
    cluster_id: str = ""
    stopping: bool = False
    # serve --workers / --cluster: who owns which shard and partition (ownership.py,
    # cluster/lease_ownership.py), and every (live) node of the cluster as (node id, host,
    # port) on this listener; None and () for one process.
    ownership: OwnershipView | None = None
    brokers: tuple[tuple[int, str, int], ...] = ()


GroupsT = TypeVar("GroupsT", covariant=True)


@dataclass(slots=True, eq=False)
class HandlerContext(Generic[GroupsT]):
    """`groups`: the group coordinator's door. `topics`: the topic registry. `settings`: the
    server's configuration. `node`: this node. `metrics`, `committer` (Produce waits on its
    fsync rounds), `spawn` (a background task the server keeps), `allocate_producer_id`
    and `supported_versions` (the dispatch table's ranges): the server's services.
    `txns`: the transaction coordinator's door (runtime/txn_gateway.py's
    TxnCoordinatorGateway; typed Any here, as topics/ may not import the runtime's
    coordinators; None where a test builds a context without one).
    `security`: the authentication services (server/auth_services.py: SCRAM credentials,
    PLAIN users, mechanisms; typed Any for the same reason as `txns`).
    The client: `client_host` as Kafka prints it ("/127.0.0.1"; its client id is the
    request header's) and `client_address`, the same without the slash (what ACL host
    fields match; derived from client_host when not given, and set with it by
    `set_client_address`, once per connection rather than per check), `read_at`
    (time.perf_counter of the read that brought the request, for the queue-time metric)
    and `closed` (the connection is gone); `listener_name`, the listener it came in on
    (its `node` advertises that listener's address); `principal`, who it authenticated
    as, Kafka's `Type:Name` string ("User:ANONYMOUS" on PLAINTEXT, the certificate subject
    with TLS client authentication, the SASL user): what an authorizer reads; `sasl`, the
    connection's SASL authenticator (server/sasl_auth.py) on SASL listeners, for
    re-authentication (KIP-368), else None. `authorizer`: the server's ACL authorizer
    (security/acl_model.py; ALLOW_ALL when none is configured), asked
    through `authorized`. `produce_tail`: the connection's last Produce still waiting for
    the transaction coordinator (an asyncio future set once it appended), or None: the
    next Produce appends after it (produce.py)."""

    groups: GroupsT
    topics: TopicRegistry
    settings: Config
    node: Node
    metrics: ServerMetrics
    committer: GroupCommitter
    spawn: Callable[[Coroutine[Any, Any, Any]], None]
    allocate_producer_id: Callable[[], int]
    supported_versions: Mapping[int, tuple[int, int]]
    txns: Any = None
    security: Any = None
    client_host: str = "/?"
    read_at: float = 0.0
    closed: bool = False
    listener_name: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    sasl: Any = None
    authorizer: Authorizer = ALLOW_ALL
    produce_tail: Any = None
    client_address: str = ""

    def __post_init__(self) -> None:
        if not self.client_address:
            self.client_address = self.client_host.lstrip("/")

    def set_client_address(self, address: str) -> None:
        """The client is at `address` (an IP address as the socket gives it)."""
        self.client_host = "/" + address
        self.client_address = address

    def authorized(
        self, operation: AclOperation, resource_type: ResourceType, resource_name: str
    ) -> bool:
        """May this connection's principal perform `operation` on the resource."""
        return self.authorizer.authorize(
            self.principal, self.client_address, operation, resource_type, resource_name
        )

    def for_client(self, client_host: str) -> HandlerContext[GroupsT]:
        """A copy for one connection's client (the server's services and the listener
        shared, the client's fields fresh)."""
        return replace(
            self,
            client_host=client_host,
            client_address=client_host.lstrip("/"),
            read_at=0.0,
            closed=False,
            principal="User:ANONYMOUS",
            sasl=None,
            produce_tail=None,
        )


# What the data plane's handlers take: they ask the group coordinator only GroupAdmin's
# questions.
TopicsContext = HandlerContext[GroupAdmin]
