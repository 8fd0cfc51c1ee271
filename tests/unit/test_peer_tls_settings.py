"""The settings of TLS between cluster nodes (cluster_peer_security_protocol,
cluster_peer_ssl_client_auth; node_settings.py) are checked at load: an unknown protocol
or client-auth value, or SASL_SSL peers without the node's certificate and the CA to
check peers against, are refused naming the setting; and the peer client's context
checks the peer's certificate and host name (security/tls.peer_client_context)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.security.tls import TlsConfigError, TlsSettings, peer_client_context
from tests.tls_certs import make_pki

DSN = "postgresql://127.0.0.1:1/db"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cluster_peer_security_protocol": "SSL"}, "cluster_peer_security_protocol"),
        ({"cluster_peer_ssl_client_auth": "requested"}, "cluster_peer_ssl_client_auth"),
        ({"cluster_peer_security_protocol": "SASL_SSL"}, "ssl_certificate_file"),
        (
            {"cluster_peer_security_protocol": "SASL_SSL", "ssl_certificate_file": "c.pem"},
            "ssl_truststore_file",
        ),
    ],
)
def test_peer_tls_settings_are_checked(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides={"cluster": DSN, "node_id": 1, **overrides}, environ={})


def test_sasl_ssl_peers_with_certificate_and_truststore_load() -> None:
    config = load_config(
        overrides={
            "cluster": DSN,
            "node_id": 1,
            "cluster_peer_security_protocol": "SASL_SSL",
            "cluster_peer_ssl_client_auth": "required",
            "ssl_certificate_file": "node.pem",
            "ssl_truststore_file": "ca.pem",
        },
        environ={},
    )
    assert config.cluster_peer_security_protocol == "SASL_SSL"
    assert load_config(environ={}).cluster_peer_security_protocol == "SASL_PLAINTEXT"


def test_peer_client_context_verifies_the_peer_and_shows_its_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cert, key = pki.issue("node1", "/CN=node-1", node=True)
    settings = TlsSettings(str(cert), str(key), "", str(pki.ca), "none", "TLSv1.2,TLSv1.3")
    context = peer_client_context(settings)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError, match="ssl_truststore_file"):
        peer_client_context(TlsSettings(str(cert), str(key), "", "", "none", "TLSv1.3"))
