"""Who may read the HTTP endpoint (observability/http_access.py), on a real server: a bearer
token from a file (re-read on SIGHUP) for all but /health and the page's static /, no
credential in any answer or log line, `/metrics` without topic or group names
(metrics_name_labels=false), and HTTPS with required client certificates (http_tls)."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from groupcoord.coordinator.cli import main
from tests.integration.group_support import wait_until
from tests.support import ServerProcess, serving
from tests.tls_certs import make_pki

TOKEN = "tok-3f9c1a7e5b2d4c6e8a0b"
NEW_TOKEN = "tok-new-77aa55cc33ee11"
KEY_PASSWORD = "kp-secret-91d2e8f0"
TOPIC = "secret-topic-x"
GROUP = "secret-group-y"
PRODUCED = 10
COMMITTED = 3


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """A server requiring TOKEN (from a file), with metrics_name_labels off and a key
    password set, holding TOPIC (PRODUCED records on partition 0) and GROUP's offset
    COMMITTED on it."""
    base = tmp_path_factory.mktemp("http-access")
    token_file = base / "token"
    token_file.write_text(TOKEN + "\n")
    with serving(
        base / "data",
        http_auth_token_file=token_file,
        metrics_name_labels="false",
        ssl_key_password=KEY_PASSWORD,
    ) as server:
        producer = Producer({"bootstrap.servers": server.bootstrap})
        for i in range(PRODUCED):
            producer.produce(TOPIC, b"v%d" % i, partition=0)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
        consumer.close()
        yield server, token_file


def get(
    server: ServerProcess, path: str, token: str | None = None, scheme: str = "Bearer"
) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of GET `path`, with `Authorization: <scheme> <token>`."""
    request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}{path}")
    if token is not None:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


GUARDED_PATHS = [
    "/metrics",
    "/api/groups",
    f"/api/groups/{GROUP}",
    f"/api/groups/{GROUP}/timeline",
    "/api/groups/nope",
    "/nowhere",
]


def test_health_and_the_page_are_open_the_rest_needs_the_token(
    guarded: tuple[ServerProcess, Path],
) -> None:
    server, _ = guarded
    assert get(server, "/health")[0] == 200
    status, headers, body = get(server, "/")
    assert status == 200 and "<script>" in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    for path in GUARDED_PATHS:
        status, headers, _ = get(server, path)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert get(server, path, "wrong-" + TOKEN)[0] == 401, path
        assert get(server, path, TOKEN[:-1])[0] == 401, path
        assert get(server, path, TOKEN, scheme="Basic")[0] == 401, path
    assert get(server, "/metrics", TOKEN)[0] == 200
    assert get(server, "/api/groups", TOKEN)[0] == 200
    assert get(server, f"/api/groups/{GROUP}", TOKEN)[0] == 200
    assert get(server, f"/api/groups/{GROUP}/timeline", TOKEN)[0] == 200
    assert get(server, "/api/groups/nope", TOKEN)[0] == 404


def test_no_answer_or_log_line_carries_a_credential(guarded: tuple[ServerProcess, Path]) -> None:
    server, _ = guarded
    seen = []
    for path in ["/", "/health", *GUARDED_PATHS]:
        for token in (None, "wrong", TOKEN):
            status, headers, body = get(server, path, token)
            seen.append(f"{status} {headers} {body}")
    post = urllib.request.Request(
        f"http://127.0.0.1:{server.metrics_port}/metrics", data=b"x", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=10)
    seen.append(refused.value.read().decode())
    text = "\n".join(seen) + server.log_path.read_text(errors="replace")
    for secret in (TOKEN, KEY_PASSWORD):
        assert secret not in text


def test_metrics_name_no_topic_or_group(guarded: tuple[ServerProcess, Path]) -> None:
    server, _ = guarded

    def metrics() -> str:
        status, _, body = get(server, "/metrics", TOKEN)
        assert status == 200
        return body

    wait_until(
        lambda: (
            re.search(rf"^groupcoord_groups_lag_records {PRODUCED - COMMITTED}$", metrics(), re.M)
            is not None
        ),
        30,
        "the summed lag series",
    )
    text = metrics()
    assert TOPIC not in text and GROUP not in text
    assert re.search(r'\b(topic|group|log)="', text) is None
    assert re.search(r"^groupcoord_group_members 0$", text, re.M)
    produced = re.search(r"^groupcoord_produced_records_total (\S+)$", text, re.M)
    assert produced is not None and float(produced.group(1)) >= PRODUCED
    assert re.search(r"^groupcoord_log_size_bytes [1-9]", text, re.M)
    # The page's API still names them: it is behind the token, not a label set.
    assert GROUP in get(server, "/api/groups", TOKEN)[2]


def test_the_timeline_command_sends_the_token(
    guarded: tuple[ServerProcess, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, token_file = guarded
    http = f"127.0.0.1:{server.metrics_port}"
    assert main(["groups", "timeline", GROUP, "--http", http, "--json"]) == 3
    assert "401" in capsys.readouterr().err
    args = ["groups", "timeline", GROUP, "--http", f"http://{http}", "--json"]
    assert main([*args, "--http-token-file", str(token_file)]) == 0
    assert json.loads(capsys.readouterr().out)["group"] == GROUP


def test_sighup_rereads_the_token_file(guarded: tuple[ServerProcess, Path]) -> None:
    server, token_file = guarded
    token_file.write_text(NEW_TOKEN)
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGHUP)
    wait_until(lambda: get(server, "/metrics", NEW_TOKEN)[0] == 200, 20, "the new token")
    assert get(server, "/metrics", TOKEN)[0] == 401
    assert NEW_TOKEN not in server.log_path.read_text(errors="replace")


class _HttpsServer(ServerProcess):
    """A server whose HTTP endpoint is HTTPS with client certificates required."""

    client_context: ssl.SSLContext

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.metrics_port}/health",
                timeout=2,
                context=self.client_context,
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def test_https_with_client_certificates(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cert, key = pki.issue("server", "/CN=localhost", server=True)
    client_cert, client_key = pki.issue("client", "/O=ops/CN=prometheus")
    settings = {
        "http_tls": "true",
        "http_ssl_client_auth": "required",
        "ssl_certificate_file": cert,
        "ssl_key_file": key,
        "ssl_truststore_file": pki.ca,
    }
    args = [arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")]
    server = _HttpsServer(tmp_path / "data", args)
    with_cert = ssl.create_default_context(cafile=str(pki.ca))
    with_cert.load_cert_chain(client_cert, client_key)
    server.client_context = with_cert
    server.start()
    try:
        url = f"https://127.0.0.1:{server.metrics_port}"
        with urllib.request.urlopen(url + "/metrics", timeout=10, context=with_cert) as r:
            assert r.status == 200 and b"groupcoord_build_info" in r.read()
        without_cert = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises((OSError, ssl.SSLError)):
            urllib.request.urlopen(url + "/metrics", timeout=10, context=without_cert).read()
        with pytest.raises(OSError):  # plain HTTP on the HTTPS port
            urllib.request.urlopen(
                f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10
            ).read()
    finally:
        server.kill()
