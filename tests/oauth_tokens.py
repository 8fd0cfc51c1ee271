"""Signing keys, a JWKS and tokens for the OAUTHBEARER tests: what an identity provider
would issue (PyJWT and cryptography, from the oauth extra)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


@dataclass
class Issuer:
    """An RSA key pair named `kid`; `jwks()` publishes its public half."""

    kid: str = "key-1"
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def jwks(self, *others: Issuer) -> bytes:
        keys = []
        for one in (self, *others):
            jwk = json.loads(RSAAlgorithm.to_jwk(one.key.public_key()))
            keys.append(jwk | {"kid": one.kid, "alg": "RS256", "use": "sig"})
        return json.dumps({"keys": keys}).encode()

    def token(self, sub: str = "alice", lifetime_s: int = 3600, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": sub, "iat": now, "exp": now + lifetime_s, "aud": "groupcoord"}
        body |= claims
        return jwt.encode(
            {k: v for k, v in body.items() if v is not None},
            self.key,
            algorithm="RS256",
            headers={"kid": self.kid},
        )
