"""Wire bytes stay as recorded: the session of tests/wire_session.py (every served version
of every group API, the fast-path shapes and the main error paths) played against a fresh
server, each normalized response compared byte for byte with tests/data/wire_session.json,
recorded at b4ab69d, before issue 15's refactor. A mismatch prints the response's decoded
fields that differ. Re-recording the fixture means the wire changed: justify it."""

from __future__ import annotations

from pathlib import Path

from tests.support import serving
from tests.wire_session import SERVER_SETTINGS, load, mismatches, play


def test_every_response_is_byte_for_byte_the_recorded_one(tmp_path: Path) -> None:
    expected = load()
    with serving(tmp_path / "data", **SERVER_SETTINGS) as server:
        got = play(server.bootstrap)
    problems = mismatches(expected, got)
    assert not problems, f"{len(problems)} of {len(expected)} responses differ:\n\n" + "\n\n".join(
        problems
    )
