"""TLS for the SSL and SASL_SSL listeners: the server's SSLContext, and the principal a
client certificate gives.

Contexts: TLS 1.2 and 1.3 only (`ssl_enabled_protocols`, Kafka's ssl.enabled.protocols,
may narrow it to TLSv1.3), the certificate chain and key from PEM files, and for client
authentication (ssl.client.auth) the CA certificates of `ssl_truststore_file`.
`required`: a client without a certificate the truststore vouches for fails the
handshake; `requested`: no certificate is accepted (principal User:ANONYMOUS), an
untrusted one still fails, as in Kafka. Renegotiation is off (OpenSSL's
OP_NO_RENEGOTIATION), as Kafka refuses it.

Reload (SIGHUP): a new context is built from the files and replaces the old for new
handshakes; connections already made keep theirs, so none is dropped.

Principal: Kafka's DefaultKafkaPrincipalBuilder with ssl.principal.mapping.rules=DEFAULT
gives `User:` + X500Principal.getName(), the RFC 2253 form of the subject: RDNs from the
most specific (the last in the certificate) to the first, the attribute keywords CN, C, L,
ST, O, OU, STREET, DC, UID and the others as their dotted OID, values escaped as RFC 2253
says.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = ("none", "requested", "required")
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

# Python's names (OpenSSL's long names) -> the RFC 2253 keyword Java prints.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# OpenSSL long names of other common subject attributes -> their OID, as Java prints
# an attribute it has no keyword for (its value then is the hex of its DER, which the
# decoded certificate Python gives does not keep: the value is printed as a string).
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "title": "2.5.4.12",
    "surname": "2.5.4.4",
    "givenName": "2.5.4.42",
    "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44",
    "dnQualifier": "2.5.4.46",
    "pseudonym": "2.5.4.65",
    "postalCode": "2.5.4.17",
    "businessCategory": "2.5.4.15",
}


class TlsConfigError(ValueError):
    """A TLS setting or file that cannot be used."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The files and choices a server context is built from."""

    certificate_file: str
    key_file: str
    key_password: str
    truststore_file: str
    client_auth: str
    enabled_protocols: str


def protocol_range(enabled: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """(lowest, highest) of `TLSv1.2,TLSv1.3`-style text; older versions are refused."""
    versions = []
    for name in enabled.split(","):
        name = name.strip()
        if not name:
            continue
        if name not in _VERSIONS:
            raise TlsConfigError(
                f"ssl_enabled_protocols: {name!r} is not one of {', '.join(_VERSIONS)} "
                "(TLS 1.1 and older are not offered)"
            )
        versions.append(_VERSIONS[name])
    if not versions:
        raise TlsConfigError("ssl_enabled_protocols: at least one of TLSv1.2, TLSv1.3")
    return min(versions), max(versions)


def server_context(settings: TlsSettings, client_auth: str | None = None) -> ssl.SSLContext:
    """A server context from `settings`; `client_auth` overrides settings.client_auth
    (SASL_SSL listeners use "none", as Kafka ignores the broker-wide ssl.client.auth for
    them). Raises TlsConfigError naming what is wrong."""
    auth = settings.client_auth if client_auth is None else client_auth
    if auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH)}")
    if not settings.certificate_file:
        raise TlsConfigError("an SSL or SASL_SSL listener needs ssl_certificate_file")
    lowest, highest = protocol_range(settings.enabled_protocols)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = lowest
    context.maximum_version = highest
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    _load_certificate(context, settings)
    if auth != "none":
        if not settings.truststore_file:
            raise TlsConfigError(f"ssl_client_auth={auth} needs ssl_truststore_file")
        _load_truststore(context, settings)
        context.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return context


def peer_client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a cluster node connecting to a peer's listener (SASL_SSL peers): the
    peer's certificate must be one the truststore vouches for, for the host name dialled
    (Kafka's default ssl.endpoint.identification.algorithm=https), and the node shows its
    own certificate when the peer asks (mutual TLS). Raises TlsConfigError."""
    if not settings.certificate_file or not settings.truststore_file:
        raise TlsConfigError("TLS between nodes needs ssl_certificate_file and ssl_truststore_file")
    lowest, highest = protocol_range(settings.enabled_protocols)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, host names checked
    context.minimum_version = lowest
    context.maximum_version = highest
    _load_certificate(context, settings)
    _load_truststore(context, settings)
    return context


def _load_certificate(context: ssl.SSLContext, settings: TlsSettings) -> None:
    try:
        context.load_cert_chain(
            settings.certificate_file,
            settings.key_file or None,
            settings.key_password or None,
        )
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"cannot load ssl_certificate_file/ssl_key_file "
            f"({settings.certificate_file}, {settings.key_file or 'in the same file'}): {e}"
        ) from None


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    try:
        context.load_verify_locations(settings.truststore_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(
            f"cannot load ssl_truststore_file {settings.truststore_file}: {e}"
        ) from None


def _escape(value: str) -> str:
    """An attribute value escaped as RFC 2253 (and Java's X500Principal) does."""
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """The RFC 2253 string of a subject as ssl's getpeercert() gives it (RDNs in
    certificate order, each a tuple of (name, value) pairs): last RDN first, multi-valued
    RDNs joined with '+'."""
    rdns = []
    for rdn in reversed(list(subject)):
        parts = []
        for name, value in rdn:
            keyword = _KEYWORDS.get(name) or _OIDS.get(name, name)
            parts.append(f"{keyword}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def certificate_principal(peercert: dict[str, object] | None) -> str:
    """The principal of a TLS client: `User:<subject DN>` for a verified certificate,
    User:ANONYMOUS without one (ssl.client.auth none or requested)."""
    if not peercert:
        return ANONYMOUS
    subject = peercert.get("subject")
    if not subject:
        return ANONYMOUS
    return "User:" + subject_dn(subject)  # type: ignore[arg-type]
