"""Server configuration: one frozen dataclass, filled from defaults < TOML file < environment
(GROUPCOORD_<NAME>) < command-line flags. Units are last in names. The group coordinator's
settings (group_*, offsets retention, commit metadata) are defined with the shards' view of
them, in groups/config.py: here they are only declared, and checked through it."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .config_checks import ConfigError as ConfigError
from .config_checks import check_min_max
from .config_checks import per_ip_overrides as per_ip_overrides
from .groups.config import SERVER_SETTINGS, InvalidGroupConfig, check_server_settings, from_server
from .node_settings import nodes_settings_problem
from .security.listeners import ListenerError, ListenerSpec, listener_specs
from .security.setting_checks import security_settings_problem

MiB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: Kafka's "no limit" for LONG settings
# Room in a frame beside its record batch: request header, transactional id, topic name,
# partition fields (a produce request's own bytes are far below this).
FRAME_OVERHEAD_BYTES = 64 * 1024


def split_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _group_setting(name: str) -> Any:
    """A setting of the group coordinator: its default and meaning are defined with the
    shards' settings (groups/config.py)."""
    setting = SERVER_SETTINGS[name]
    return field(default=setting.default, metadata={"help": setting.help})


@dataclass(frozen=True)
class Config:
    listen: str = field(default="127.0.0.1:9092", metadata={"help": "Kafka listener HOST:PORT"})
    advertised_listener: str = field(
        default="",
        metadata={"help": "HOST:PORT clients are told to connect to (default: the listener)"},
    )
    data_dir: str = field(default="./data", metadata={"help": "directory for all state"})
    data_umask: str = field(
        default="077",
        metadata={
            "help": "umask (octal) for every file and directory the server creates in "
            "data_dir: 077 makes them 0600/0700; 027 lets the group read"
        },
    )
    metrics_listen: str = field(
        default="127.0.0.1:9464",
        metadata={
            "help": "HTTP HOST:PORT, apart from the Kafka listeners, for /metrics, /health, the "
            "web page (/) and its JSON API (/api/groups); loopback by default (empty: disabled)"
        },
    )
    node_id: int = field(default=0, metadata={"help": "broker id advertised in metadata"})
    workers: int = field(
        default=1,
        metadata={
            "help": "worker processes on this machine, each a broker node: worker i has "
            "node id node_id+i, every listener's and metrics_listen's port +i, and data in "
            "data_dir/worker-i (1: one process, data in data_dir itself)"
        },
    )
    worker_index: int = field(
        default=-1,
        metadata={"help": "set by `serve --workers N` for each worker it starts; never by hand"},
    )
    worker_topic_repair_interval_ms: int = field(
        default=5_000,
        metadata={
            "help": "serve --workers: how often each worker compares its topics with its "
            "peers' and takes the changes it missed while down (deletions with their "
            "offsets, partitions, configs)"
        },
    )
    cluster: str = field(
        default="",
        metadata={
            "help": "PostgreSQL DSN (postgresql://...) of a cluster of nodes sharing one "
            "database: coordinator shards are leased by live nodes and their records kept in "
            "the database; each node needs its own node_id (empty: a single node)"
        },
    )
    cluster_lease_duration_ms: int = field(
        default=6_000,
        metadata={
            "help": "how long a node's leases (and its membership) last without renewal: a "
            "node silent this long loses its shards to live nodes, which take them within "
            "this plus one renew interval (broker.session.timeout.ms, 9000 in Kafka)"
        },
    )
    cluster_lease_renew_interval_ms: int = field(
        default=1_500,
        metadata={
            "help": "how often a node renews its membership and leases and rebalances them; "
            "at most half the lease duration (broker.heartbeat.interval.ms)"
        },
    )
    cluster_peer_port: int = field(
        default=0,
        metadata={
            "help": "serve --cluster: the port of the node's peer listener, at its first "
            "listener's host, where the other nodes send it transaction markers and "
            "forwarded work, authenticated by SCRAM with a secret kept in the database "
            "(0: any free port, registered in the database; Kafka's inter-broker listener)"
        },
    )
    cluster_peer_security_protocol: str = field(
        default="SASL_PLAINTEXT",
        metadata={
            "help": "serve --cluster: SASL_SSL encrypts the peer listener's traffic with TLS "
            "(the node's ssl_certificate_file, peers checked against ssl_truststore_file, "
            "host names verified) and refuses plaintext peers (security.inter.broker.protocol)"
        },
    )
    cluster_peer_ssl_client_auth: str = field(
        default="none",
        metadata={
            "help": "with SASL_SSL peers: required makes a connecting node show its "
            "certificate (ssl_certificate_file) too, checked against ssl_truststore_file "
            "(mutual TLS; ssl.client.auth of the inter-broker listener): none or required"
        },
    )
    log_level: str = field(default="info", metadata={"help": "debug, info, warning or error"})
    log_repeat_window_ms: int = field(
        default=10_000,
        metadata={
            "help": "identical log lines (same level, event and fields) within this time "
            "after one is logged are counted instead of logged; the count follows with the "
            "next one logged (0: log every line)"
        },
    )
    frame_bytes_max: int = field(
        default=8 * MiB,
        metadata={
            "help": "largest request frame accepted (socket.request.max.bytes, 100 MiB in "
            "Kafka); keep it at least message_bytes_max + 64 KiB, so that a request carrying "
            "a max-size batch fits (a warning at start says when it is not)"
        },
    )
    queued_request_bytes_max: int = field(
        default=128 * MiB,
        metadata={
            "help": "bytes the connections together may hold in partly received frames and "
            "unsent responses (queued.max.request.bytes); past it, connections starting a "
            "frame stop reading until bytes are freed"
        },
    )
    frame_read_timeout_ms: int = field(
        default=30_000,
        metadata={
            "help": "a frame whose first bytes arrived must be complete within this, or the "
            "connection is closed (a slow sender holds a connection and its bytes)"
        },
    )
    connection_inflight_max: int = field(
        default=100,
        metadata={
            "help": "requests in flight per connection; beyond it reading pauses and requests "
            "already read wait unhandled"
        },
    )
    frames_per_loop_iteration_max: int = field(
        default=64,
        metadata={
            "help": "request frames the connections together handle per event-loop iteration; "
            "the rest wait for the next one, so that fsync completions are not held behind "
            "one long burst of reads"
        },
    )
    connection_write_buffer_bytes_max: int = field(
        default=8 * MiB,
        metadata={"help": "unsent response bytes per connection before reading pauses"},
    )
    connections_max: int = field(
        default=10_000, metadata={"help": "open connections accepted (max.connections)"}
    )
    connections_max_per_ip: int = field(
        default=1_000,
        metadata={
            "help": "open connections accepted from one client address (max.connections.per.ip)"
        },
    )
    connections_max_per_ip_overrides: str = field(
        default="",
        metadata={
            "help": "per-address exceptions, ADDRESS:COUNT,... "
            "(max.connections.per.ip.overrides; addresses as connections show them, no names)"
        },
    )
    connections_max_idle_ms: int = field(
        default=600_000,
        metadata={
            "help": "a connection with no request in flight that received nothing for this "
            "long is closed (connections.max.idle.ms)"
        },
    )
    accept_queues: int = field(
        default=8,
        metadata={
            "help": "accept queues of the Kafka listener, a client address always landing "
            "in the same one (SO_REUSEPORT, Linux); a connection flood from one address "
            "delays only the addresses sharing its queue (1: one queue for all, up to 64)"
        },
    )
    segment_files_open_max: int = field(
        default=0,
        metadata={
            "help": "segment files kept open across all logs, least recently used closed "
            "first and reopened on demand (0: half the file-descriptor limit, which is "
            "raised to the hard limit at start)"
        },
    )
    auto_create_topics: bool = field(
        default=True, metadata={"help": "create unknown topics on Metadata requests that allow it"}
    )
    default_partitions: int = field(
        default=1, metadata={"help": "partitions of auto-created topics"}
    )
    message_bytes_max: int = field(
        default=1_048_588, metadata={"help": "largest record batch accepted (max.message.bytes)"}
    )
    log_segment_bytes: int = field(
        default=1024 * MiB, metadata={"help": "segment size before rolling"}
    )
    log_segment_ms: int = field(default=7 * DAY_MS, metadata={"help": "segment age before rolling"})
    log_retention_ms: int = field(
        default=7 * DAY_MS, metadata={"help": "delete segments older than this (-1: forever)"}
    )
    log_retention_bytes: int = field(
        default=-1, metadata={"help": "keep at most this many bytes per partition (-1: unlimited)"}
    )
    log_retention_check_interval_ms: int = field(
        default=300_000, metadata={"help": "how often retention runs"}
    )
    log_cleaner_interval_ms: int = field(
        default=15_000,
        metadata={
            "help": "how often the partitions of compacted topics (cleanup.policy=compact) "
            "are checked and cleaned when due (log.cleaner.backoff.ms)"
        },
    )
    log_message_timestamp_type: str = field(
        default="CreateTime",
        metadata={
            "help": "record timestamps: the producer's (CreateTime) or the append time "
            "(LogAppendTime); topics' default (log.message.timestamp.type)"
        },
    )
    log_message_timestamp_before_max_ms: int = field(
        default=LONG_MAX,
        metadata={
            "help": "CreateTime: refuse records timestamped further in the past than this "
            "(log.message.timestamp.before.max.ms)"
        },
    )
    log_message_timestamp_after_max_ms: int = field(
        default=3_600_000,
        metadata={
            "help": "CreateTime: refuse records timestamped further in the future than this "
            "(log.message.timestamp.after.max.ms)"
        },
    )
    fetch_wait_max_ms: int = field(
        default=30_000, metadata={"help": "cap on a Fetch request's max_wait"}
    )
    durable_waiters_max: int = field(
        default=100_000, metadata={"help": "produce requests parked awaiting fsync"}
    )
    syncfs_min_logs: int = field(
        default=4,
        metadata={
            "help": "a group-commit round over at least this many logs is made durable by "
            "one syncfs() of the data directory's filesystem instead of one fsync per log "
            "(Linux 5.8+; 0: always per-log fsyncs)"
        },
    )
    offsets_partitions: int = field(
        default=50,
        metadata={
            "help": "coordinator shards (offsets.topic.num.partitions); like Kafka's, it "
            "applies to a new data directory only: one already served keeps its count"
        },
    )
    offsets_segment_bytes: int = field(
        default=100 * MiB,
        metadata={"help": "coordinator log segment size (offsets.topic.segment.bytes)"},
    )
    offsets_retention_ms: int = _group_setting("offsets_retention_ms")
    offsets_retention_check_interval_ms: int = _group_setting("offsets_retention_check_interval_ms")
    offset_metadata_bytes_max: int = _group_setting("offset_metadata_bytes_max")
    offsets_compaction_interval_ms: int = field(
        default=300_000, metadata={"help": "how often coordinator logs are compacted"}
    )
    offsets_tombstone_retention_ms: int = field(
        default=DAY_MS, metadata={"help": "how long compaction keeps tombstones"}
    )
    transaction_state_partitions: int = field(
        default=50,
        metadata={
            "help": "transaction coordinator shards, logs __transaction_state-N "
            "(transaction.state.log.num.partitions); like offsets_partitions, it applies to "
            "a new data directory only"
        },
    )
    transaction_state_segment_bytes: int = field(
        default=100 * MiB,
        metadata={
            "help": "transaction state log segment size (transaction.state.log.segment.bytes)"
        },
    )
    transaction_max_timeout_ms: int = field(
        default=900_000,
        metadata={
            "help": "largest transaction timeout a producer may ask for; above it "
            "InitProducerId answers INVALID_TRANSACTION_TIMEOUT (transaction.max.timeout.ms)"
        },
    )
    transaction_abort_interval_ms: int = field(
        default=10_000,
        metadata={
            "help": "how often transactions past their timeout are aborted "
            "(transaction.abort.timed.out.transaction.cleanup.interval.ms)"
        },
    )
    transactional_id_expiration_ms: int = field(
        default=7 * DAY_MS,
        metadata={
            "help": "a transactional id with no transaction in progress and no update for "
            "this long is forgotten (transactional.id.expiration.ms)"
        },
    )
    transaction_expiration_interval_ms: int = field(
        default=3_600_000,
        metadata={
            "help": "how often expired transactional ids are removed "
            "(transaction.remove.expired.transaction.cleanup.interval.ms)"
        },
    )
    transaction_partition_verification_enable: bool = field(
        default=True,
        metadata={
            "help": "a transactional Produce (v11 and older) or TxnOffsetCommit (v4 and older) "
            "that would open a transaction on a partition first asks the transaction "
            "coordinator whether the partition is in the transaction, so no hanging "
            "transaction is created (transaction.partition.verification.enable; transactions "
            "V2 always ask, to add it)"
        },
    )
    transaction_concurrent_wait_ms: int = field(
        default=500,
        metadata={
            "help": "an AddPartitionsToTxn or AddOffsetsToTxn (or a transactions V2 add) that "
            "finds the previous transaction of its id still writing its markers waits up to "
            "this long for it to complete instead of answering CONCURRENT_TRANSACTIONS at "
            "once, which clients retry only after 20 ms (0: answer at once, as Kafka)"
        },
    )
    group_min_session_timeout_ms: int = _group_setting("group_min_session_timeout_ms")
    group_max_session_timeout_ms: int = _group_setting("group_max_session_timeout_ms")
    group_initial_rebalance_delay_ms: int = _group_setting("group_initial_rebalance_delay_ms")
    group_max_size: int = _group_setting("group_max_size")
    group_member_metadata_bytes_max: int = _group_setting("group_member_metadata_bytes_max")
    group_member_assignment_bytes_max: int = _group_setting("group_member_assignment_bytes_max")
    groups_max: int = _group_setting("groups_max")
    group_consumer_session_timeout_ms: int = _group_setting("group_consumer_session_timeout_ms")
    group_consumer_min_session_timeout_ms: int = _group_setting(
        "group_consumer_min_session_timeout_ms"
    )
    group_consumer_max_session_timeout_ms: int = _group_setting(
        "group_consumer_max_session_timeout_ms"
    )
    group_consumer_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_heartbeat_interval_ms"
    )
    group_consumer_min_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_min_heartbeat_interval_ms"
    )
    group_consumer_max_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_max_heartbeat_interval_ms"
    )
    group_consumer_max_size: int = _group_setting("group_consumer_max_size")
    group_consumer_assignors: str = field(
        default="uniform,range",
        metadata={
            "help": "server assignors, the first is the default (group.consumer.assignors): "
            "uniform, range, or names of entry points in the group groupcoord.assignors"
        },
    )
    group_consumer_assignment_interval_ms: int = _group_setting(
        "group_consumer_assignment_interval_ms"
    )
    group_consumer_regex_refresh_interval_ms: int = _group_setting(
        "group_consumer_regex_refresh_interval_ms"
    )
    group_consumer_offload_min_members: int = _group_setting("group_consumer_offload_min_members")
    group_consumer_offload_min_partitions: int = _group_setting(
        "group_consumer_offload_min_partitions"
    )
    group_consumer_migration_policy: str = _group_setting("group_consumer_migration_policy")
    group_consumer_reconciling_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_reconciling_heartbeat_interval_ms"
    )
    group_timeline_events: int = _group_setting("group_timeline_events")
    group_timeline_events_total: int = _group_setting("group_timeline_events_total")
    metrics_lag_partition_series_max: int = field(
        default=10_000,
        metadata={
            "help": "consumer-lag series per group-partition in /metrics at most; above it, "
            "lag is exported per group and topic (records summed, the age of the partition "
            "most behind), and per group if those too are more"
        },
    )
    metrics_lag_status_intervals: int = field(
        default=10,
        metadata={
            "help": "commits per group-partition in the sliding window that Burrow's status "
            "rules read (Burrow's intervals); groupcoord_group_status",
            "min": 2,
        },
    )
    metrics_lag_status_min_distance_ms: int = field(
        default=1000,
        metadata={
            "help": "a commit seen less than this after the window's last replaces it "
            "(Burrow's min-distance)",
            "min": 0,
        },
    )
    metrics_name_labels: bool = field(
        default=True,
        metadata={
            "help": "topic and group names as labels in /metrics; false: no series names a "
            "topic or group: per-topic series (log size, produced records, damaged batches) "
            "and per-group series (members, consumer lag) are summed into one series each "
            "(lag in time: of the partition most behind)"
        },
    )
    thread_switch_interval_us: int = field(
        default=100,
        metadata={"help": "Python thread switch interval; short so fsync results return fast"},
    )
    shutdown_timeout_ms: int = field(
        default=10_000, metadata={"help": "time to finish in-flight requests on SIGTERM"}
    )
    # Security: listeners, TLS, SASL (coordinator/security/).
    listeners: str = field(
        default="",
        metadata={
            "help": "listeners NAME://HOST:PORT,... (listeners), NAME a security protocol "
            "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or mapped to one by "
            "listener_security_protocol_map; empty: one PLAINTEXT listener on `listen`"
        },
    )
    advertised_listeners: str = field(
        default="",
        metadata={
            "help": "NAME://HOST:PORT,... told to the clients of listener NAME "
            "(advertised.listeners); a listener not named advertises its own address "
            "(the first: advertised_listener when set)"
        },
    )
    listener_security_protocol_map: str = field(
        default="PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        metadata={
            "help": "listener name to security protocol, NAME:PROTOCOL,... "
            "(listener.security.protocol.map)"
        },
    )
    ssl_certificate_file: str = field(
        default="",
        metadata={
            "help": "PEM certificate chain of the SSL and SASL_SSL listeners "
            "(ssl.keystore.location with ssl.keystore.type=PEM); re-read on SIGHUP"
        },
    )
    ssl_key_file: str = field(
        default="",
        metadata={
            "help": "PEM private key of the certificate (ssl.keystore.key; empty: in "
            "ssl_certificate_file); re-read on SIGHUP"
        },
    )
    ssl_key_password: str = field(
        default="",
        repr=False,
        metadata={"help": "password of an encrypted key (ssl.key.password)"},
    )
    ssl_truststore_file: str = field(
        default="",
        metadata={
            "help": "PEM CA certificates that client certificates must chain to "
            "(ssl.truststore.location with ssl.truststore.type=PEM); re-read on SIGHUP"
        },
    )
    ssl_client_auth: str = field(
        default="none",
        metadata={
            "help": "client certificates on SSL listeners (ssl.client.auth): none, requested "
            "or required; the principal is User:<subject DN>, as Kafka's default principal "
            "builder; SASL_SSL listeners ignore it, as Kafka does"
        },
    )
    ssl_enabled_protocols: str = field(
        default="TLSv1.2,TLSv1.3",
        metadata={"help": "TLS versions offered (ssl.enabled.protocols): TLSv1.2, TLSv1.3"},
    )
    sasl_enabled_mechanisms: str = field(
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        metadata={
            "help": "SASL mechanisms of the SASL listeners (sasl.enabled.mechanisms): PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (which needs "
            "sasl_oauthbearer_jwks_endpoint_url)"
        },
    )
    sasl_plain_users_file: str = field(
        default="",
        metadata={
            "help": "PLAIN's users, one USER:PASSWORD a line (Kafka: the JAAS options "
            'user_<name>="<password>" of PlainLoginModule); re-read on SIGHUP'
        },
    )
    connections_max_reauth_ms: int = field(
        default=0,
        metadata={
            "help": "a SASL session lasts this long: the client must re-authenticate before, "
            "or its connection is closed at its next request (connections.max.reauth.ms; "
            "0: sessions do not expire)"
        },
    )
    connection_failed_authentication_delay_ms: int = field(
        default=100,
        metadata={
            "help": "a failed authentication's answer and close wait this long "
            "(connection.failed.authentication.delay.ms)"
        },
    )
    sasl_server_max_receive_size: int = field(
        default=524_288,
        metadata={
            "help": "largest frame read before authentication completes "
            "(sasl.server.max.receive.size)"
        },
    )
    sasl_oauthbearer_jwks_endpoint_url: str = field(
        default="",
        metadata={
            "help": "OAUTHBEARER: the JWKS (http, https or file URL) whose keys sign valid "
            "tokens (sasl.oauthbearer.jwks.endpoint.url); fetched at start"
        },
    )
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = field(
        default=3_600_000,
        metadata={
            "help": "OAUTHBEARER: the JWKS is fetched again this often, and when a token "
            "names an unknown key (sasl.oauthbearer.jwks.endpoint.refresh.ms)",
            "min": 1000,
        },
    )
    sasl_oauthbearer_expected_audience: str = field(
        default="",
        metadata={
            "help": "OAUTHBEARER: comma-separated audiences, one of which a token's aud "
            "must name ('': not checked; sasl.oauthbearer.expected.audience)"
        },
    )
    sasl_oauthbearer_expected_issuer: str = field(
        default="",
        metadata={
            "help": "OAUTHBEARER: the iss a token must carry ('': not checked; "
            "sasl.oauthbearer.expected.issuer)"
        },
    )
    sasl_oauthbearer_clock_skew_seconds: int = field(
        default=30,
        metadata={
            "help": "OAUTHBEARER: clock difference tolerated on exp and nbf "
            "(sasl.oauthbearer.clock.skew.seconds)",
            "min": 0,
        },
    )
    sasl_oauthbearer_sub_claim_name: str = field(
        default="sub",
        metadata={
            "help": "OAUTHBEARER: the claim naming the principal, User:<claim> "
            "(sasl.oauthbearer.sub.claim.name)"
        },
    )
    sasl_oauthbearer_scope_claim_name: str = field(
        default="scope",
        metadata={"help": "OAUTHBEARER: the scope claim (sasl.oauthbearer.scope.claim.name)"},
    )
    authorizer_enabled: bool = field(
        default=False,
        metadata={
            "help": "check ACLs on every request, as Kafka's authorizer.class.name="
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer; off: every request "
            "is allowed and CreateAcls/DescribeAcls/DeleteAcls answer SECURITY_DISABLED"
        },
    )
    super_users: str = field(
        default="",
        metadata={
            "help": "principals allowed everything whatever the ACLs, ;-separated "
            "(super.users, e.g. User:admin;User:CN=broker)"
        },
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata={
            "help": "allow a request on a resource that no ACL names "
            "(allow.everyone.if.no.acl.found)"
        },
    )
    acl_decision_cache_entries: int = field(
        default=100_000,
        metadata={
            "help": "authorization decisions remembered per (principal, host, operation, "
            "resource); emptied on every ACL change (0: none remembered)"
        },
    )
    # The HTTP endpoint (metrics_listen): who may read it (observability/http_access.py).
    http_auth_token_file: str = field(
        default="",
        metadata={
            "help": "a file holding the bearer token HTTP requests must carry (Authorization: "
            "Bearer TOKEN) for everything but GET /health and the page's static GET /; "
            "re-read on SIGHUP; empty: http_auth_token, or no token"
        },
    )
    http_auth_token: str = field(
        default="",
        repr=False,
        metadata={
            "help": "the bearer token itself (prefer http_auth_token_file: a variable can be "
            "read in the process listing of a container's settings); never logged or served"
        },
    )
    http_tls: bool = field(
        default=False,
        metadata={
            "help": "serve the HTTP endpoint over TLS (HTTPS) with ssl_certificate_file and "
            "ssl_key_file (re-read on SIGHUP), TLS 1.2+ as ssl_enabled_protocols"
        },
    )
    http_ssl_client_auth: str = field(
        default="none",
        metadata={
            "help": "with http_tls: none, or required (clients of the HTTP endpoint must show "
            "a certificate ssl_truststore_file vouches for)"
        },
    )

    @property
    def listen_address(self) -> tuple[str, int]:
        return split_host_port(self.listen)

    @property
    def advertised_address(self) -> tuple[str, int]:
        """Where clients are told to connect; `validate` refuses a wildcard host here."""
        return split_host_port(self.advertised_listener or self.listen)

    @property
    def listener_specs(self) -> list[ListenerSpec]:
        """The listeners to open (security/listeners.py); ConfigError when invalid."""
        try:
            return listener_specs(
                self.listeners,
                self.advertised_listeners,
                self.listener_security_protocol_map,
                self.listen_address,
                split_host_port(self.advertised_listener) if self.advertised_listener else None,
            )
        except ListenerError as e:
            raise ConfigError(str(e)) from None

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def data_umask_bits(self) -> int:
        return int(self.data_umask, 8)


