"""A network namespace joined to the host by a veth pair, for network cut tests (issue 22:
"cut a node off (netns)"). Needs root (CAP_NET_ADMIN) and iproute2's `ip`; a container
that forbids either fails the test loudly, it never skips.

    with veth_namespace() as ns:
        ns.host_address    # 10.a.b.1, the host's end: listen here to be reachable from ns
        ns.inner_address   # 10.a.b.2, the namespace's end: a process in ns listens here
        ns.prefix          # ["ip", "netns", "exec", name]: run a command inside
        ns.cut()           # the namespace's end down: nothing crosses, either way
        ns.restore()       # up again

The cut is made inside the namespace (its end of the pair set down): the host's end stays
administratively up, so the host's address (where PostgreSQL and the other nodes listen)
stays usable on the host; packets between the two sides are lost, as on a broken network.
Cleanup always runs: every process still in the namespace is SIGKILLed (by pid) and the
namespace deleted, which deletes the pair.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


def ip(*args: str) -> str:
    """`ip args...`; a failure fails the test naming the command and ip's message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.fail(f"`ip {' '.join(args)}` failed (netns needs root): {done.stderr.strip()}")
    return done.stdout


@dataclass
class VethNamespace:
    name: str
    host_link: str
    inner_link: str
    host_address: str
    inner_address: str

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        ip("netns", "exec", self.name, "ip", "link", "set", self.inner_link, "down")

    def restore(self) -> None:
        ip("netns", "exec", self.name, "ip", "link", "set", self.inner_link, "up")

    def pids(self) -> list[int]:
        done = subprocess.run(
            ["ip", "netns", "pids", self.name], capture_output=True, text=True, timeout=30
        )
        return [int(p) for p in done.stdout.split()]


def _subnet() -> tuple[int, int]:
    """A /30 of 10.213.0.0/16 picked by this process id, so that test runs side by side
    (other worktrees) get different names and addresses."""
    pid = os.getpid()
    return (pid >> 6) & 0xFF, (pid & 0x3F) << 2


@contextlib.contextmanager
def veth_namespace() -> Iterator[VethNamespace]:
    third, base = _subnet()
    tag = f"{os.getpid() % 100000}"
    ns = VethNamespace(
        name=f"gc-{tag}",
        host_link=f"gch{tag}",
        inner_link=f"gcn{tag}",
        host_address=f"10.213.{third}.{base + 1}",
        inner_address=f"10.213.{third}.{base + 2}",
    )
    ip("netns", "add", ns.name)
    try:
        ip("link", "add", ns.host_link, "type", "veth", "peer", "name", ns.inner_link)
        ip("link", "set", ns.inner_link, "netns", ns.name)
        ip("addr", "add", f"{ns.host_address}/30", "dev", ns.host_link)
        ip("link", "set", ns.host_link, "up")
        inside = ("netns", "exec", ns.name, "ip")
        ip(*inside, "addr", "add", f"{ns.inner_address}/30", "dev", ns.inner_link)
        ip(*inside, "link", "set", ns.inner_link, "up")
        ip(*inside, "link", "set", "lo", "up")
        yield ns
    finally:
        for pid in ns.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", ns.host_link], capture_output=True, timeout=30)
