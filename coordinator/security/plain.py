"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: one message, `authzid NUL user NUL
password`, checked against the users of `sasl_plain_users_file` in constant time.

The users file holds one `USER:PASSWORD` per line (blank lines and lines starting with #
are skipped); it is what Kafka keeps in the JAAS options `user_<name>="<password>"`, in
plain text like them, so it must be readable by the server's user alone. Read at start and
again on SIGHUP."""

from __future__ import annotations

import hmac
from pathlib import Path

from .scram import SaslFailure

INVALID = "Authentication failed: Invalid username or password"


class PlainUsersError(ValueError):
    """The users file cannot be read or has a malformed line."""


def load_plain_users(path: str) -> dict[str, str]:
    """{user: password} from a users file ('' : no users). Raises PlainUsersError."""
    if not path:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PlainUsersError(f"cannot read sasl_plain_users_file {path}: {e}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        user, sep, password = stripped.partition(":")
        if not sep or not user:
            raise PlainUsersError(
                f"sasl_plain_users_file {path} line {number}: expected USER:PASSWORD"
            )
        users[user] = password
    return users


def authenticate_plain(token: bytes, users: dict[str, str]) -> str:
    """The user a PLAIN message authenticates, or SaslFailure with Kafka's message (sent
    verbatim: the same for an unknown user as for a wrong password)."""
    parts = token.decode("utf-8", "replace").split("\x00", 3)
    if len(parts) != 3:
        raise SaslFailure(
            "bad PLAIN message",
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}",
        )
    authzid, user, password = parts
    if not user:
        raise SaslFailure("no user", "Authentication failed: username not specified")
    if not password:
        raise SaslFailure("no password", "Authentication failed: password not specified")
    expected = users.get(user)
    # Compared even for an unknown user, so that the time taken does not say which it is.
    ok = hmac.compare_digest(
        password.encode(), (expected if expected is not None else "\x00" + password).encode()
    )
    if expected is None or not ok:
        raise SaslFailure(f"invalid credentials for {user!r}", INVALID)
    if authzid and authzid != user:
        raise SaslFailure(
            "authzid differs",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        )
    return user
