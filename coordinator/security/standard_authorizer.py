"""Kafka's StandardAuthorizer: the decision of every ACL check (authorize) and of
"allowed on some resource of this type" (authorize_by_resource_type).

Theory of operation. The decision is Kafka's (StandardAuthorizerData.authorize): super
users are allowed before anything else; otherwise the ACLs whose pattern covers the
resource are those LITERAL on its name, LITERAL on `*`, and PREFIXED on a prefix of its
name. Among those whose principal (exact or `User:*`) and host (`*`, exact, CIDR) match, a
DENY naming the operation (or ALL) denies whatever else allows; else an ALLOW naming it,
ALL, or an operation implying it (acl_binding.allow_covers) allows. When no ACL at all
covers the resource, `allow_everyone_if_no_acl_found` decides; when some do but none
matched, the answer is no.

Speed: literal ACLs are indexed by (resource type, name), prefixed ones by (resource type,
prefix) with the sorted distinct prefix lengths of each type, so a check costs a few dict
lookups whatever the number of ACLs. Decisions are remembered per (principal, host,
operation, resource type, name) in a bounded dict (oldest forgotten first), emptied on
every ACL change: a steady heartbeat or commit asks one dict lookup.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from .acl_binding import (
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    allow_covers,
    host_matches,
    java_host,
)
from .acl_model import AclOperation, AclPermissionType, PatternType, ResourceType

# Kafka's probe name for authorize_by_resource_type (super users and allow-everyone pass).
_PROBE_NAME = "hardcode"

_Key = tuple[str, str, int, int, str]


class StandardAuthorizer:
    """The ACLs in memory and the decisions on them. `add`/`remove` change the ACLs (the
    caller persists first: security/acl_store.py); `authorize` answers the Authorizer
    protocol (security/acl_model.py)."""

    enabled = True

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        cache_entries: int = 100_000,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache_entries = cache_entries
        self._cache: dict[_Key, bool] = {}
        self._acls: dict[AclBinding, None] = {}  # insertion ordered, as a set
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        # Per resource type, the distinct lengths of its prefixed ACLs' names, sorted, and
        # how many distinct prefixes have each (type, length).
        self._prefix_lengths: dict[int, list[int]] = {}
        self._prefix_counts: dict[tuple[int, int], int] = {}

    @classmethod
    def from_settings(
        cls, super_users: str, allow_everyone: bool, cache_entries: int
    ) -> StandardAuthorizer:
        """From the settings' spelling: `super_users` `;`-separated (Kafka's super.users)."""
        names = (p.strip() for p in super_users.split(";"))
        return cls(filter(None, names), allow_everyone, cache_entries)

    # -- the ACLs -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._acls)

    def __contains__(self, acl: AclBinding) -> bool:
        return acl in self._acls

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs matching `acl_filter` (all without one), in creation order."""
        if acl_filter is None:
            return list(self._acls)
        return [acl for acl in self._acls if acl_filter.matches(acl)]

    def add(self, acl: AclBinding) -> bool:
        """Add an ACL; False when it was there already."""
        if acl in self._acls:
            return False
        self._acls[acl] = None
        if acl.pattern_type == PatternType.PREFIXED:
            key = (int(acl.resource_type), acl.resource_name)
            entries = self._prefixed.setdefault(key, [])
            if not entries:
                self._count_prefix(key[0], len(acl.resource_name), 1)
            entries.append(acl)
        else:
            self._literal.setdefault((int(acl.resource_type), acl.resource_name), []).append(acl)
        self._cache.clear()
        return True

    def remove(self, acl: AclBinding) -> bool:
        """Remove an ACL; False when it was not there."""
        if acl not in self._acls:
            return False
        del self._acls[acl]
        key = (int(acl.resource_type), acl.resource_name)
        index = self._prefixed if acl.pattern_type == PatternType.PREFIXED else self._literal
        entries = index[key]
        entries.remove(acl)
        if not entries:
            del index[key]
            if index is self._prefixed:
                self._count_prefix(key[0], len(acl.resource_name), -1)
        self._cache.clear()
        return True

    def _count_prefix(self, resource_type: int, length: int, delta: int) -> None:
        """One more (or one fewer) distinct prefix of `length` for the type: the sorted
        lengths list holds the lengths counted above zero."""
        key = (resource_type, length)
        count = self._prefix_counts.get(key, 0) + delta
        lengths = self._prefix_lengths.setdefault(resource_type, [])
        if count:
            self._prefix_counts[key] = count
            if count == 1 and delta == 1:
                bisect.insort(lengths, length)
            return
        del self._prefix_counts[key]
        lengths.remove(length)
        if not lengths:
            del self._prefix_lengths[resource_type]

    # -- decisions ------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """May `principal` from `host` perform `operation` on the LITERAL resource
        (resource_type, resource_name): Kafka's decision (module docstring)."""
        key = (principal, host, operation, resource_type, resource_name)
        decided = self._cache.get(key)
        if decided is not None:
            return decided
        decided = self._decide(principal, java_host(host), operation, resource_type, resource_name)
        cache = self._cache
        if len(cache) >= self._cache_entries:
            if not cache:
                return decided  # no cache at all (cache_entries 0)
            del cache[next(iter(cache))]  # the oldest decision
        cache[key] = decided
        return decided

    def _decide(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        covering = False
        allowed = False
        for acl in self._covering(resource_type, name):
            covering = True
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if not host_matches(acl.host, host):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation == operation or acl.operation == AclOperation.ALL:
                    return False  # DENY wins, however specific the ALLOW
            elif not allowed and allow_covers(acl.operation, operation):
                allowed = True
        if not covering:
            return self.allow_everyone_if_no_acl_found
        return allowed

    def _covering(self, resource_type: int, name: str) -> Iterable[AclBinding]:
        """The ACLs whose pattern covers the literal resource name."""
        literal = self._literal
        found = literal.get((resource_type, name))
        if found:
            yield from found
        if name != WILDCARD_RESOURCE:
            found = literal.get((resource_type, WILDCARD_RESOURCE))
            if found:
                yield from found
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length > len(name):
                    break
                found = prefixed.get((resource_type, name[:length]))
                if found:
                    yield from found

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May `principal` perform `operation` on at least one resource of the type: Kafka's
        Authorizer.authorizeByResourceType (used by idempotent InitProducerId with WRITE on
        TOPIC): the probe name "hardcode" first, then the type's ACLs of this principal and
        host naming the operation or ALL (no implication): a DENY on LITERAL `*` denies, an
        ALLOW on LITERAL `*` allows, else an ALLOW whose name no DENY literal equals and no
        DENY prefix starts."""
        if self.authorize(principal, host, operation, resource_type, _PROBE_NAME):
            return True
        host = java_host(host)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allowed = False
        for acl in self._acls:
            if acl.resource_type != resource_type:
                continue
            if acl.host != host and acl.host != "*":
                continue  # Kafka's default method compares hosts exactly (no CIDR)
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != operation and acl.operation != AclOperation.ALL:
                continue
            literal = acl.pattern_type == PatternType.LITERAL
            if acl.permission_type == AclPermissionType.DENY:
                if literal and acl.resource_name == WILDCARD_RESOURCE:
                    return False
                (deny_literal if literal else deny_prefixed).add(acl.resource_name)
            elif acl.permission_type == AclPermissionType.ALLOW:
                if literal and acl.resource_name == WILDCARD_RESOURCE:
                    wildcard_allowed = True  # unless a DENY on `*` comes later
                    continue
                (allow_literal if literal else allow_prefixed).add(acl.resource_name)
        if wildcard_allowed:
            return True
        for names, literal in ((allow_literal, True), (allow_prefixed, False)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False
