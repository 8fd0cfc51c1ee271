"""Regenerate the README's generated tables: `python -m tests.regen_readme`."""

from __future__ import annotations

from pathlib import Path

from groupcoord.coordinator.server.dispatch import markdown_table as api_table
from groupcoord.coordinator.settings_table import markdown_table as config_table

README = Path(__file__).resolve().parent.parent / "README.md"


def replace_table(text: str, header: str, table: str) -> str:
    start = text.index(header)
    end = text.find("\n\n", start)
    return text[:start] + table + text[end:]


def main() -> None:
    text = README.read_text()
    text = replace_table(text, "| API | key | versions | module | handler |", api_table())
    text = replace_table(text, "| setting (TOML key) |", config_table())
    README.write_text(text)


if __name__ == "__main__":
    main()
