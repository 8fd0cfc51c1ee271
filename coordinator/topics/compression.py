"""compression.type on Produce, as Kafka's LogValidator applies it: 'producer' stores each
batch as sent; any other value stores the batch with that codec, recompressing a batch the
producer sent with a different one (at the topic's compression.<codec>.level). Offsets are
stamped on the stored batch as for any other; control batches are stored as sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from groupcoord.protocol.batch_rewrite import recompress_batch
from groupcoord.protocol.batches import BatchHeader, parse_header

from .configs import COMPRESSION_CODECS, PRODUCER_COMPRESSION
from .views import TopicView

if TYPE_CHECKING:
    from ..config import Config

# The level config of each codec that has one; gzip's -1 is zlib's default.
_LEVEL_CONFIGS = {
    1: "compression.gzip.level",
    3: "compression.lz4.level",
    4: "compression.zstd.level",
}


@dataclass(frozen=True, slots=True)
class CompressionPolicy:
    codec: int  # the record batch codec (attributes bits 0-2) batches are stored with
    level: int | None  # None: the codec's default

    @classmethod
    def of(cls, topic: TopicView, config: Config) -> CompressionPolicy | None:
        """The topic's policy; None for 'producer' (batches are stored as sent)."""
        wanted = topic.config_value("compression.type", config)
        if wanted == PRODUCER_COMPRESSION:
            return None
        codec = COMPRESSION_CODECS[wanted]
        level_config = _LEVEL_CONFIGS.get(codec)
        level = int(topic.config_value(level_config, config)) if level_config else None
        return cls(codec, None if level == -1 else level)

    def apply(self, batch: bytearray, header: BatchHeader) -> tuple[bytearray, BatchHeader]:
        """`batch` (one whole batch) stored with this codec, and its header. Raises
        InvalidBatch when its records cannot be decompressed."""
        if header.compression == self.codec or header.is_control:
            return batch, header
        out = recompress_batch(header, batch, self.codec, self.level)
        return out, parse_header(out)
