"""One scenario run against groupcoord and against the reference Kafka, failing together."""

from __future__ import annotations

from collections.abc import Callable


def on_both(targets: dict[str, str], scenario: Callable[[str, str], None]) -> None:
    """Runs `scenario(target, bootstrap)` on each broker; fails naming every one that failed
    (so a failure on groupcoord also says whether Kafka passed the same checks)."""
    failures = {}
    for name, bootstrap in targets.items():
        try:
            scenario(name, bootstrap)
        except AssertionError as exc:
            failures[name] = str(exc)
    passed = sorted(set(targets) - set(failures))
    assert not failures, f"failed on {sorted(failures)} (passed on {passed}):\n" + "\n".join(
        f"--- {name}: {why}" for name, why in failures.items()
    )
