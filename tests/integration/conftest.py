from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, serving


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server with default settings for a whole module (see `server`)."""
    with serving(tmp_path_factory.mktemp("module-server") / "data") as proc:
        yield proc


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A started server with default settings. A fresh one per test, unless the test (or its
    module's `pytestmark`) carries `@pytest.mark.shared_server`: then the module's one server
    (`module_server`), which saves a start-up per test. Share only in tests that neither stop
    nor restart the server and whose topics, groups and transactional ids are their own, so
    they pass in any order next to the module's other tests; a shared server that dies fails
    the test that killed it."""
    if request.node.get_closest_marker("shared_server") is None:
        with serving(tmp_path / "data") as proc:
            yield proc
        return
    shared: ServerProcess = request.getfixturevalue("module_server")
    assert shared.alive(), f"the module's shared server is down: {shared.log_tail()}"
    yield shared
    assert shared.alive(), "a test using the shared server stopped it: give it its own `server`"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
