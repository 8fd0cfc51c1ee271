"""A PEP 517 build backend in a few lines of stdlib, so that pip installs this test package
offline and without setuptools (a fresh Python 3.12 venv has none): it packs the package's
module and the metadata pyproject.toml declares (name, version, entry points) into a wheel.
Only what pip needs to install from this directory: build_wheel."""

from __future__ import annotations

import base64
import hashlib
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
MODULES = ("groupcoord_test_assignor.py",)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    dist_info = f"{name}-{version}.dist-info"
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
        for group, points in project.get("entry-points", {}).items()
    )
    files = {module: (ROOT / module).read_bytes() for module in MODULES}
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {version}\n"
        f"Summary: {project.get('description', '')}\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: build_backend.py\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    files[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,", ""]).encode()
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return wheel_name


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
