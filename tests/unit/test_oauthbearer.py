"""OAUTHBEARER's token checks (security/oauthbearer.py) as Kafka's JWKS validator makes
them, and the exchange's messages (RFC 7628; Kafka's JSON error then the 0x01 reply)."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.security.oauthbearer import (
    InvalidToken,
    JwksValidator,
    OAuthBearerServer,
    OAuthConfigError,
    ValidatorSettings,
)
from groupcoord.coordinator.security.scram import SaslFailure
from tests.oauth_tokens import Issuer

ISSUER = Issuer()
OTHER = Issuer(kid="key-2")


def validator(jwks: bytes | None = None, **settings: object) -> JwksValidator:
    fetched: list[str] = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return jwks if jwks is not None else ISSUER.jwks()

    v = JwksValidator(
        ValidatorSettings(jwks_url="http://idp/jwks", **settings),  # type: ignore[arg-type]
        fetch=fetch,
    )
    v.load()
    return v


def test_a_valid_token_names_its_principal_and_expiry() -> None:
    token = ISSUER.token("alice", lifetime_s=600)
    principal, expiry_ms = validator(expected_audience=("groupcoord",)).validate(token)
    assert principal == "alice"
    import jwt

    assert expiry_ms == jwt.decode(token, options={"verify_signature": False})["exp"] * 1000


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (OTHER.token(), "no key with id 'key-2'"),
        (Issuer(kid="key-1").token(), "Signature verification failed"),  # same kid, other key
        (ISSUER.token(lifetime_s=-120), "expired"),
        (ISSUER.token(aud="someone-else"), "audience"),
        (ISSUER.token(iat=None), "iat"),
        (ISSUER.token(sub=""), "'sub' claim"),
        (ISSUER.token(scope=7), "'scope' claim"),
        ("not.a.token", "malformed"),
    ],
)
def test_invalid_tokens_are_refused_with_the_reason(token: str, why: str) -> None:
    with pytest.raises(InvalidToken, match=why):
        validator(expected_audience=("groupcoord",)).validate(token)


def test_issuer_and_clock_skew() -> None:
    v = validator(expected_issuer="https://idp")
    with pytest.raises(InvalidToken, match="issuer"):
        v.validate(ISSUER.token(iss="https://elsewhere"))
    assert v.validate(ISSUER.token(iss="https://idp"))[0] == "alice"
    # Expired 10 s ago: inside the default 30 s of skew.
    assert validator().validate(ISSUER.token(lifetime_s=-10))[0] == "alice"


def test_an_unusable_jwks_stops_the_start_naming_the_url() -> None:
    with pytest.raises(OAuthConfigError, match="http://idp/jwks"):
        validator(jwks=b"{not json")


def first_message(token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


def test_exchange_valid_invalid_and_authzid() -> None:
    v = validator()
    server = OAuthBearerServer(v)
    assert server.evaluate(first_message(ISSUER.token("bob"))) == b""
    assert (server.complete, server.user) == (True, "bob")

    server = OAuthBearerServer(v)
    challenge = server.evaluate(first_message(OTHER.token()))
    assert challenge == b'{"status":"invalid_token"}'
    assert not server.complete
    with pytest.raises(SaslFailure) as failed:
        server.evaluate(b"\x01")
    assert failed.value.client_message == '{"status":"invalid_token"}'

    with pytest.raises(SaslFailure, match="authzid"):
        OAuthBearerServer(v).evaluate(first_message(ISSUER.token("bob"), authzid="carol"))
    with pytest.raises(SaslFailure, match="bad OAUTHBEARER message"):
        OAuthBearerServer(v).evaluate(b"garbage")
