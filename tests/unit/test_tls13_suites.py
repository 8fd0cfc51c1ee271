"""The server's TLS contexts put TLS_AES_128_GCM_SHA256 first among their TLS 1.3 suites
(security/tls13_suites.py: OpenSSL's SSL_CTX_set_ciphersuites through ctypes): a client
offering OpenSSL's default order (AES-256 first) gets AES-128-GCM from a real handshake;
and the ctypes path refuses, before writing anything, a pointer that is not the
context's, leaving both contexts as they were."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from groupcoord.coordinator.security.tls import TlsSettings, server_context
from groupcoord.coordinator.security.tls13_suites import (
    PREFERRED,
    context_pointer,
    prefer_aes128,
)
from tests.tls_certs import make_pki


@pytest.fixture(scope="module")
def pki_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    cert, key = pki.issue("server", "/CN=localhost", server=True)
    return pki.ca, cert, key


def _tls13_names(context: ssl.SSLContext) -> list[str]:
    return [c["name"] for c in context.get_ciphers() if c.get("protocol") == "TLSv1.3"]


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[str, str | None]:
    """(cipher, version) of a handshake between the two contexts over memory BIOs."""
    bios = [ssl.MemoryBIO() for _ in range(4)]
    c = client.wrap_bio(bios[0], bios[1], server_hostname="localhost")
    s = server.wrap_bio(bios[2], bios[3], server_side=True)
    done = {c: False, s: False}
    for _ in range(10):
        for side in (c, s):
            if not done[side]:
                try:
                    side.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        bios[2].write(bios[1].read())  # client -> server
        bios[0].write(bios[3].read())  # server -> client
        if all(done.values()):
            break
    assert all(done.values()), "handshake did not complete"
    cipher = c.cipher()
    assert cipher is not None and s.cipher() == cipher
    return cipher[0], c.version()


def test_server_contexts_negotiate_aes128_gcm_with_a_default_client(
    pki_files: tuple[Path, Path, Path],
) -> None:
    ca, cert, key = pki_files
    settings = TlsSettings(str(cert), str(key), "", "", "none", "TLSv1.2,TLSv1.3")
    server = server_context(settings)
    assert _tls13_names(server)[0] == PREFERRED
    client = ssl.create_default_context(cafile=str(ca))
    assert _tls13_names(client)[0] != PREFERRED  # the client prefers AES-256 itself
    assert _handshake(server, client) == (PREFERRED, "TLSv1.3")


def test_a_pointer_that_is_not_the_contexts_is_refused_before_any_write() -> None:
    target = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    other = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    other.options |= ssl.OP_NO_TICKET  # differs from target's: the check tells them apart
    before = (_tls13_names(target), _tls13_names(other))
    assert before[0][0] != PREFERRED
    assert prefer_aes128(target, pointer=context_pointer(other)) is False
    assert (_tls13_names(target), _tls13_names(other)) == before
    assert prefer_aes128(object()) is False  # type: ignore[arg-type]
    # Its own pointer: done, and only on it.
    assert prefer_aes128(target) is True
    assert _tls13_names(target)[0] == PREFERRED
    assert _tls13_names(other) == before[1]
