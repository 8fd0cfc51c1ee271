"""SASL/OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer with its JWKS validator
(OAuthBearerValidatorCallbackHandler, KIP-768): the client sends a JWT; the server checks
its signature against the keys of a JWKS endpoint and its claims, and the principal is
`User:<sub claim>`. Kafka's other validator, the unsecured one that trusts any token, is
not offered: enabling OAUTHBEARER requires `sasl_oauthbearer_jwks_endpoint_url`.

Checks, as Kafka's BrokerJwtValidator: a signature by a key of the set (`alg` none never
accepted), `exp` and `iat` present, `exp` not past and `nbf` not ahead (both with
`sasl_oauthbearer_clock_skew_seconds`), the audience among the expected ones and the
issuer the expected one when those are set, the principal claim a non-empty string, the
scope claim (if any) a string or a list of strings.

Keys. The JWKS is fetched at start (the server refuses to start when it cannot be
fetched, naming the URL), then again every `sasl_oauthbearer_jwks_endpoint_refresh_ms`
and when a token names a key id the set lacks (at most once every 10 s), in a thread, so
a token is never checked while waiting on the network: until the new set arrives, tokens
are checked against the old one. `file:` URLs are read the same way (KIP-768 allows them).

The exchange. Valid token: the exchange completes, and the session ends when the token
expires, as Kafka's (with connections_max_reauth_ms > 0; min of both). Invalid token: the
server answers a JSON challenge `{"status":"invalid_token"}` with no error; the client
must send a single 0x01 byte, after which the authentication fails with that JSON as
the message."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .scram import SaslFailure

_KID_MISS_REFRESH_MIN_S = 10.0
_FETCH_TIMEOUT_S = 10.0
# Asymmetric algorithms only: a JWKS publishes public keys.
_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
# Kafka's JSON error, byte for byte (OAuthBearerSaslServer.jsonErrorResponse).
_INVALID_TOKEN = b'{"status":"invalid_token"}'


class OAuthConfigError(ValueError):
    """The JWKS cannot be fetched or read at start, or PyJWT is not installed."""


class InvalidToken(Exception):
    """Why a token was refused (logged; the client gets Kafka's JSON challenge)."""


@dataclass(frozen=True, slots=True)
class ValidatorSettings:
    jwks_url: str
    refresh_ms: int = 3_600_000
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str = ""
    clock_skew_s: int = 30
    sub_claim: str = "sub"
    scope_claim: str = "scope"


def fetch_jwks(url: str) -> bytes:
    """The JWKS document at `url` (http, https or file)."""
    with urllib.request.urlopen(url, timeout=_FETCH_TIMEOUT_S) as response:
        data: bytes = response.read()
        return data


def _jwt() -> Any:
    try:
        import jwt
    except ImportError:
        raise OAuthConfigError(
            "OAUTHBEARER needs PyJWT with its crypto backend: pip install 'groupcoord[oauth]'"
        ) from None
    return jwt


class JwksValidator:
    def __init__(
        self,
        settings: ValidatorSettings,
        fetch: Callable[[str], bytes] = fetch_jwks,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._fetch = fetch
        self._clock_s = clock_s
        self._jwt = _jwt()
        self._keys: dict[str | None, list[Any]] = {}
        self._fetched_at = 0.0
        self._kid_miss_at = 0.0
        self._refreshing = threading.Lock()

    def load(self) -> None:
        """Fetch the key set now (at start). Raises OAuthConfigError naming the URL."""
        try:
            self._install(self._fetch(self.settings.jwks_url))
        except Exception as e:
            raise OAuthConfigError(
                f"sasl_oauthbearer_jwks_endpoint_url {self.settings.jwks_url}: {e}"
            ) from None

    def _install(self, document: bytes) -> None:
        jwk_set = self._jwt.PyJWKSet.from_json(document.decode())
        keys: dict[str | None, list[Any]] = {}
        for key in jwk_set.keys:
            keys.setdefault(key.key_id, []).append(key)
            keys.setdefault(None, []).append(key)
        self._keys = keys
        self._fetched_at = time.monotonic()

    def _refresh_in_background(self) -> None:
        if not self._refreshing.acquire(blocking=False):
            return  # one refresh at a time

        def run() -> None:
            try:
                self._install(self._fetch(self.settings.jwks_url))
            except Exception:
                pass  # the old keys stay; the next trigger tries again
            finally:
                self._refreshing.release()

        threading.Thread(target=run, name="jwks-refresh", daemon=True).start()

    def validate(self, token: str) -> tuple[str, int]:
        """(principal name, expiry in ms since the epoch) of a valid token; InvalidToken."""
        jwt = self._jwt
        settings = self.settings
        now_monotonic = time.monotonic()
        if now_monotonic - self._fetched_at > settings.refresh_ms / 1000:
            self._refresh_in_background()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed token: {e}") from None
        kid = header.get("kid")
        candidates = self._keys.get(kid, [])
        if not candidates:
            if now_monotonic - self._kid_miss_at > _KID_MISS_REFRESH_MIN_S:
                self._kid_miss_at = now_monotonic
                self._refresh_in_background()
            raise InvalidToken(f"no key with id {kid!r} in the JWKS")
        options: dict[str, Any] = {"require": ["exp", "iat"], "verify_aud": False}
        claims: dict[str, Any] | None = None
        last_error: Exception | None = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=list(_ALGORITHMS),
                    options=options,
                    leeway=settings.clock_skew_s,
                    issuer=settings.expected_issuer or None,
                )
                break
            except jwt.PyJWTError as e:
                last_error = e
        if claims is None:
            raise InvalidToken(f"token refused: {last_error}")
        self._check_audience(claims.get("aud"))
        principal = claims.get(settings.sub_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"no {settings.sub_claim!r} claim naming the principal")
        scope = claims.get(settings.scope_claim)
        if scope is not None and not (
            isinstance(scope, str)
            or (isinstance(scope, list) and all(isinstance(s, str) for s in scope))
        ):
            raise InvalidToken(f"the {settings.scope_claim!r} claim is not a string or list")
        return principal, int(claims["exp"]) * 1000

    def _check_audience(self, audience: Any) -> None:
        expected = self.settings.expected_audience
        if not expected:
            return
        given = [audience] if isinstance(audience, str) else audience
        if not isinstance(given, list) or not set(expected) & {a for a in given if a}:
            raise InvalidToken(f"audience {audience!r} is not one of {list(expected)}")


class OAuthBearerServer:
    """One connection's OAUTHBEARER exchange, with ScramServer's shape: `evaluate` each
    token, then `complete`, `user`, and `expiry_ms` (the token's expiry)."""

    def __init__(self, validator: JwksValidator) -> None:
        self.validator = validator
        self.complete = False
        self.user: str | None = None
        self.expiry_ms: int | None = None
        self._error_sent = False
        self._why = ""

    def evaluate(self, token: bytes) -> bytes:
        if self._error_sent and token == b"\x01":
            # Kafka: the client acknowledged the JSON error with a lone 0x01 (kvsep); the
            # authentication fails with that JSON as the message. Anything else is read
            # as a new first message.
            raise SaslFailure(f"invalid token: {self._why}", _INVALID_TOKEN.decode())
        self._error_sent = False
        authzid, bearer = _parse_initial_response(token)
        try:
            principal, expiry_ms = self.validator.validate(bearer)
        except InvalidToken as e:
            self._error_sent = True
            self._why = str(e)
            return _INVALID_TOKEN
        if authzid and authzid != principal:
            raise SaslFailure(
                "authzid differs",
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({principal})",
            )
        self.complete = True
        self.user = principal
        self.expiry_ms = expiry_ms
        return b""


def _parse_initial_response(token: bytes) -> tuple[str, str]:
    """(authzid, bearer token) of RFC 7628's client first message:
    `n,[a=authzid],` 0x01 `auth=Bearer <token>` 0x01 [key=value 0x01]* 0x01."""
    text = token.decode("utf-8", "replace")
    gs2, sep, rest = text.partition("\x01")
    parts = gs2.split(",")
    if not sep or len(parts) < 3 or parts[0] not in ("n", "y"):
        raise SaslFailure("bad OAUTHBEARER message", "Invalid OAUTHBEARER client first message")
    authzid = parts[1][2:] if parts[1].startswith("a=") else ""
    fields = dict(kv.split("=", 1) for kv in rest.rstrip("\x01").split("\x01") if kv and "=" in kv)
    auth = fields.get("auth", "")
    scheme, _, bearer = auth.partition(" ")
    if scheme.lower() != "bearer" or not bearer:
        raise SaslFailure("no bearer token", "Invalid OAUTHBEARER client first message")
    return authzid, bearer.strip()
