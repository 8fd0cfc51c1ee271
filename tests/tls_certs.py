"""Test certificates made with the openssl command line: a CA, a server certificate for
127.0.0.1/localhost signed by it, and client certificates with chosen subjects (for TLS
client authentication). Keys are unencrypted PEM; everything lives under the given dir."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # CA certificate (the truststore of both sides)
    ca_key: Path

    def issue(
        self, name: str, subject: str, *, server: bool = False, days: int = 2, node: bool = False
    ) -> tuple[Path, Path]:
        """(certificate, key) of a new certificate for `subject` (openssl -subj form,
        e.g. /C=US/O=corp/OU=eng/CN=alice) signed by the CA; `server`: with the
        127.0.0.1/localhost names a client verifies; `node`: a server certificate that
        serves as a client's too (a cluster node's, for mutual TLS between nodes), with an
        EC P-256 key (made in milliseconds where RSA takes a second on a loaded machine)."""
        key = self.dir / f"{name}.key"
        csr = self.dir / f"{name}.csr"
        cert = self.dir / f"{name}.pem"
        _openssl(
            "req",
            "-new",
            "-newkey",
            "ec" if node else "rsa:2048",
            *(("-pkeyopt", "ec_paramgen_curve:prime256v1") if node else ()),
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            subject,
            cwd=self.dir,
        )
        ext = self.dir / f"{name}.ext"
        if server or node:
            usage = "serverAuth,clientAuth" if node else "serverAuth"
            ext.write_text(f"subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n")
        else:
            ext.write_text("extendedKeyUsage=clientAuth\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(self.ca),
            "-CAkey",
            str(self.ca_key),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            str(days),
            "-sha256",
            "-extfile",
            str(ext),
            cwd=self.dir,
        )
        return cert, key


def make_pki(directory: Path, ca_name: str = "groupcoord-test-ca") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = directory / "ca.key"
    ca = directory / "ca.pem"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        f"/CN={ca_name}",
        cwd=directory,
    )
    return Pki(directory, ca, ca_key)
