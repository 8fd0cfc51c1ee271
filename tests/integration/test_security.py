"""Listeners, TLS and SASL against the real server: confluent-kafka and kafka-python over
SASL_SSL + SCRAM-SHA-512 and SASL_PLAINTEXT + PLAIN, TLS client authentication, SCRAM
credentials across SIGKILL, certificate reload on SIGHUP, and the wire rules of Kafka's
authenticator (refusals, errors, delays, sessions) with a raw client."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from groupcoord.coordinator.security.scram import ScramClient
from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess, free_port, free_ports, serving
from tests.tls_certs import Pki, make_pki

ALICE_PASSWORD = "alice-secret"
SCRAM_PASSWORD = "scram-secret-123"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_cert(pki: Pki) -> tuple[Path, Path]:
    return pki.issue("server", "/CN=localhost", server=True)


class Secure:
    """A server with a PLAINTEXT listener (for administration) and the secure ones."""

    def __init__(self, proc: ServerProcess, ports: dict[str, int], pki: Pki) -> None:
        self.proc = proc
        self.ports = ports
        self.pki = pki

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def metric(self, name: str) -> float:
        total = 0.0
        for line in self.proc.metrics_text().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture
def secure(tmp_path: Path, pki: Pki, server_cert: tuple[Path, Path]) -> Iterator[Secure]:
    users = tmp_path / "plain-users"
    users.write_text(f"# PLAIN users\nalice:{ALICE_PASSWORD}\nbob:bob-secret\n")
    # Four ports free together: four free_port() draws can meet (a CI run got one twice).
    base = free_ports(4)
    names = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
    ports = {name: base + i for i, name in enumerate(names)}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    cert, key = server_cert
    with serving(
        tmp_path / "data",
        listeners=listeners,
        ssl_certificate_file=cert,
        ssl_key_file=key,
        ssl_truststore_file=pki.ca,
        ssl_client_auth="required",
        sasl_plain_users_file=users,
        log_level="debug",
    ) as proc:
        yield Secure(proc, ports, pki)


def _add_scram_user(bootstrap: str, user: str, password: str, mechanism: Any) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(mechanism, 8192), password.encode()
            )
        ]
    )
    for future in futures.values():
        future.result(timeout=30)


def _confluent_round_trip(conf: dict[str, Any], topic: str, count: int = 20) -> None:
    """Produce `count` records, consume them in a group, commit, read the commit back."""
    producer = Producer({**conf, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **conf,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        seen.append(message.value())
    assert sorted(seen) == sorted(b"v%d" % i for i in range(count))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    assert committed[0].offset == count
    consumer.close()


def _kafka_python_round_trip(conf: dict[str, Any], topic: str, count: int = 10) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    producer = KafkaProducer(**conf)
    for i in range(count):
        producer.send(topic, b"w%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=f"kp-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=30_000,
        **conf,
    )
    seen = []
    for message in consumer:
        seen.append(message.value)
        if len(seen) == count:
            break
    assert sorted(seen) == sorted(b"w%d" % i for i in range(count))
    consumer.commit()
    assert consumer.committed(KTopicPartition(topic, 0)) == count
    consumer.close()


def _auth_errors(conf: dict[str, Any]) -> list[str]:
    """The errors a confluent-kafka client reports when its credentials are refused."""
    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    deadline = time.monotonic() + 20
    while not any("Authentication failed" in e for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


def test_sasl_plaintext_plain_confluent_and_kafka_python(secure: Secure) -> None:
    bootstrap = secure.bootstrap("SASL_PLAINTEXT")
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": ALICE_PASSWORD,
    }
    _confluent_round_trip(conf, "plain-topic")
    _kafka_python_round_trip(
        {
            "bootstrap_servers": bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "bob",
            "sasl_plain_password": "bob-secret",
        },
        "plain-topic-kp",
    )
    failed_before = secure.metric("groupcoord_failed_authentication_total")
    errors = _auth_errors({**conf, "sasl.password": "wrong"})
    assert any("Authentication failed: Invalid username or password" in e for e in errors), errors
    assert secure.metric("groupcoord_failed_authentication_total") > failed_before


def test_sasl_ssl_scram_sha_512_confluent_and_kafka_python(secure: Secure) -> None:
    _add_scram_user(
        secure.bootstrap("PLAINTEXT"), "carol", SCRAM_PASSWORD, ScramMechanism.SCRAM_SHA_512
    )
    bootstrap = secure.bootstrap("SASL_SSL")
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(secure.pki.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol",
        "sasl.password": SCRAM_PASSWORD,
    }
    _confluent_round_trip(conf, "scram-topic")
    _kafka_python_round_trip(
        {
            "bootstrap_servers": bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(secure.pki.ca),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "carol",
            "sasl_plain_password": SCRAM_PASSWORD,
        },
        "scram-topic-kp",
    )
    errors = _auth_errors({**conf, "sasl.password": "wrong"})
    expected = (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    assert any(expected in e for e in errors), errors
    # Stored salted: neither the password nor anything but salts and derived keys.
    stored = (secure.proc.data_dir / "scram_credentials.json").read_text()
    assert SCRAM_PASSWORD not in stored
    entry = json.loads(stored)["users"]["carol"]["SCRAM-SHA-512"]
    assert set(entry) == {"salt", "stored_key", "server_key", "iterations"}
    assert entry["iterations"] == 8192


def test_scram_credentials_survive_sigkill(secure: Secure) -> None:
    _add_scram_user(
        secure.bootstrap("PLAINTEXT"), "dave", SCRAM_PASSWORD, ScramMechanism.SCRAM_SHA_256
    )
    secure.proc.kill()  # right after the acknowledgement: no clean stop
    secure.proc.start()
    conf = {
        "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "dave",
        "sasl.password": SCRAM_PASSWORD,
    }
    producer = Producer(conf)
    producer.produce("after-kill", b"x")
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": secure.bootstrap("PLAINTEXT")})
    described = admin.describe_user_scram_credentials(["dave"])
    info = described["dave"].result(timeout=30)
    assert [(c.mechanism, c.iterations) for c in info.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]


def _tls_client(pki: Pki, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def _api_versions_over(sock: socket.socket) -> int:
    """Send ApiVersions v0 on `sock`; its error code."""
    body = request_class(18, 0)()
    sock.sendall(encode_request(18, 0, 7, body))
    size = struct.unpack(">i", _recv(sock, 4))[0]
    frame = _recv(sock, size)
    assert struct.unpack_from(">i", frame, 0)[0] == 7
    return int(struct.unpack_from(">h", frame, 4)[0])


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def test_mtls_refuses_a_client_without_certificate_and_names_the_subject(
    secure: Secure,
) -> None:
    host, port = "127.0.0.1", secure.ports["SSL"]
    # No certificate: the handshake fails (TLS 1.3 reports it on the first read).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with socket.create_connection((host, port), timeout=10) as raw:
            with _tls_client(secure.pki, None).wrap_socket(raw, server_hostname=host) as tls:
                _api_versions_over(tls)
    # A certificate of another CA: refused as well.
    other = make_pki(secure.pki.dir / "other", "other-ca")
    stranger = other.issue("stranger", "/CN=stranger")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with socket.create_connection((host, port), timeout=10) as raw:
            with _tls_client(secure.pki, stranger).wrap_socket(raw, server_hostname=host) as tls:
                _api_versions_over(tls)
    # With a certificate: served, its subject the principal (as Kafka's RFC 2253 string).
    alice = secure.pki.issue("alice", "/C=US/O=corp/OU=eng/CN=alice")
    with socket.create_connection((host, port), timeout=10) as raw:
        with _tls_client(secure.pki, alice).wrap_socket(raw, server_hostname=host) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert _api_versions_over(tls) == 0
    deadline = time.monotonic() + 10
    while "User:CN=alice,OU=eng,O=corp,C=US" not in secure.proc.log_path.read_text():
        assert time.monotonic() < deadline, secure.proc.log_tail()
        time.sleep(0.1)
    # confluent-kafka with its certificate: produce and consume over mutual TLS.
    _confluent_round_trip(
        {
            "bootstrap.servers": secure.bootstrap("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(secure.pki.ca),
            "ssl.certificate.location": str(alice[0]),
            "ssl.key.location": str(alice[1]),
        },
        "mtls-topic",
        count=5,
    )


def test_tls_versions_below_1_2_are_refused(secure: Secure) -> None:
    context = _tls_client(secure.pki, None)
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                pass


def test_sighup_reloads_the_certificate_without_dropping_connections(
    secure: Secure, server_cert: tuple[Path, Path]
) -> None:
    host, port = "127.0.0.1", secure.ports["SASL_SSL"]
    context = _tls_client(secure.pki, None)
    before = socket.create_connection((host, port), timeout=10)
    old = context.wrap_socket(before, server_hostname=host)
    first_serial = old.getpeercert()["serialNumber"]
    assert _api_versions_over(old) == 0
    # New certificate files in place of the old ones, then SIGHUP.
    cert, key = secure.pki.issue("server2", "/CN=localhost-renewed", server=True)
    os.replace(cert, server_cert[0])
    os.replace(key, server_cert[1])
    assert secure.proc.proc is not None
    os.killpg(secure.proc.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while True:
        with socket.create_connection((host, port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=host) as fresh:
                subject = dict(x[0] for x in fresh.getpeercert()["subject"])
                if subject["commonName"] == "localhost-renewed":
                    assert fresh.getpeercert()["serialNumber"] != first_serial
                    break
        assert time.monotonic() < deadline, secure.proc.log_tail()
        time.sleep(0.2)
    # The connection made before the reload is still served (its next step: the handshake).
    client = RawClient.__new__(RawClient)
    client.sock, client.correlation_id = old, 0
    assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
    old.close()
    # The server is still up (SIGHUP did not stop it).
    assert secure.proc.alive()


# raw-client checks of the authenticator ------------------------------------------------


def _sasl_request(client: RawClient, api_key: int, version: int, **fields: Any) -> Any:
    return client.request(api_key, version, request_class(api_key, version)(**fields))


def test_requests_before_authentication_close_the_connection(secure: Secure) -> None:
    bootstrap = secure.bootstrap("SASL_PLAINTEXT")
    with RawClient(bootstrap) as client:
        metadata = request_class(3, 1)(topics=None)
        client.send(encode_request(3, 1, 1, metadata))
        with pytest.raises(ConnectionError):
            client.recv_frame()
    # After a v1 handshake, a request other than SaslAuthenticate: its own error, closed.
    with RawClient(bootstrap) as client:
        answer = _sasl_request(client, 17, 1, mechanism="PLAIN")
        assert answer.error_code == 0
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        metadata = request_class(3, 4)(topics=None, allow_auto_topic_creation=False)
        response = client.request(3, 4, metadata)
        assert [b for b in response.brokers] == []
        with pytest.raises(ConnectionError):
            client.recv_frame()
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    with RawClient(bootstrap) as client:
        answer = _sasl_request(client, 17, 1, mechanism="GSSAPI")
        assert answer.error_code == 33
        assert "SCRAM-SHA-512" in answer.mechanisms
        with pytest.raises(ConnectionError):
            client.recv_frame()


def test_failed_authentication_answers_after_the_delay_then_closes(secure: Secure) -> None:
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as client:
        assert (
            _sasl_request(
                client, 18, 3, client_software_name="t", client_software_version="1"
            ).error_code
            == 0
        )
        assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
        started = time.monotonic()
        answer = _sasl_request(client, 36, 2, auth_bytes=b"\x00alice\x00nope")
        waited = time.monotonic() - started
        assert answer.error_code == 58
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert waited >= 0.09  # connection_failed_authentication_delay_ms (100) held it
        with pytest.raises(ConnectionError):
            client.recv_frame()


def test_plain_v0_handshake_raw_tokens(secure: Secure) -> None:
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as client:
        assert _sasl_request(client, 17, 0, mechanism="PLAIN").error_code == 0
        token = f"\x00alice\x00{ALICE_PASSWORD}".encode()
        client.send(struct.pack(">i", len(token)) + token)
        assert client.recv_frame() == b""  # PLAIN's success: an empty token
        metadata = request_class(3, 1)(topics=None)
        response = client.request(3, 1, metadata)
        assert [b.port for b in response.brokers] == [secure.ports["SASL_PLAINTEXT"]]


def _scram_login(
    client: RawClient, mechanism: str, user: str, password: str, version: int = 2
) -> Any:
    assert _sasl_request(client, 17, 1, mechanism=mechanism).error_code == 0
    scram = ScramClient(mechanism, user, password)
    first = _sasl_request(client, 36, version, auth_bytes=scram.first())
    assert first.error_code == 0, first
    final = _sasl_request(client, 36, version, auth_bytes=scram.final(first.auth_bytes))
    if final.error_code == 0:
        assert scram.verify(final.auth_bytes)
    return final


def test_scram_credential_apis_follow_kip_554(secure: Secure) -> None:
    with RawClient(secure.bootstrap("PLAINTEXT")) as client:
        alter = request_class(51, 0)
        mod = __import__(alter.__module__, fromlist=["x"])
        upsert = mod.ScramCredentialUpsertion
        delete = mod.ScramCredentialDeletion
        answer = client.request(
            51,
            0,
            alter(
                deletions=(delete(name="u1", mechanism=1), delete(name="u1", mechanism=1)),
                upsertions=(
                    upsert(
                        name="u2", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"
                    ),
                    upsert(
                        name="u2", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p"
                    ),
                    upsert(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"),
                    upsert(name="u3", mechanism=1, iterations=1, salt=b"s", salted_password=b"p"),
                    upsert(
                        name="u4", mechanism=10, iterations=4096, salt=b"s", salted_password=b"p"
                    ),
                    upsert(
                        name="u5", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p"
                    ),
                ),
            ),
        )
        results = {r.user: (r.error_code, r.error_message) for r in answer.results}
        assert results == {
            "u1": (92, "A user credential cannot be altered twice in the same request"),
            "u2": (92, "A user credential cannot be altered twice in the same request"),
            "": (93, "Username must not be empty"),
            "u3": (93, "Too few iterations"),
            "u4": (33, "Unknown SCRAM mechanism"),
            "u5": (0, None),
        }
        describe = request_class(50, 0)
        names = __import__(describe.__module__, fromlist=["x"]).UserName
        described = client.request(50, 0, describe(users=(names(name="u5"), names(name="nobody"))))
        by_user = {r.user: r for r in described.results}
        assert by_user["u5"].error_code == 0
        assert [(c.mechanism, c.iterations) for c in by_user["u5"].credential_infos] == [(2, 4096)]
        assert by_user["nobody"].error_code == 91
        gone = client.request(
            51, 0, alter(deletions=(delete(name="nobody", mechanism=2),), upsertions=())
        )
        assert [(r.user, r.error_code) for r in gone.results] == [("nobody", 91)]


def test_scram_raw_login_and_wrong_password(secure: Secure) -> None:
    _add_scram_user(
        secure.bootstrap("PLAINTEXT"), "erin", SCRAM_PASSWORD, ScramMechanism.SCRAM_SHA_256
    )
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as client:
        assert _scram_login(client, "SCRAM-SHA-256", "erin", SCRAM_PASSWORD).error_code == 0
        # Authenticated: SaslAuthenticate again is ILLEGAL_SASL_STATE, the connection stays.
        again = _sasl_request(client, 36, 2, auth_bytes=b"")
        assert again.error_code == 34
        assert _api_versions_over(client.sock) == 0
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as client:
        final = _scram_login(client, "SCRAM-SHA-256", "erin", "wrong")
        assert final.error_code == 58
        assert final.error_message == (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-256"
        )
        with pytest.raises(ConnectionError):
            client.recv_frame()
    # An unknown user fails at the first message with the same generic message.
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as client:
        assert _sasl_request(client, 17, 1, mechanism="SCRAM-SHA-256").error_code == 0
        first = _sasl_request(
            client, 36, 2, auth_bytes=ScramClient("SCRAM-SHA-256", "zed", "x").first()
        )
        assert first.error_code == 58
        assert "SASL mechanism SCRAM-SHA-256" in first.error_message


def test_listeners_advertise_their_own_addresses(tmp_path: Path) -> None:
    outside, inside = free_port(), free_port()
    with serving(
        tmp_path / "data",
        listeners=f"OUTSIDE://127.0.0.1:{outside},INSIDE://127.0.0.1:{inside}",
        listener_security_protocol_map="OUTSIDE:PLAINTEXT,INSIDE:PLAINTEXT",
        advertised_listeners="OUTSIDE://outside.example:19092",
    ) as proc:
        del proc
        seen = {}
        for port in (outside, inside):
            with RawClient(f"127.0.0.1:{port}") as client:
                metadata = client.request(
                    3,
                    12,
                    request_class(3, 12)(topics=None, include_topic_authorized_operations=False),
                )
                coordinator = client.request(
                    10, 4, request_class(10, 4)(key_type=0, coordinator_keys=("g",))
                )
                cluster = client.request(
                    60, 0, request_class(60, 0)(include_cluster_authorized_operations=False)
                )
                seen[port] = (
                    [(b.host, b.port) for b in metadata.brokers],
                    [(c.host, c.port) for c in coordinator.coordinators],
                    [(b.host, b.port) for b in cluster.brokers],
                )
        assert seen[outside] == ([("outside.example", 19092)],) * 3
        assert seen[inside] == ([("127.0.0.1", inside)],) * 3


def test_session_expires_without_reauthentication(tmp_path: Path) -> None:
    port = free_port()
    users = tmp_path / "users"
    users.write_text(f"alice:{ALICE_PASSWORD}\nbob:bob-secret\n")
    with serving(
        tmp_path / "data",
        listeners=f"SASL_PLAINTEXT://127.0.0.1:{port}",
        sasl_plain_users_file=users,
        connections_max_reauth_ms=1500,
    ):
        token = f"\x00alice\x00{ALICE_PASSWORD}".encode()
        with RawClient(f"127.0.0.1:{port}") as client:
            assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
            done = _sasl_request(client, 36, 2, auth_bytes=token)
            assert done.error_code == 0
            assert done.session_lifetime.total_seconds() * 1000 == 1500
            # Re-authenticate within the session (>1 s after the first start).
            time.sleep(1.1)
            assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
            redone = _sasl_request(client, 36, 2, auth_bytes=token)
            assert redone.error_code == 0 and redone.session_lifetime.total_seconds() == 1.5
            assert _api_versions_over(client.sock) == 0
            time.sleep(2.0)  # past the new session's end
            client.send(encode_request(18, 0, 9, request_class(18, 0)()))
            with pytest.raises(ConnectionError):
                client.recv_frame()
        # Re-authenticating as another user is refused, and closes the connection.
        with RawClient(f"127.0.0.1:{port}") as client:
            assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
            assert _sasl_request(client, 36, 2, auth_bytes=token).error_code == 0
            time.sleep(1.1)
            assert _sasl_request(client, 17, 1, mechanism="PLAIN").error_code == 0
            other = _sasl_request(client, 36, 2, auth_bytes=b"\x00bob\x00bob-secret")
            assert other.error_code == 58
            assert other.error_message == (
                "Cannot change principals during re-authentication from User:alice: User:bob"
            )
            with pytest.raises(ConnectionError):
                client.recv_frame()


def test_a_certificate_that_cannot_be_loaded_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(RuntimeError, match="exited with 1"):
        with serving(
            tmp_path / "data",
            listeners=f"SSL://127.0.0.1:{free_port()}",
            ssl_certificate_file=missing,
        ):
            pass
    log = (tmp_path / "data-server.log").read_text()
    assert "cannot start" in log and str(missing) in log
