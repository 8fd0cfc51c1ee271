"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer speaks
them: the server side of one exchange, and the derivation of stored credentials.

Credentials are kept as (salt, StoredKey, ServerKey, iterations), never the password:
StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
"Server Key"), SaltedPassword = PBKDF2-HMAC(password, salt, iterations). The server never
runs PBKDF2 during authentication (the client does): an exchange costs two HMACs and a
hash, so authenticating is cheap.

Exchange: client-first `n,[a=authzid],n=user,r=cnonce[,ext...]` -> server-first
`r=cnonce+snonce,s=salt,i=iterations` -> client-final `c=..,r=nonce,p=proof` -> check
H(ClientSignature XOR proof) == StoredKey in constant time -> server-final `v=signature`.
Failures raise SaslFailure with the message the client gets: Kafka sends its own
client-friendly message for an authorization id that differs from the user, and a
generic one (the caller's) for everything else, so nothing says whether a user exists.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# KIP-554 mechanism codes (AlterUserScramCredentials, DescribeUserScramCredentials).
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384

_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,(?P<bare>(?:m=[^,]*,)?n=(?P<user>[^,]+),"
    r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<ext>(?:,[a-zA-Z0-9]+=[^,]*)*))"
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<binding>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[a-zA-Z0-9]+=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)"
)


class SaslFailure(Exception):
    """Authentication failed. `client_message`: what the client may be told verbatim
    (Kafka's SaslAuthenticationException), or None for the generic message."""

    def __init__(self, detail: str, client_message: str | None = None) -> None:
        super().__init__(detail)
        self.client_message = client_message


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(key: bytes, data: bytes, digest: str) -> bytes:
    return hmac.new(key, data, digest).digest()


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The stored form of a credential from its SaltedPassword (what KIP-554's
    AlterUserScramCredentials carries: the client salts and hashes the password)."""
    digest = MECHANISMS[mechanism]
    client_key = _hmac(salted_password, b"Client Key", digest)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=_hmac(salted_password, b"Server Key", digest),
        iterations=iterations,
    )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, i), i.e. PBKDF2-HMAC."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


def credential_from_password(
    mechanism: str, password: str, iterations: int = ITERATIONS_MIN, salt: bytes | None = None
) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def unescape_username(name: str) -> str:
    """saslname -> user name: '=2C' is ',', '=3D' is '='; any other '=' is invalid."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslFailure(f"invalid username {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def _server_nonce() -> str:
    # Kafka: 130 random bits as a base-36 number.
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return out or "0"


class ScramServer:
    """The server's side of one SCRAM exchange. `lookup(user)` gives the user's credential
    for this mechanism or None. `evaluate(token)` answers each client message, raising
    SaslFailure; `complete` and `user` say how it ended."""

    def __init__(self, mechanism: str, lookup: object, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._digest = MECHANISMS[mechanism]
        self._lookup = lookup
        self._fixed_nonce = nonce  # tests: RFC 7677's vector
        self._state = 0
        self.user: str | None = None
        self.complete = False
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""

    def evaluate(self, token: bytes) -> bytes:
        if self._state == 0:
            return self._first(token)
        if self._state == 1:
            return self._final(token)
        raise SaslFailure("unexpected SCRAM message after the exchange completed")

    def _first(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslFailure("client-first message is not UTF-8") from None
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslFailure(f"invalid SCRAM client-first message: {text[:100]!r}")
        user = unescape_username(match["user"])
        credential = self._lookup(user)  # type: ignore[operator]
        if credential is None:
            raise SaslFailure(f"Authentication failed: Invalid user credentials ({user})")
        authzid = match["authzid"]
        if authzid and unescape_username(authzid) != user:
            raise SaslFailure(
                "authorization id differs from the user",
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
            )
        if credential.iterations < ITERATIONS_MIN:
            raise SaslFailure(f"iterations {credential.iterations} below {ITERATIONS_MIN}")
        self.user = user
        self._credential = credential
        self._nonce = match["nonce"] + (self._fixed_nonce or _server_nonce())
        self._first_bare = match["bare"]
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = 1
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        assert self._credential is not None
        self._state = 2
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslFailure("client-final message is not UTF-8") from None
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise SaslFailure(f"invalid SCRAM client-final message: {text[:100]!r}")
        if match["nonce"] != self._nonce:
            raise SaslFailure("Invalid client nonce in the final client message.")
        auth_message = ",".join(
            (self._first_bare, self._server_first, match["without_proof"])
        ).encode()
        credential = self._credential
        try:
            proof = base64.b64decode(match["proof"], validate=True)
        except ValueError:
            raise SaslFailure("invalid client proof encoding") from None
        signature = _hmac(credential.stored_key, auth_message, self._digest)
        if len(proof) != len(signature):
            raise SaslFailure("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(signature, proof, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._digest, client_key).digest(), credential.stored_key
        ):
            raise SaslFailure("Invalid client credentials")
        server_signature = _hmac(credential.server_key, auth_message, self._digest)
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side (tests and benchmarks: a raw client that authenticates)."""

    def __init__(
        self,
        mechanism: str,
        user: str,
        password: str,
        nonce: str | None = None,
        salted_cache: dict[tuple[bytes, int], bytes] | None = None,
    ):
        """`salted_cache`: SaltedPassword by (salt, iterations), kept across exchanges (a
        benchmark measuring the server, not the client's PBKDF2)."""
        self.salted_cache = salted_cache
        self.mechanism = mechanism
        self.user = user
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(18)
        self._first_bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(item.split("=", 1) for item in text.split(","))
        salt = base64.b64decode(fields["s"])
        iterations = int(fields["i"])
        digest = MECHANISMS[self.mechanism]
        cache = self.salted_cache
        salted = cache.get((salt, iterations)) if cache is not None else None
        if salted is None:
            salted = salted_password(self.mechanism, self.password, salt, iterations)
            if cache is not None:
                cache[(salt, iterations)] = salted
        client_key = _hmac(salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = _hmac(stored_key, auth_message, digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(salted, b"Server Key", digest)
        self._server_signature = _hmac(server_key, auth_message, digest)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self._server_signature)
