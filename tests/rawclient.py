"""A raw Kafka client built on the codec, for requests at exact versions that no client
library sends on demand (replaying Spark's sequence, fuzzing, KIP-814 JoinGroup v9)."""

from __future__ import annotations

import datetime
import socket
import struct
import sys
from typing import Any

from groupcoord.protocol.api import request_schema, response_schema
from groupcoord.protocol.client_codec import decode_response, encode_request

__all__ = ["RawClient", "delete_records", "encode_request", "request_class"]

_SIZE = struct.Struct(">i")


class RawClient:
    def __init__(self, bootstrap: str, timeout_s: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = _SIZE.unpack(self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and decode its response (response header v0/v1 handled)."""
        self.correlation_id += 1
        self.send(encode_request(api_key, version, self.correlation_id, body))
        correlation_id, value = decode_response(api_key, version, self.recv_frame())
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        return value

    def request_frame(self, api_key: int, version: int, body: Any) -> tuple[bytes, int]:
        """Send one request; its response frame and where the body starts in it (for
        responses kio cannot decode)."""
        self.correlation_id += 1
        self.send(encode_request(api_key, version, self.correlation_id, body))
        frame = self.recv_frame()
        correlation_id = struct.unpack_from(">i", frame, 0)[0]
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        pos = 4
        if response_schema(api_key, version).__flexible__ and api_key != 18:
            pos += 1  # empty tagged fields of response header v1
        return frame, pos


def request_class(api_key: int, version: int) -> Any:
    cls = request_schema(api_key, version)
    assert cls is not None
    return cls


def delete_records(bootstrap: str, topic: str, partition: int, offset: int = -1) -> tuple[int, int]:
    """DeleteRecords v2 of `topic`'s `partition` at `bootstrap` up to `offset` (-1: the high
    watermark): (low watermark, error code)."""
    m = sys.modules[request_class(21, 2).__module__]
    with RawClient(bootstrap) as client:
        response = client.request(
            21,
            2,
            m.DeleteRecordsRequest(
                topics=(
                    m.DeleteRecordsTopic(
                        name=topic,
                        partitions=(
                            m.DeleteRecordsPartition(partition_index=partition, offset=offset),
                        ),
                    ),
                ),
                timeout=datetime.timedelta(seconds=30),
            ),
        )
    answer = response.topics[0].partitions[0]
    return int(answer.low_watermark), int(answer.error_code)
