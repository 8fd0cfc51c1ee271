"""The Java client (kafka-clients 4.x) over SASL_SSL with SCRAM-SHA-512 against groupcoord:
produce, consume in a group, commit; a wrong password fails with Kafka's error."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.jvm.artifacts import JvmArtifactsMissing, classpath
from tests.jvm.java_programs import compiled, start_program
from tests.support import free_port, serving
from tests.tls_certs import make_pki

pytestmark = [pytest.mark.jvm]


@pytest.fixture(scope="module")
def classes() -> Path:
    try:
        classpath("clients")
    except JvmArtifactsMissing as exc:
        pytest.fail(f"JVM artifacts unavailable: {exc}", pytrace=False)
    return compiled()


def test_java_client_sasl_ssl_scram_sha_512(classes: Path, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cert, key = pki.issue("server", "/CN=localhost", server=True)
    plain, secure = free_port(), free_port()
    with serving(
        tmp_path / "data",
        listeners=f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
        ssl_certificate_file=cert,
        ssl_key_file=key,
    ):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        upsert = UserScramCredentialUpsertion(
            "java-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"java-pass"
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        args = [
            f"127.0.0.1:{secure}",
            "SCRAM-SHA-512",
            "java-user",
            "java-pass",
            str(pki.ca),
            "java-scram",
            "java-scram-group",
            "25",
        ]
        run = start_program(classes, "SaslScram", args, tmp_path / "logs", "sasl-scram").finish(180)
        run.assert_completed()
        assert run.one("produced")["count"] == 25
        assert run.one("consumed")["count"] == 25
        assert run.one("committed")["offset"] == 25
        failed = run.one("auth_failed")
        assert failed["class"] == "SaslAuthenticationException", failed
        assert failed["message"] == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            "mechanism SCRAM-SHA-512"
        )
