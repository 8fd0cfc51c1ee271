"""The SCRAM credentials (KIP-554), persisted: one JSON file in the data directory,
`{"users": {user: {mechanism: {salt, stored_key, server_key, iterations}}}}` (bytes in
base64), rewritten atomically (temp file, fsync, rename, directory fsync) before an
AlterUserScramCredentials is answered, so an acknowledged change survives a crash. It
holds what Kafka's UserScramCredentialRecord holds: salts and derived keys, never a
password or a salted password."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields

from .scram import MECHANISMS, ScramCredential

USERS_MAX = 100_000  # a bound on what clients can make us store


class ScramCredentialStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def load(self) -> None:
        """Read the file; DataDirError naming it when it is unreadable or malformed."""
        data = read_json_file(self.path)
        if data is None:
            return
        users: dict[str, dict[str, ScramCredential]] = {}
        with state_file_fields(self.path):
            for user, mechanisms in data["users"].items():
                entry = {}
                for mechanism, fields in mechanisms.items():
                    if mechanism not in MECHANISMS:
                        raise ValueError(f"unknown mechanism {mechanism!r}")
                    entry[mechanism] = ScramCredential(
                        salt=base64.b64decode(fields["salt"]),
                        stored_key=base64.b64decode(fields["stored_key"]),
                        server_key=base64.b64decode(fields["server_key"]),
                        iterations=int(fields["iterations"]),
                    )
                users[str(user)] = entry
        self._users = users

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def mechanisms(self, user: str) -> dict[str, ScramCredential] | None:
        return self._users.get(user)

    def users(self) -> list[str]:
        return sorted(self._users)

    def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> None:
        """Upsert and delete (user, mechanism) credentials, then persist them all at once.
        Raises ValueError past USERS_MAX users, OSError when the file cannot be written
        (the change is then undone)."""
        before = {user: dict(m) for user, m in self._users.items()}
        for user, mechanism in deletions:
            entry = self._users.get(user)
            if entry is not None:
                entry.pop(mechanism, None)
                if not entry:
                    del self._users[user]
        for user, mechanism, credential in upserts:
            if user not in self._users and len(self._users) >= USERS_MAX:
                self._users = before
                raise ValueError(f"at most {USERS_MAX} users can have SCRAM credentials")
            self._users.setdefault(user, {})[mechanism] = credential
        try:
            self._persist()
        except OSError:
            self._users = before
            raise

    def _persist(self) -> None:
        def encode(c: ScramCredential) -> dict[str, object]:
            return {
                "salt": base64.b64encode(c.salt).decode(),
                "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(),
                "iterations": c.iterations,
            }

        payload = {
            "users": {
                user: {m: encode(c) for m, c in sorted(mechs.items())}
                for user, mechs in sorted(self._users.items())
            }
        }
        atomic_write(self.path, json.dumps(payload, sort_keys=True).encode())
