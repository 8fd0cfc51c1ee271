"""Suite-wide pytest set-up: how pytest-xdist shares the default run between its workers.

pyproject's addopts run the suite on 2 workers (`-n 2 --dist loadgroup`): most of the suite
waits (on servers, session timeouts, JVMs) rather than computes, so two workers on two cores
nearly halve the wall time. The scheduler below keeps what must stay together together:

- every module is one unit, so a module-scoped fixture (a shared server) starts once per run,
  not once per worker;
- the modules that start JVMs (the reference Kafka broker, the Java clients, Spark) are one
  unit, run by one worker one after another, so no two JVM start-ups compete for the cores;
- units start longest first (the JVM unit, then the integration modules, then the rest), so
  the run does not end with one worker busy on a long module while the other idles.

An explicit `@pytest.mark.xdist_group("name")` still groups as xdist documents. `-n 0` runs
everything in one process, as before.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

# Test paths whose modules start JVMs (module-scoped reference Kafka, Spark, Java programs).
JVM_PATHS = ("tests/jvm/", "tests/conformance/")
JVM_UNIT = "jvm"
# Start order of the units: lower first; a unit's rank is that of its first matching prefix.
_RANKS = ((JVM_UNIT, 0), ("tests/integration/", 1), ("tests/property/", 2))
_OTHER_RANK = 3


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: its explicit xdist group, the JVM unit, or its module."""
    at = nodeid.rfind("@")
    if at > nodeid.rfind("]"):
        return nodeid[at + 1 :]
    path = nodeid.split("::", 1)[0]
    return JVM_UNIT if path.startswith(JVM_PATHS) else path


def _rank(unit: str) -> int:
    return next((rank for prefix, rank in _RANKS if unit.startswith(prefix)), _OTHER_RANK)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleUnits(LoadGroupScheduling):  # type: ignore[misc]
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the queue is complete at the first assignment
                units = sorted(self.workqueue.items(), key=lambda unit: _rank(unit[0]))
                self.workqueue = OrderedDict(units)
                self._ordered = True
            super()._assign_work_unit(node)

    return ModuleUnits(config, log)
