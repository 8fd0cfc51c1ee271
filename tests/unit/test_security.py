"""The pure parts of authentication: SCRAM (RFC 7677's vector), PLAIN, the certificate
principal (Kafka's RFC 2253 form), listener settings and TLS versions."""

from __future__ import annotations

import base64
import ssl

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.security.listeners import ListenerError, listener_specs
from groupcoord.coordinator.security.plain import INVALID, authenticate_plain
from groupcoord.coordinator.security.scram import (
    SaslFailure,
    ScramClient,
    ScramServer,
    credential_from_password,
)
from groupcoord.coordinator.security.tls import (
    TlsConfigError,
    certificate_principal,
    protocol_range,
    subject_dn,
)

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def _rfc7677_server() -> ScramServer:
    credential = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    return ScramServer(
        "SCRAM-SHA-256",
        lambda user: credential if user == "user" else None,
        nonce=RFC7677_SERVER_NONCE,
    )


def test_scram_sha_256_matches_rfc_7677() -> None:
    server = _rfc7677_server()
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree_and_a_wrong_password_fails(mechanism: str) -> None:
    credential = credential_from_password(mechanism, "right", 4096)
    lookup = {"alice": credential}.get
    server = ScramServer(mechanism, lookup)
    client = ScramClient(mechanism, "alice", "right")
    assert client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    server = ScramServer(mechanism, lookup)
    client = ScramClient(mechanism, "alice", "wrong")
    challenge = server.evaluate(client.first())
    with pytest.raises(SaslFailure) as failure:
        server.evaluate(client.final(challenge))
    assert failure.value.client_message is None  # the client gets the generic message
    assert not server.complete


def test_scram_refuses_unknown_users_other_nonces_and_other_authorization_ids() -> None:
    with pytest.raises(SaslFailure) as unknown:
        _rfc7677_server().evaluate(b"n,,n=nobody,r=abc")
    assert unknown.value.client_message is None
    server = _rfc7677_server()
    server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslFailure, match="Invalid client nonce"):
        server.evaluate(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        )
    with pytest.raises(SaslFailure) as authzid:
        _rfc7677_server().evaluate(b"n,a=admin,n=user,r=abc")
    assert authzid.value.client_message == (
        "Authentication failed: Client requested an authorization id that is different from "
        "username"
    )


def test_plain_answers_kafkas_messages() -> None:
    users = {"alice": "secret"}
    assert authenticate_plain(b"\x00alice\x00secret", users) == "alice"
    assert authenticate_plain(b"alice\x00alice\x00secret", users) == "alice"
    for token in (b"\x00alice\x00wrong", b"\x00mallory\x00secret"):
        with pytest.raises(SaslFailure) as failure:
            authenticate_plain(token, users)
        assert failure.value.client_message == INVALID  # the same for both: no enumeration
    cases = {
        b"\x00\x00secret": "Authentication failed: username not specified",
        b"\x00alice\x00": "Authentication failed: password not specified",
        b"alice": "Invalid SASL/PLAIN response: expected 3 tokens, got 1",
        b"bob\x00alice\x00secret": "Authentication failed: Client requested an authorization "
        "id that is different from username",
    }
    for token, message in cases.items():
        with pytest.raises(SaslFailure) as failure:
            authenticate_plain(token, users)
        assert failure.value.client_message == message


def test_certificate_principal_is_kafkas_rfc_2253_subject() -> None:
    # getpeercert()'s subject: RDNs in certificate order (C first for /C=US/O=corp/...).
    subject = (
        (("countryName", "US"),),
        (("organizationName", "corp, inc"),),
        (("organizationalUnitName", "eng"), ("userId", "u1")),
        (("commonName", " alice#1"),),
        (("emailAddress", "a@corp.example"),),
    )
    assert subject_dn(subject) == (
        "1.2.840.113549.1.9.1=a@corp.example,CN=\\ alice#1,OU=eng+UID=u1,O=corp\\, inc,C=US"
    )
    assert certificate_principal({"subject": subject[:4]}) == (
        "User:CN=\\ alice#1,OU=eng+UID=u1,O=corp\\, inc,C=US"
    )
    assert certificate_principal(None) == "User:ANONYMOUS"
    assert certificate_principal({}) == "User:ANONYMOUS"


def test_listener_settings() -> None:
    # Today's single-listener settings stay the default.
    config = load_config(
        overrides={"listen": "0.0.0.0:9092", "advertised_listener": "kafka:19092"}, environ={}
    )
    [only] = config.listener_specs
    assert (only.name, only.protocol, only.host, only.port) == (
        "PLAINTEXT",
        "PLAINTEXT",
        "0.0.0.0",
        9092,
    )
    assert (only.advertised_host, only.advertised_port) == ("kafka", 19092)
    specs = listener_specs(
        "client://:9093,SASL_SSL://127.0.0.1:9094",
        "CLIENT://public.example:443",
        "CLIENT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ("127.0.0.1", 9092),
        None,
    )
    assert [(s.name, s.protocol, s.advertised_host, s.advertised_port) for s in specs] == [
        ("CLIENT", "SASL_PLAINTEXT", "public.example", 443),
        ("SASL_SSL", "SASL_SSL", "127.0.0.1", 9094),
    ]
    bad = [
        ("OTHER://:1", "", "PLAINTEXT:PLAINTEXT"),  # no protocol for OTHER
        ("PLAINTEXT://:1,PLAINTEXT://:2", "", "PLAINTEXT:PLAINTEXT"),  # twice
        ("PLAINTEXT://:1", "SSL://x:2", "PLAINTEXT:PLAINTEXT"),  # advertised not a listener
        ("PLAINTEXT://:1", "PLAINTEXT://0.0.0.0:2", "PLAINTEXT:PLAINTEXT"),  # wildcard
        ("PLAINTEXT://0.0.0.0:1", "", "PLAINTEXT:PLAINTEXT"),  # wildcard, not advertised
        ("PLAINTEXT://:1,SSL://:1", "", "PLAINTEXT:PLAINTEXT,SSL:SSL"),  # same port
        ("PLAINTEXT://:1", "", "PLAINTEXT:KERBEROS"),  # not a protocol
        ("PLAINTEXT:1", "", "PLAINTEXT:PLAINTEXT"),  # not NAME://HOST:PORT
    ]
    for listeners, advertised, mapping in bad:
        with pytest.raises(ListenerError):
            listener_specs(listeners, advertised, mapping, ("", 9092), None)
    with pytest.raises(ConfigError, match="ssl_certificate_file"):
        load_config(overrides={"listeners": "SSL://127.0.0.1:9093"}, environ={})
    with pytest.raises(ConfigError, match="ssl_truststore_file"):
        load_config(overrides={"ssl_client_auth": "required"}, environ={})
    with pytest.raises(ConfigError, match="GSSAPI"):
        load_config(overrides={"sasl_enabled_mechanisms": "GSSAPI"}, environ={})


def test_tls_is_1_2_or_later() -> None:
    assert protocol_range("TLSv1.2,TLSv1.3") == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert protocol_range("TLSv1.3") == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    for text in ("TLSv1.1", "TLSv1", "", "SSLv3"):
        with pytest.raises(TlsConfigError):
            protocol_range(text)
