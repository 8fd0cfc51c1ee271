"""What authentication needs of the server, in one object handlers and connections share
(the context's `security`): the SASL mechanisms enabled, PLAIN's users, the SCRAM
credential store, the TLS contexts of the listeners, and the timing settings of Kafka's
authenticator. `reload()` (SIGHUP) re-reads the certificate, key and PLAIN users: new
handshakes and authentications use them, open connections are left as they are."""

from __future__ import annotations

import ssl

from ..config import Config
from ..observability.logging import get_logger
from ..security.acl_store import AclStore
from ..security.credentials import ScramCredentialStore
from ..security.listeners import ListenerSpec
from ..security.oauthbearer import JwksValidator, ValidatorSettings
from ..security.plain import PlainUsersError, load_plain_users
from ..security.scram import ScramCredential
from ..security.setting_checks import SASL_MECHANISMS
from ..security.standard_authorizer import StandardAuthorizer
from ..security.tls import TlsConfigError, TlsSettings, peer_client_context, server_context
from .data_dir import ACLS_DIR, SCRAM_CREDENTIALS_FILE
from .worker_layout import WORKER_PRINCIPAL

log = get_logger("groupcoord.security")


class AuthServices:
    def __init__(self, config: Config, specs: list[ListenerSpec]) -> None:
        """Raises TlsConfigError / PlainUsersError / OAuthConfigError when a file cannot
        be used (the server refuses to start, naming it)."""
        self.config = config
        self.specs = specs
        self.mechanisms = enabled_mechanisms(config.sasl_enabled_mechanisms)
        self.failed_delay_s = config.connection_failed_authentication_delay_ms / 1000
        self.reauth_ms = config.connections_max_reauth_ms
        self.receive_bytes_max = config.sasl_server_max_receive_size
        self.scram = ScramCredentialStore(config.data_path / SCRAM_CREDENTIALS_FILE)
        self.plain_users = load_plain_users(config.sasl_plain_users_file)
        # The ACLs and their log when an authorizer is configured (authorizer_enabled),
        # else None: the ACL APIs answer SECURITY_DISABLED (server/acl_api.py).
        self.acls: AclStore | None = None
        if config.authorizer_enabled:
            # serve --workers / --cluster: the nodes' own principal is a super user, as
            # Kafka's brokers' usually is (worker_channel.py, peer_sasl.py).
            nodes = config.worker_index >= 0 or bool(config.cluster)
            workers = f";{WORKER_PRINCIPAL}" if nodes else ""
            authorizer = StandardAuthorizer.from_settings(
                config.super_users + workers,
                config.allow_everyone_if_no_acl_found,
                config.acl_decision_cache_entries,
            )
            self.acls = AclStore(config.data_path / ACLS_DIR, authorizer)
        self.tls_settings = TlsSettings(
            certificate_file=config.ssl_certificate_file,
            key_file=config.ssl_key_file,
            key_password=config.ssl_key_password,
            truststore_file=config.ssl_truststore_file,
            client_auth=config.ssl_client_auth,
            enabled_protocols=config.ssl_enabled_protocols,
        )
        # Listener name -> its current server context (replaced whole on reload).
        self.tls_contexts: dict[str, ssl.SSLContext] = self._build_contexts()
        # serve --cluster with SASL_SSL peers: (the peer listener's context, the context
        # this node connects to its peers with); None: peers over plain TCP.
        self.peer_contexts = self._build_peer_contexts()
        # OAUTHBEARER's token validator (its keys fetched by `load`); None when not enabled.
        self.oauth: JwksValidator | None = None
        if "OAUTHBEARER" in self.mechanisms and config.sasl_oauthbearer_jwks_endpoint_url:
            audience = config.sasl_oauthbearer_expected_audience.split(",")
            self.oauth = JwksValidator(
                ValidatorSettings(
                    jwks_url=config.sasl_oauthbearer_jwks_endpoint_url,
                    refresh_ms=config.sasl_oauthbearer_jwks_endpoint_refresh_ms,
                    expected_audience=tuple(a.strip() for a in audience if a.strip()),
                    expected_issuer=config.sasl_oauthbearer_expected_issuer,
                    clock_skew_s=config.sasl_oauthbearer_clock_skew_seconds,
                    sub_claim=config.sasl_oauthbearer_sub_claim_name,
                    scope_claim=config.sasl_oauthbearer_scope_claim_name,
                )
            )

    def _build_contexts(self) -> dict[str, ssl.SSLContext]:
        contexts = {}
        for spec in self.specs:
            if spec.uses_tls:
                # Kafka ignores the broker-wide ssl.client.auth on SASL_SSL listeners.
                auth = "none" if spec.protocol == "SASL_SSL" else None
                contexts[spec.name] = server_context(self.tls_settings, auth)
        return contexts

    def _build_peer_contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
        config = self.config
        if not config.cluster or config.cluster_peer_security_protocol != "SASL_SSL":
            return None
        return (
            server_context(self.tls_settings, config.cluster_peer_ssl_client_auth),
            peer_client_context(self.tls_settings),
        )

    def load(self) -> None:
        """Read the SCRAM credentials (DataDirError when the file is damaged) and fetch
        OAUTHBEARER's keys (OAuthConfigError naming the URL)."""
        self.scram.load()
        if self.oauth is not None:
            self.oauth.load()

    def reload(self) -> None:
        """SIGHUP: rebuild the TLS contexts and re-read PLAIN's users; on a failure keep
        what is in use and log why."""
        try:
            contexts = self._build_contexts()
            peer_contexts = self._build_peer_contexts()
            users = load_plain_users(self.config.sasl_plain_users_file)
        except (TlsConfigError, PlainUsersError) as e:
            log.error("reload failed: keeping the certificates and users in use", error=str(e))
            return
        self.tls_contexts = contexts
        self.peer_contexts = peer_contexts
        self.plain_users = users
        log.info(
            "reloaded certificates and PLAIN users",
            tls_listeners=sorted(contexts),
            plain_users=len(users),
        )

    def scram_lookup(self, mechanism: str) -> object:
        store = self.scram

        def lookup(user: str) -> ScramCredential | None:
            return store.get(user, mechanism)

        return lookup


def enabled_mechanisms(text: str) -> tuple[str, ...]:
    """sasl.enabled.mechanisms as a tuple; ValueError for one not supported here."""
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    for name in names:
        if name not in SASL_MECHANISMS:
            raise ValueError(
                f"sasl_enabled_mechanisms: {name} is not one of {', '.join(SASL_MECHANISMS)}"
            )
    return names
