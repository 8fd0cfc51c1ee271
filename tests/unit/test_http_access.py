"""The HTTP endpoint's access rules (observability/http_access.py) without a server: the
bearer token from a file or a setting, the open paths, refusals of unusable settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.observability.http_access import HttpAccess


def _access(tmp_path: Path, **settings: object) -> HttpAccess:
    return HttpAccess(load_config(overrides={"data_dir": str(tmp_path), **settings}, environ={}))


def test_without_a_token_everything_is_open(tmp_path: Path) -> None:
    access = _access(tmp_path)
    assert access.token is None and access.context is None
    assert access.allowed("/metrics", None)


def test_the_token_file_guards_all_but_health_and_the_page(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  s3cret-token\n")
    access = _access(tmp_path, http_auth_token_file=str(token_file))
    for path in ("/health", "/"):
        assert access.allowed(path, None)
    for path in ("/metrics", "/api/groups", "/api/groups/g/timeline"):
        assert not access.allowed(path, None)
        assert not access.allowed(path, b"Bearer s3cret")
        assert not access.allowed(path, b"Basic s3cret-token")
        assert access.allowed(path, b"Bearer s3cret-token")
        assert access.allowed(path, b"bearer  s3cret-token ")
    token_file.write_text("next")
    access.reload()
    assert access.allowed("/metrics", b"Bearer next")
    token_file.unlink()
    access.reload()  # an unreadable file: the token in use is kept
    assert access.allowed("/metrics", b"Bearer next")


def test_the_token_setting_and_its_absence_from_the_config_repr(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "http_auth_token": "Zq8-token-value",
            "ssl_key_password": "Wv3-key-password",
        },
        environ={},
    )
    assert HttpAccess(config).allowed("/metrics", b"Bearer Zq8-token-value")
    assert "Zq8-token-value" not in repr(config)
    assert "Wv3-key-password" not in repr(config)


def test_unusable_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="http_auth_token_file .* cannot be read"):
        _access(tmp_path, http_auth_token_file=str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        _access(tmp_path, http_auth_token_file=str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="http_tls needs ssl_certificate_file"):
        _access(tmp_path, http_tls=True)
    with pytest.raises(ConfigError, match="http_ssl_client_auth"):
        _access(tmp_path, http_ssl_client_auth="requested")
