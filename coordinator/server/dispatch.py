"""The dispatch table: API key -> handler, and the version range served for each.

Only APIs listed here are advertised by ApiVersions; anything else is refused. Every handler
takes the request's context (topics/context.py's HandlerContext) and the decoded request."""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.api import ApiKey

from ..topics.admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
)
from ..topics.alter_configs import handle_incremental_alter_configs
from ..topics.delete_records import handle_delete_records
from ..topics.describe_producers import handle_describe_producers
from ..topics.fetch import handle_fetch
from ..topics.list_offsets import handle_list_offsets
from ..topics.metadata import (
    handle_describe_cluster,
    handle_describe_topic_partitions,
    handle_metadata,
)
from ..topics.produce import handle_produce
from .acl_api import handle_create_acls, handle_delete_acls, handle_describe_acls
from .classic_group_api import (
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_sync_group,
)
from .cluster import handle_api_versions, handle_find_coordinator, handle_init_producer_id
from .consumer_group_api import handle_consumer_group_describe, handle_consumer_group_heartbeat
from .group_admin_api import handle_delete_groups, handle_describe_groups, handle_list_groups
from .offset_api import handle_offset_commit, handle_offset_delete, handle_offset_fetch
from .scram_api import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
    handle_sasl_authenticate,
    handle_sasl_handshake,
)
from .txn_admin_api import handle_describe_transactions, handle_list_transactions
from .txn_api import handle_add_offsets_to_txn, handle_add_partitions_to_txn, handle_end_txn
from .txn_offset_api import handle_txn_offset_commit
from .write_txn_markers_api import handle_write_txn_markers

# (handler, lowest version, highest version)
APIS: dict[int, tuple[Any, int, int]] = {
    ApiKey.PRODUCE: (handle_produce, 3, 12),
    ApiKey.FETCH: (handle_fetch, 4, 17),
    ApiKey.LIST_OFFSETS: (handle_list_offsets, 1, 9),
    ApiKey.METADATA: (handle_metadata, 0, 12),
    ApiKey.FIND_COORDINATOR: (handle_find_coordinator, 0, 6),
    ApiKey.API_VERSIONS: (handle_api_versions, 0, 4),
    ApiKey.CREATE_TOPICS: (handle_create_topics, 2, 7),
    ApiKey.DELETE_TOPICS: (handle_delete_topics, 1, 6),
    ApiKey.INIT_PRODUCER_ID: (handle_init_producer_id, 0, 5),
    ApiKey.DESCRIBE_CONFIGS: (handle_describe_configs, 1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (handle_incremental_alter_configs, 0, 1),
    ApiKey.CREATE_PARTITIONS: (handle_create_partitions, 0, 3),
    ApiKey.DESCRIBE_CLUSTER: (handle_describe_cluster, 0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (handle_describe_topic_partitions, 0, 0),
    ApiKey.DELETE_RECORDS: (handle_delete_records, 0, 2),
    # Transactions, partition side
    ApiKey.WRITE_TXN_MARKERS: (handle_write_txn_markers, 1, 2),
    ApiKey.DESCRIBE_PRODUCERS: (handle_describe_producers, 0, 0),
    # Group coordinator
    ApiKey.OFFSET_COMMIT: (handle_offset_commit, 2, 9),
    ApiKey.OFFSET_FETCH: (handle_offset_fetch, 1, 9),
    ApiKey.OFFSET_DELETE: (handle_offset_delete, 0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (handle_txn_offset_commit, 0, 5),
    ApiKey.DELETE_GROUPS: (handle_delete_groups, 0, 2),
    ApiKey.JOIN_GROUP: (handle_join_group, 0, 9),
    ApiKey.SYNC_GROUP: (handle_sync_group, 0, 5),
    ApiKey.HEARTBEAT: (handle_heartbeat, 0, 4),
    ApiKey.LEAVE_GROUP: (handle_leave_group, 0, 5),
    ApiKey.DESCRIBE_GROUPS: (handle_describe_groups, 0, 6),
    ApiKey.LIST_GROUPS: (handle_list_groups, 0, 5),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (handle_consumer_group_heartbeat, 0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (handle_consumer_group_describe, 0, 1),
    # Transaction coordinator (InitProducerId with a transactional id: cluster.py's handler)
    ApiKey.ADD_PARTITIONS_TO_TXN: (handle_add_partitions_to_txn, 0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (handle_add_offsets_to_txn, 0, 4),
    ApiKey.END_TXN: (handle_end_txn, 0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: (handle_describe_transactions, 0, 0),
    ApiKey.LIST_TRANSACTIONS: (handle_list_transactions, 0, 2),
    # Authentication (the exchange itself: server/sasl_auth.py)
    ApiKey.SASL_HANDSHAKE: (handle_sasl_handshake, 0, 1),
    ApiKey.SASL_AUTHENTICATE: (handle_sasl_authenticate, 0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (handle_describe_user_scram_credentials, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (handle_alter_user_scram_credentials, 0, 0),
    # Authorization (the ACLs; security/standard_authorizer.py decides)
    ApiKey.DESCRIBE_ACLS: (handle_describe_acls, 1, 3),
    ApiKey.CREATE_ACLS: (handle_create_acls, 1, 3),
    ApiKey.DELETE_ACLS: (handle_delete_acls, 1, 3),
}


def build_dispatch() -> tuple[dict[int, Any], dict[int, tuple[int, int]]]:
    handlers = {key: entry[0] for key, entry in APIS.items()}
    versions = {key: (entry[1], entry[2]) for key, entry in APIS.items()}
    return handlers, versions


def markdown_table() -> str:
    """The README's API table (`python -m groupcoord.coordinator.server.dispatch`): each
    API's versions and where its handler lives, so the table follows handlers that move
    (`python -m tests.regen_readme` rewrites it)."""
    rows = ["| API | key | versions | module | handler |", "|---|---|---|---|---|"]
    for key, (handler, low, high) in sorted(APIS.items()):
        name = "".join(word.capitalize() for word in ApiKey(key).name.split("_"))
        versions = f"{low}-{high}" if low != high else f"{low}"
        target = getattr(handler, "func", handler)  # a functools.partial: what it calls
        module = target.__module__.removeprefix("groupcoord.").replace(".", "/") + ".py"
        rows.append(f"| {name} | {int(key)} | {versions} | `{module}` | `{target.__qualname__}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
