from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, serving


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data") as proc:
        yield proc


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
