"""The security settings' checks (listeners, TLS, SASL, the authorizer, the HTTP
endpoint's access), run by config.py's `validate` at load: the first problem found, as the
message of the ConfigError that stops the start. Here rather than in config.py, which
imports it: security/ never imports config/."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .listeners import ListenerSpec

# The SASL mechanisms served (sasl_enabled_mechanisms chooses among them).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def security_settings_problem(config: Any, specs: Sequence[ListenerSpec]) -> str | None:
    """What is wrong with `config`'s (a Config's) security settings, or None."""
    if config.ssl_client_auth not in ("none", "requested", "required"):
        return "ssl_client_auth must be none, requested or required"
    if any(spec.uses_tls for spec in specs) and not config.ssl_certificate_file:
        return "an SSL or SASL_SSL listener needs ssl_certificate_file"
    if config.ssl_client_auth != "none" and not config.ssl_truststore_file:
        return f"ssl_client_auth={config.ssl_client_auth} needs ssl_truststore_file"
    mechanisms = [m.strip().upper() for m in config.sasl_enabled_mechanisms.split(",")]
    for mechanism in mechanisms:
        if mechanism and mechanism not in SASL_MECHANISMS:
            return (
                f"sasl_enabled_mechanisms: {mechanism} is not one of {', '.join(SASL_MECHANISMS)}"
            )
    if any(spec.uses_sasl for spec in specs) and not any(mechanisms):
        return "a SASL listener needs sasl_enabled_mechanisms"
    if (
        any(spec.uses_sasl for spec in specs)
        and "OAUTHBEARER" in mechanisms
        and not config.sasl_oauthbearer_jwks_endpoint_url
    ):
        # Kafka's default validator trusts unsigned tokens; we offer only the JWKS one.
        return (
            "OAUTHBEARER needs sasl_oauthbearer_jwks_endpoint_url (unsecured tokens are "
            "not accepted)"
        )
    if config.connections_max_reauth_ms < 0:
        return "connections_max_reauth_ms must be 0 (off) or more"
    if config.connection_failed_authentication_delay_ms < 0:
        return "connection_failed_authentication_delay_ms must be 0 or more"
    if config.sasl_server_max_receive_size <= 0:
        return "sasl_server_max_receive_size must be positive"
    if config.acl_decision_cache_entries < 0:
        return "acl_decision_cache_entries must be >= 0"
    for principal in filter(None, (p.strip() for p in config.super_users.split(";"))):
        if ":" not in principal:
            return f"super_users: {principal!r} is not Type:Name (e.g. User:admin)"
    if config.http_ssl_client_auth not in ("none", "required"):
        return "http_ssl_client_auth must be none or required"
    if config.http_tls and not config.ssl_certificate_file:
        return "http_tls needs ssl_certificate_file (and ssl_key_file)"
    if config.http_ssl_client_auth != "none" and not (
        config.http_tls and config.ssl_truststore_file
    ):
        return "http_ssl_client_auth=required needs http_tls and ssl_truststore_file"

    return None
