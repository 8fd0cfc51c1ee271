"""TLS 1.3 ciphersuites of the server's contexts: TLS_AES_128_GCM_SHA256 first.

Why: OpenSSL's default TLS 1.3 order puts TLS_AES_256_GCM_SHA384 first, and a server
context (Python sets OP_CIPHER_SERVER_PREFERENCE) picks the first of its own suites the
client offers; clients (librdkafka, Java) offer all three. AES-128-GCM takes 10 rounds
where AES-256 takes 14: about 15% less per byte on this machine (`openssl speed -evp`,
16 KiB blocks: 3.85 against 3.28 GB/s), paid by the server decrypting every produced
byte and by the client encrypting it. Both are 128-bit-secure or better choices that
Kafka's own (JDK) brokers also accept; TLS 1.2's suites are left as Python sets them.

How: Python's ssl module sets TLS 1.2 suites only (set_ciphers), so OpenSSL's
SSL_CTX_set_ciphersuites is called through ctypes on the context's SSL_CTX*. That must
fail safe on an interpreter or OpenSSL build it does not expect: each step is checked and
anything unexpected leaves the context as Python made it (OpenSSL's default order):
- CPython only: there the SSL_CTX* is the first field after the object header of _ssl's
  PySSLContext (`object.__basicsize__` past the object's address);
- the functions are taken from the libssl the _ssl module itself loaded (dlsym through
  _ssl's own handle), never another copy; OpenSSL before 1.1.1 lacks the function;
- before anything is written, the pointer must be the context's: OpenSSL's
  SSL_CTX_get_options and SSL_CTX_get_verify_mode on it must give what the context says;
- afterwards get_ciphers() must list TLS_AES_128_GCM_SHA256 first.
"""

from __future__ import annotations

import ssl
import sys
from typing import Any

PREFERRED = "TLS_AES_128_GCM_SHA256"
# Every TLS 1.3 suite OpenSSL enables by default, AES-128-GCM moved first.
SUITES = b"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"


class _Libssl:
    """The three OpenSSL functions, as the _ssl module's libssl exports them (None when
    they cannot be had)."""

    functions: tuple[Any, Any, Any] | None = None
    looked_up = False

    @classmethod
    def get(cls) -> tuple[Any, Any, Any] | None:
        if not cls.looked_up:
            cls.looked_up = True
            cls.functions = _look_up()
        return cls.functions


def _look_up() -> tuple[Any, Any, Any] | None:
    if sys.implementation.name != "cpython":
        return None
    try:
        import _ssl
        import ctypes

        libssl = ctypes.CDLL(_ssl.__file__)  # its dependencies answer dlsym: its libssl
        set_suites = libssl.SSL_CTX_set_ciphersuites
        get_options = libssl.SSL_CTX_get_options
        get_verify_mode = libssl.SSL_CTX_get_verify_mode
    except (ImportError, OSError, AttributeError):
        return None
    set_suites.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
    set_suites.restype = ctypes.c_int
    get_options.argtypes = (ctypes.c_void_p,)
    get_options.restype = ctypes.c_uint64  # uint64_t (3.x); unsigned long (1.1.1, LP64)
    get_verify_mode.argtypes = (ctypes.c_void_p,)
    get_verify_mode.restype = ctypes.c_int
    return set_suites, get_options, get_verify_mode


def context_pointer(context: ssl.SSLContext) -> int | None:
    """The SSL_CTX* of `context` as CPython lays PySSLContext out, or None."""
    import ctypes

    header = object.__basicsize__
    if type(context).__basicsize__ < header + ctypes.sizeof(ctypes.c_void_p):
        return None
    pointer = ctypes.c_void_p.from_address(id(context) + header).value
    if not pointer or pointer % ctypes.alignment(ctypes.c_void_p):
        return None
    return int(pointer)


def _is_context(functions: tuple[Any, Any, Any], pointer: int, context: ssl.SSLContext) -> bool:
    _, get_options, get_verify_mode = functions
    return bool(
        get_options(pointer) == int(context.options)
        and get_verify_mode(pointer) == _verify_bits(context)
    )


def _verify_bits(context: ssl.SSLContext) -> int:
    """OpenSSL's SSL_VERIFY_* bits of the context's verify_mode (as _ssl.c sets them)."""
    mode = context.verify_mode
    if mode == ssl.CERT_NONE:
        return 0
    if mode == ssl.CERT_OPTIONAL:
        return 1  # SSL_VERIFY_PEER
    return 3  # SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT


def prefer_aes128(context: ssl.SSLContext, pointer: int | None = None) -> bool:
    """Put TLS_AES_128_GCM_SHA256 first among the context's TLS 1.3 suites; whether it
    is (False: the context is left as it was). `pointer`: the SSL_CTX* to use (tests
    hand a wrong one; normally context_pointer's)."""
    functions = _Libssl.get()
    if functions is None or not isinstance(context, ssl.SSLContext):
        return False
    if pointer is None:
        pointer = context_pointer(context)
    if pointer is None or not _is_context(functions, pointer, context):
        return False
    if functions[0](pointer, SUITES) != 1:
        return False
    names = [c["name"] for c in context.get_ciphers() if c.get("protocol") == "TLSv1.3"]
    return bool(names) and names[0] == PREFERRED
