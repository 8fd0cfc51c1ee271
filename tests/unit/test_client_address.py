"""The client's address for ACL checks (issue 21): computed once per connection
(HandlerContext.set_client_address), never stripped from client_host on a check."""

from __future__ import annotations

from typing import Any

from groupcoord.coordinator.observability.metrics import ServerMetrics
from groupcoord.coordinator.security.acl_model import AclOperation, ResourceType
from groupcoord.coordinator.topics.access import allowed, authorize_by_resource_type
from groupcoord.coordinator.topics.context import HandlerContext
from groupcoord.protocol.api import ApiKey


class _NoStripping(str):
    """A client_host that fails the test when a check strips it."""

    def lstrip(self, chars: Any = None) -> str:
        raise AssertionError("client_host stripped on a check")


class _Recording:
    """An authorizer that allows every group but "secret" and records the hosts asked."""

    enabled = True

    def __init__(self) -> None:
        self.hosts: list[str] = []

    def authorize(
        self, principal: str, host: str, operation: Any, resource_type: Any, name: str
    ) -> bool:
        self.hosts.append(host)
        return name != "secret"

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: Any, resource_type: Any
    ) -> bool:
        self.hosts.append(host)
        return True


def _context(authorizer: Any, **fields: Any) -> HandlerContext[Any]:
    none: Any = None
    return HandlerContext(
        none,
        none,
        none,
        none,
        ServerMetrics(),
        none,
        none,
        none,
        {},
        authorizer=authorizer,
        **fields,
    )


def test_checks_use_the_address_set_once_per_connection() -> None:
    authorizer = _Recording()
    ctx = _context(authorizer).for_client("/?")
    assert ctx.client_address == "?"
    ctx.set_client_address("10.1.2.3")
    assert (ctx.client_host, ctx.client_address) == ("/10.1.2.3", "10.1.2.3")
    ctx.client_host = _NoStripping(ctx.client_host)
    read, group = AclOperation.READ, ResourceType.GROUP
    assert ctx.authorized(read, group, "g")
    assert allowed(ctx, ApiKey.JOIN_GROUP, read, group, "g")
    assert not allowed(ctx, ApiKey.JOIN_GROUP, read, group, "secret")  # a denial, logged
    assert authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)
    assert authorizer.hosts == ["10.1.2.3"] * 4


def test_a_context_built_with_a_client_host_knows_its_address() -> None:
    assert _context(None, client_host="/127.0.0.1").client_address == "127.0.0.1"
    copy = _context(None, client_host="/127.0.0.1").for_client("/::1")
    assert (copy.client_host, copy.client_address) == ("/::1", "::1")
