"""SASL/OAUTHBEARER against the real server: tokens signed by an identity provider's key
(an RSA key pair made here, its JWKS served over HTTP by the test) are accepted from
confluent-kafka and kafka-python; a token signed by an unknown key is refused with Kafka's
JSON error; a key rotated in at the provider is fetched when a token names it; the session
ends with the token; a JWKS that cannot be fetched stops the start, naming it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.test_security import (
    _confluent_round_trip,
    _kafka_python_round_trip,
    _sasl_request,
)
from tests.oauth_tokens import Issuer
from tests.rawclient import RawClient
from tests.support import ServerProcess, free_port, serving


class _Jwks:
    """An HTTP server publishing a JWKS that the test can change."""

    def __init__(self, document: bytes) -> None:
        self.document = document
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = jwks.document
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}/jwks.json"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@dataclass
class OAuth:
    proc: ServerProcess
    bootstrap: str
    issuer: Issuer
    jwks: _Jwks


@pytest.fixture
def oauth(tmp_path: Path) -> Iterator[OAuth]:
    issuer = Issuer()
    jwks = _Jwks(issuer.jwks())
    port = free_port()
    try:
        with serving(
            tmp_path / "data",
            listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}",
            sasl_enabled_mechanisms="OAUTHBEARER",
            sasl_oauthbearer_jwks_endpoint_url=jwks.url,
            sasl_oauthbearer_expected_audience="groupcoord",
            connections_max_reauth_ms=600_000,
        ) as proc:
            yield OAuth(proc, f"127.0.0.1:{port}", issuer, jwks)
    finally:
        jwks.close()


def _confluent_conf(bootstrap: str, token: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        # librdkafka calls this for a token: (token, expiry in seconds since the epoch).
        "oauth_cb": lambda _config: (token(), time.time() + 600),
    }


def _authenticated(proc: ServerProcess) -> float:
    total = 0.0
    for line in proc.metrics_text().splitlines():
        if line.startswith("groupcoord_successful_authentication_total{") and (
            'mechanism="OAUTHBEARER"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_confluent_and_kafka_python_authenticate_with_signed_tokens(oauth: OAuth) -> None:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    conf = _confluent_conf(oauth.bootstrap, lambda: oauth.issuer.token("alice"))
    _confluent_round_trip(conf, "oauth-topic")

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return oauth.issuer.token("bob")

    _kafka_python_round_trip(
        {
            "bootstrap_servers": oauth.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Provider(),
        },
        "oauth-topic-kp",
    )
    assert _authenticated(oauth.proc) >= 2
    # A token signed by a key the provider does not publish is refused.
    stranger = Issuer(kid="stranger")
    errors: list[str] = []
    refused = Producer(
        _confluent_conf(oauth.bootstrap, lambda: stranger.token("mallory"))
        | {"error_cb": lambda e: errors.append(str(e))}
    )
    deadline = time.monotonic() + 30
    while not any("invalid_token" in e for e in errors) and time.monotonic() < deadline:
        refused.poll(0.2)
    assert any("invalid_token" in e for e in errors), errors


def test_invalid_token_gets_kafkas_json_error_then_fails(oauth: OAuth) -> None:
    expired = oauth.issuer.token("alice", lifetime_s=-300)
    with RawClient(oauth.bootstrap) as client:
        assert _sasl_request(client, 17, 1, mechanism="OAUTHBEARER").error_code == 0
        first = f"n,,\x01auth=Bearer {expired}\x01\x01".encode()
        challenge = _sasl_request(client, 36, 2, auth_bytes=first)
        assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
        failed = _sasl_request(client, 36, 2, auth_bytes=b"\x01")
        assert failed.error_code == 58
        assert failed.error_message == '{"status":"invalid_token"}'
    # A valid token: the session lasts until the token expires (under the 10-minute cap).
    token = oauth.issuer.token("alice", lifetime_s=120)
    with RawClient(oauth.bootstrap) as client:
        assert _sasl_request(client, 17, 1, mechanism="OAUTHBEARER").error_code == 0
        done = _sasl_request(
            client, 36, 2, auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        )
        assert done.error_code == 0
        assert 100_000 < done.session_lifetime.total_seconds() * 1000 <= 120_000


def test_a_key_rotated_in_is_fetched_when_a_token_names_it(oauth: OAuth) -> None:
    rotated = Issuer(kid="key-2")
    oauth.jwks.document = oauth.issuer.jwks(rotated)  # the provider publishes a new key
    first = f"n,,\x01auth=Bearer {rotated.token('carol')}\x01\x01".encode()
    deadline = time.monotonic() + 30
    while True:
        with RawClient(oauth.bootstrap) as client:
            assert _sasl_request(client, 17, 1, mechanism="OAUTHBEARER").error_code == 0
            answer = _sasl_request(client, 36, 2, auth_bytes=first)
        # The first try names an unknown key and starts a fetch; a later one is accepted.
        if answer.error_code == 0 and answer.auth_bytes == b"":
            break
        assert time.monotonic() < deadline, "the rotated key was never fetched"
        time.sleep(0.2)


def test_a_jwks_that_cannot_be_fetched_stops_the_start(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/jwks.json"  # nothing listens there
    with pytest.raises(RuntimeError, match="exited with 1") as stopped:
        with serving(
            tmp_path / "data",
            listeners=f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
            sasl_enabled_mechanisms="OAUTHBEARER",
            sasl_oauthbearer_jwks_endpoint_url=url,
        ):
            pass
    assert url in str(stopped.value)
