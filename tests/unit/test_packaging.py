"""What a user's environment gets from `pip install groupcoord`: one top-level package,
`groupcoord` (coordinator, protocol and storage under it), never top-level `protocol`,
`storage` or `coordinator`, which other distributions also install; and the package data
the record codec reads at import (Kafka's coordinator-record schemas)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    # Built from a copy (links kept as links): setuptools writes build/ into the tree.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "tests", "build", "*.egg-info", "data"),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        timeout=240,
    )
    (wheel,) = wheels.glob("groupcoord-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"groupcoord"}
    for package in ("coordinator", "protocol", "storage"):
        assert f"groupcoord/{package}/__init__.py" in names
    assert "groupcoord/protocol/schemas/OffsetCommitValue.json" in names
    assert "groupcoord/coordinator/groups/shard.py" in names

    # Installed alone into a directory, run from elsewhere: the record codec finds its
    # schemas, the CLI entry point resolves, and the generic names are not importable.
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-t", str(target), str(wheel)],
        check=True,
        timeout=240,
    )
    probe = (
        "import importlib.util, groupcoord.protocol.records as r, groupcoord.coordinator.cli;"
        "print(r.__file__);"
        "print([n for n in ('protocol', 'storage', 'coordinator')"
        " if importlib.util.find_spec(n) is not None])"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0].startswith(str(target))
    assert out[1] == "[]"


def test_requires_python_admits_the_versions_the_suite_passes_on() -> None:
    """3.11, 3.12 (Ubuntu 24.04 has no 3.11) and 3.13 (Debian 13), each also a classifier."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    admitted = SpecifierSet(project["requires-python"])
    for version in ("3.11", "3.12", "3.13"):
        assert admitted.contains(f"{version}.0"), version
        assert f"Programming Language :: Python :: {version}" in project["classifiers"]
