"""The checks of the settings that make several nodes (`serve --workers N`, `serve
--cluster`), run by config.py's `validate` at load: the first problem found, or None. Here
rather than in config.py (which must stay small); imports nothing of the server."""

from __future__ import annotations

from typing import Any

# serve --cluster: producer ids are strided by node id, which must be below this.
CLUSTER_NODE_IDS_MAX = 1024
# serve --cluster: how the peer listener is secured (Kafka's security.inter.broker.protocol).
PEER_SECURITY_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def nodes_settings_problem(config: Any) -> str | None:
    """What is wrong with `config`'s (a Config's) workers and cluster settings, or None."""
    if config.workers < 1 or not -1 <= config.worker_index < config.workers:
        return "workers must be positive, worker_index -1 or below workers"
    if not config.cluster:
        return None
    if not config.cluster.startswith(("postgresql://", "postgres://")):
        return "cluster must be a PostgreSQL DSN (postgresql://...)"
    if config.workers != 1:
        return "cluster and workers > 1 cannot be combined"
    if not 0 <= config.node_id < CLUSTER_NODE_IDS_MAX:
        return f"with cluster, node_id must be 0 to {CLUSTER_NODE_IDS_MAX - 1}"
    if not 0 < config.cluster_lease_renew_interval_ms * 2 <= config.cluster_lease_duration_ms:
        return (
            "cluster_lease_renew_interval_ms must be positive and at most half of "
            "cluster_lease_duration_ms"
        )
    return _peer_tls_problem(config)


def _peer_tls_problem(config: Any) -> str | None:
    """The peer listener's TLS settings (server/peer_tls.py)."""
    protocol = config.cluster_peer_security_protocol
    if protocol not in PEER_SECURITY_PROTOCOLS:
        return f"cluster_peer_security_protocol must be {' or '.join(PEER_SECURITY_PROTOCOLS)}"
    if config.cluster_peer_ssl_client_auth not in ("none", "required"):
        return "cluster_peer_ssl_client_auth must be none or required"
    if protocol == "SASL_SSL" and not (config.ssl_certificate_file and config.ssl_truststore_file):
        return (
            "cluster_peer_security_protocol=SASL_SSL needs ssl_certificate_file (the node's "
            "certificate) and ssl_truststore_file (the CA its peers' certificates are checked "
            "against)"
        )
    return None
