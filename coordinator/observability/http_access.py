"""Who may read the HTTP endpoint: an optional bearer token, optional TLS (HTTPS).

Token: `http_auth_token_file` (its content, surrounding whitespace stripped) or
`http_auth_token`. Every request but GET /health (probes: Kubernetes' httpGet and the
image's HEALTHCHECK carry no token) and the page's static GET / (no data: its script asks
for the token when the API answers 401) must carry `Authorization: Bearer <token>`,
compared in constant time (hmac.compare_digest). The token is never logged, served or
echoed in an error. SIGHUP re-reads the file and the certificate; on a failure the ones in
use are kept.

TLS: the Kafka listeners' certificate and key (security/tls.py's server context), with
client certificates required when `http_ssl_client_auth` is required."""

from __future__ import annotations

import hmac
import ssl
from pathlib import Path

from ..config import Config, ConfigError
from ..security.tls import TlsConfigError, TlsSettings, server_context
from .logging import get_logger

log = get_logger("groupcoord.http")

# Paths answered without a token (see the module docstring).
OPEN_PATHS = frozenset({"/health", "/"})


def read_token(config: Config) -> bytes | None:
    """The token required, or None for none; ConfigError when the file cannot be read or
    holds no token (naming the file, never its content)."""
    if config.http_auth_token_file:
        try:
            text = Path(config.http_auth_token_file).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                f"http_auth_token_file {config.http_auth_token_file}: cannot be read "
                f"({type(e).__name__})"
            ) from None
        token = text.strip()
        if not token:
            raise ConfigError(f"http_auth_token_file {config.http_auth_token_file} is empty")
        return token.encode()
    return config.http_auth_token.strip().encode() or None


def tls_context(config: Config) -> ssl.SSLContext | None:
    """The HTTPS context (None without http_tls); TlsConfigError when a file is unusable."""
    if not config.http_tls:
        return None
    settings = TlsSettings(
        certificate_file=config.ssl_certificate_file,
        key_file=config.ssl_key_file,
        key_password=config.ssl_key_password,
        truststore_file=config.ssl_truststore_file,
        client_auth=config.http_ssl_client_auth,
        enabled_protocols=config.ssl_enabled_protocols,
    )
    return server_context(settings)


class HttpAccess:
    """The endpoint's current token and TLS context (replaced whole by `reload`)."""

    def __init__(self, config: Config) -> None:
        """Raises ConfigError / TlsConfigError: the server refuses to start."""
        self.config = config
        self.token = read_token(config)
        self.context = tls_context(config)

    def allowed(self, path: str, authorization: bytes | None) -> bool:
        """Whether a request for `path` with this Authorization header value may be
        answered."""
        token = self.token
        if token is None or path in OPEN_PATHS:
            return True
        if authorization is None:
            return False
        scheme, _, given = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(given.strip(), token)

    def reload(self) -> None:
        """SIGHUP: re-read the token file and the certificate."""
        try:
            token = read_token(self.config)
            context = tls_context(self.config)
        except (ConfigError, TlsConfigError) as e:
            log.error(
                "HTTP endpoint reload failed: keeping the token and certificate", error=str(e)
            )
            return
        self.token = token
        self.context = context
