"""One ACL (Kafka's AclBinding: a resource pattern and an access control entry) and the
filters of DescribeAcls / DeleteAcls (AclBindingFilter.matches), as Kafka reads them.

Hosts are compared as Kafka compares them: `*`, the client's IP string as Java prints it
(IPv6 uncompressed, `0:0:0:0:0:0:0:1`), or (Kafka 4.4, KIP-1276) a CIDR block containing
it. `java_host` turns a Python address into Java's spelling once per connection.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

from .acl_model import AclOperation, AclPermissionType, PatternType, ResourceType

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"

# What an ALLOW ACL of each operation also allows (Kafka's implication; DENY ACLs name
# their exact operation, ALL aside).
_IMPLIED_BY_ALLOW: dict[int, frozenset[int]] = {
    AclOperation.READ: frozenset({AclOperation.DESCRIBE}),
    AclOperation.WRITE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.DELETE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS}),
}


def allow_covers(acl_operation: int, requested: int) -> bool:
    """Whether an ALLOW ACL of `acl_operation` allows `requested`."""
    if acl_operation == requested or acl_operation == AclOperation.ALL:
        return True
    implied = _IMPLIED_BY_ALLOW.get(acl_operation)  # IntEnum keys: ints find them
    return implied is not None and requested in implied


@lru_cache(maxsize=4096)
def java_host(host: str) -> str:
    """`host` as Java's InetAddress.getHostAddress prints it: IPv4 unchanged, IPv6 without
    `::` compression or leading zeros; anything that is not an address unchanged."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 4:
        return str(address)
    return ":".join(format(int(group, 16), "x") for group in address.exploded.split(":"))


@lru_cache(maxsize=4096)
def _network(host: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(host, strict=False)
    except ValueError:
        return None


def host_matches(acl_host: str, client_host: str) -> bool:
    """Whether an ACL's host (`*`, an address, a CIDR block) covers the client's address
    (Java's spelling, see java_host)."""
    if acl_host == WILDCARD_HOST or acl_host == client_host:
        return True
    if "/" not in acl_host:
        return False
    network = _network(acl_host)
    if network is None:
        return False
    try:
        return ipaddress.ip_address(client_host) in network
    except ValueError:
        return False


def valid_cidr(host: str) -> bool:
    return _network(host) is not None


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL. Equal bindings are the same ACL (creating one twice adds nothing)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str  # "User:alice", "User:*"
    host: str  # "*", an address, a CIDR block
    operation: AclOperation
    permission_type: AclPermissionType  # ALLOW or DENY

    def key(self) -> str:
        """A stable text naming this ACL (the storage key)."""
        return "\x1f".join(
            (
                str(int(self.resource_type)),
                str(int(self.pattern_type)),
                self.resource_name,
                self.principal,
                self.host,
                str(int(self.operation)),
                str(int(self.permission_type)),
            )
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls filter or one DeleteAcls filter. None: any name / principal / host;
    ANY codes: any value (Kafka's AclBindingFilter.matches)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return (
            self.permission_type == AclPermissionType.ANY
            or acl.permission_type == self.permission_type
        )

    def _pattern_matches(self, acl: AclBinding) -> bool:
        name = self.resource_name
        pattern = self.pattern_type
        if pattern == PatternType.ANY:
            return name is None or acl.resource_name == name
        if pattern == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name == name or acl.resource_name == WILDCARD_RESOURCE
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)
        if acl.pattern_type != pattern:
            return False
        return name is None or acl.resource_name == name

    def invalid(self) -> str | None:
        """Why Kafka refuses this filter (INVALID_REQUEST), or None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if (
            self.operation == AclOperation.UNKNOWN
            or self.permission_type == AclPermissionType.UNKNOWN
        ):
            return "Unknown entryFilter."
        return None