ENV_PREFIX = "GROUPCOORD_"
# GROUPCOORD_* variables that are not settings: the file of settings, and the test and
# benchmark harnesses' own (the server inherits the environment of the test that starts it).
ENV_NOT_SETTINGS = (ENV_PREFIX + "CONFIG",)
ENV_HARNESS_PREFIXES = (ENV_PREFIX + "TEST_", ENV_PREFIX + "BENCH_")
# Hosts that mean "every interface": a listener may bind them, clients cannot connect to them.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def _coerce(name: str, kind: Any, value: Any) -> Any:
    if kind in (bool, "bool"):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected a boolean, got {value!r}")
    if kind in (int, "int"):
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    return str(value)


def load_config(
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Merge defaults, the TOML file, GROUPCOORD_* variables and explicit overrides."""
    environ = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    known = {f.name: f.type for f in fields(Config)}
    file = file or environ.get(ENV_PREFIX + "CONFIG")
    if file:
        try:
            with open(file, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {file}: {e}") from None
        for key, value in data.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ConfigError(
                    f"unknown setting {key!r} in {file}; did you mean {closest(name, known)!r}?"
                )
            values[name] = _coerce(name, known[name], value)
    check_environment(environ, known)
    for name, kind in known.items():
        env = environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = _coerce(name, kind, env)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, known[name], value)
    config = Config(**values)
    validate(config)
    return config


def closest(name: str, candidates: Iterable[str]) -> str:
    """The candidate spelled most like `name` (for "did you mean ...?")."""
    options = sorted(candidates)
    return (difflib.get_close_matches(name, options, n=1, cutoff=0.0) or options)[0]


def check_environment(environ: Mapping[str, str], known: Iterable[str]) -> None:
    """Refuse a GROUPCOORD_* variable that names no setting: a misspelt one would otherwise
    leave its setting at the default without a word."""
    names = {ENV_PREFIX + name.upper() for name in known}
    for key in sorted(environ):
        if not key.startswith(ENV_PREFIX) or key in names or key in ENV_NOT_SETTINGS:
            continue
        if key.startswith(ENV_HARNESS_PREFIXES):
            continue
        raise ConfigError(
            f"unknown environment variable {key}; did you mean {closest(key, names)}? "
            "(groupcoord serve --help lists the settings)"
        )


def check_advertised(config: Config) -> None:
    """Clients connect to the advertised host: a wildcard there would send them to whatever
    server listens on their own machine (Kafka refuses it too)."""
    host, _ = config.advertised_address
    if host not in WILDCARD_HOSTS:
        return
    where = (
        f"advertised_listener is {config.advertised_listener!r}"
        if config.advertised_listener
        else f"listen is {config.listen!r} and advertised_listener is not set"
    )
    raise ConfigError(
        f"{where}: clients cannot connect to the non-routable address {host or '0.0.0.0'!r}. "
        f"Set advertised_listener ({ENV_PREFIX}ADVERTISED_LISTENER, --advertised-listener) "
        "to the HOST:PORT clients reach this server at, e.g. localhost:9092 or the "
        "machine's name (Kafka: advertised.listeners)"
    )


def validate(config: Config) -> None:
    # Parsing the addresses is the check: a bad HOST:PORT raises ConfigError here.
    _ = (config.listen_address, config.advertised_address)
    check_advertised(config)
    check_min_max(config)
    if config.metrics_listen:
        split_host_port(config.metrics_listen)
    positive = (
        "frame_bytes_max",
        "connection_inflight_max",
        "frames_per_loop_iteration_max",
        "connections_max",
        "connections_max_per_ip",
        "connections_max_idle_ms",
        "accept_queues",
        "queued_request_bytes_max",
        "frame_read_timeout_ms",
        "default_partitions",
        "message_bytes_max",
        "log_segment_bytes",
        "log_cleaner_interval_ms",
        "offsets_partitions",
        "transaction_state_partitions",
        "transaction_state_segment_bytes",
        "transaction_max_timeout_ms",
        "transaction_abort_interval_ms",
        "transactional_id_expiration_ms",
        "transaction_expiration_interval_ms",
        "thread_switch_interval_us",
        "group_member_metadata_bytes_max",
        "group_member_assignment_bytes_max",
        "groups_max",
        "worker_topic_repair_interval_ms",
    )
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive")
    per_ip_overrides(config.connections_max_per_ip_overrides)  # raises ConfigError
    problem = nodes_settings_problem(config)  # workers and cluster
    if problem is not None:
        raise ConfigError(problem)
    if config.accept_queues > 64:  # accept_queues.ACCEPT_QUEUES_MAX: the hash has 8 bits
        raise ConfigError("accept_queues must be at most 64")
    if config.log_repeat_window_ms < 0:
        raise ConfigError("log_repeat_window_ms must be 0 (off) or more")
    if config.segment_files_open_max < 0:
        raise ConfigError("segment_files_open_max must be 0 (automatic) or more")
    if config.syncfs_min_logs < 0:
        raise ConfigError("syncfs_min_logs must be 0 or more")
    if config.transaction_concurrent_wait_ms < 0:
        raise ConfigError("transaction_concurrent_wait_ms must be 0 (answer at once) or more")
    try:
        check_server_settings(from_server(config))
    except InvalidGroupConfig as e:
        raise ConfigError(str(e)) from None
    # The names are resolved when the server starts (assignor_plugins.py): only there may
    # this module's users (topics/ among them) reach groups/ and installed distributions.
    if not [a for a in config.group_consumer_assignors.split(",") if a.strip()]:
        raise ConfigError(
            "group_consumer_assignors: a comma-separated list of assignors (uniform, range, "
            "or installed ones)"
        )
    if not re.fullmatch(r"0?[0-7]{1,3}", config.data_umask) or config.data_umask_bits & 0o700:
        raise ConfigError(
            "data_umask must be octal (e.g. 077 or 027) and must not mask the owner's bits (700)"
        )
    if config.log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level must be debug, info, warning or error")
    problem = security_settings_problem(config, config.listener_specs)  # (ConfigError)
    if problem is not None:
        raise ConfigError(problem)
    if config.log_message_timestamp_type not in ("CreateTime", "LogAppendTime"):
        raise ConfigError("log_message_timestamp_type must be CreateTime or LogAppendTime")
    for name in ("log_message_timestamp_before_max_ms", "log_message_timestamp_after_max_ms"):
        if not 0 <= getattr(config, name) <= LONG_MAX:
            raise ConfigError(f"{name} must be 0 to {LONG_MAX}")
