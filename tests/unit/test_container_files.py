"""The container files, read as the Docker engine reads them (the image itself is checked
end to end by deploy/docker-smoke.sh, which needs an engine): the final stage runs as a
non-root user with the data volume, both ports and a HEALTHCHECK on /health, and
.dockerignore leaves in the build context everything the Dockerfile copies."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from groupcoord.coordinator.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def _read(path: str) -> str:
    return (ROOT / path).read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_the_final_stage_runs_as_a_non_root_user_with_volume_ports_and_healthcheck() -> None:
    stage = dict(final_stage())  # each of these appears once in it
    assert stage["USER"] not in ("root", "0")
    assert "/var/lib/groupcoord/data" in stage["VOLUME"]
    assert set(stage["EXPOSE"].split()) == {"9092", "9464"}
    assert "/health" in stage["HEALTHCHECK"]
    assert "GROUPCOORD_DATA_DIR=/var/lib/groupcoord/data" in stage["ENV"]
    assert stage["ENTRYPOINT"] == '["groupcoord", "serve"]'


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        source
        for op, args in instructions()
        if op == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    ]
    assert copied, "the Dockerfile copies the sources"
    for source in copied:
        assert (ROOT / source).exists(), source
        ignored = [p for p in patterns if fnmatch.fnmatch(source, p.removeprefix("**/"))]
        assert not ignored, f"{source} is left out of the build context by {ignored}"
    # Local state stays out of the context (a .venv is hundreds of MB, .git is history).
    assert {".git", ".venv"} <= set(patterns)


def _image_environment() -> dict[str, str]:
    """The GROUPCOORD_* variables the final stage's ENV sets."""
    env = dict(final_stage())["ENV"]
    return dict(item.split("=", 1) for item in env.split())


def test_the_image_alone_refuses_to_advertise_its_wildcard_listener() -> None:
    """The image listens on 0.0.0.0: without an advertised listener the server must not start
    (clients would be told to connect to 0.0.0.0, i.e. to whatever serves on their own host)."""
    with pytest.raises(ConfigError, match="GROUPCOORD_ADVERTISED_LISTENER"):
        load_config(environ=_image_environment())


@pytest.mark.parametrize(
    "advertised",
    [
        # deploy/compose.yaml's environment.
        re.search(r"GROUPCOORD_ADVERTISED_LISTENER: (\S+)", _read("deploy/compose.yaml")),
        # deploy/docker-smoke.sh's `docker run -e`.
        re.search(
            r"-e GROUPCOORD_ADVERTISED_LISTENER=\"?([^\"\s]+)", _read("deploy/docker-smoke.sh")
        ),
        # The README's `docker run` example.
        re.search(r"-e GROUPCOORD_ADVERTISED_LISTENER=(\S+)", _read("README.md")),
    ],
    ids=["compose", "docker-smoke", "readme"],
)
def test_the_deploy_examples_start(advertised: re.Match[str] | None) -> None:
    assert advertised is not None, "the example sets GROUPCOORD_ADVERTISED_LISTENER"
    value = advertised.group(1).replace("$port", "19092")
    config = load_config(environ={**_image_environment(), "GROUPCOORD_ADVERTISED_LISTENER": value})
    assert config.advertised_address[0] not in ("0.0.0.0", "::", "")


def test_the_container_examples_publish_the_http_port_on_loopback_only() -> None:
    """The HTTP endpoint (metrics, the web page, its API) listens on every interface inside
    the container (the image's GROUPCOORD_METRICS_LISTEN), so the examples publish it on the
    host's loopback only: the Kafka port stays published as Kafka users expect."""
    readme_run = re.search(r"`docker run [^`]*`", _read("README.md"))
    assert readme_run is not None
    published = re.findall(r"-p (\S+)", readme_run.group(0))
    http = [p for p in published if p.endswith(":9464")]
    assert http == ["127.0.0.1:9464:9464"], published
    assert "9092:9092" in published
    compose = re.search(r"ports: \[([^\]]*9464[^\]]*)\]", _read("deploy/compose.yaml"))
    assert compose is not None and '"127.0.0.1:9464:9464"' in compose.group(1)
