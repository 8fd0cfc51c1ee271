"""The settings described (name, default, help) for `serve --help` and the README's
configuration table (`python -m groupcoord.coordinator.settings_table`)."""

from __future__ import annotations

import dataclasses

from .config import ENV_PREFIX, Config


def describe_settings() -> list[tuple[str, str, str]]:
    """(name, default, help) of every setting, for --help and the README."""
    return [
        (f.name, repr(f.default), f.metadata.get("help", "")) for f in dataclasses.fields(Config)
    ]


def markdown_table() -> str:
    """The README's configuration reference (`python -m groupcoord.coordinator.settings_table`)."""
    rows = [
        "| setting (TOML key) | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, default, text in describe_settings():
        rows.append(f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | `{default}` | {text} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
