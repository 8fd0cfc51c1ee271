"""Accept benchmark: the server's own accept loop (coordinator/server/listener.py) against
uvloop's loop.create_server, which it replaced so that EMFILE is seen and logged.

    python tests/bench/bench_accept.py [--connections 3000] [--rounds 3]

Each round, a client process opens --connections connections one after the other, sends
one small request on each, reads the answer and closes (connection churn, the accept
path's worst case); the server side is a trivial protocol under uvloop. Peers alternate
within a round so machine noise hits both. Prints connections/s per peer and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import time

import uvloop

from groupcoord.coordinator.server.listener import Listener


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"x" * 16)


def _client(port: int, count: int, result: multiprocessing.Queue[float]) -> None:
    started = time.perf_counter()
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"ping")
            sock.recv(64)
    result.put(count / (time.perf_counter() - started))


async def _serve_and_measure(peer: str, count: int) -> float:
    if peer == "listener":
        listener = await Listener.start("127.0.0.1", 0, lambda _host: _Echo())
        port = listener.sockets[0].getsockname()[1]
        close = listener.close
    else:
        server = await asyncio.get_running_loop().create_server(_Echo, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        close = server.close
    result: multiprocessing.Queue[float] = multiprocessing.Queue()
    process = multiprocessing.Process(target=_client, args=(port, count, result))
    process.start()
    while process.is_alive():
        await asyncio.sleep(0.01)
    close()
    return result.get()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for round_ in range(args.rounds):
        rates = {
            peer: uvloop.run(_serve_and_measure(peer, args.connections))
            for peer in ("create_server", "listener")
        }
        print(
            f"round {round_ + 1}: create_server {rates['create_server']:.0f} conn/s, "
            f"listener {rates['listener']:.0f} conn/s, "
            f"ratio {rates['listener'] / rates['create_server']:.2f}"
        )


if __name__ == "__main__":
    main()
