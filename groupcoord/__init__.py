"""groupcoord: a Kafka-protocol group coordinator with a durable single-node data plane.

The repository keeps its folders at the top (coordinator/, protocol/, storage/); they are
installed, and imported, as groupcoord.coordinator, groupcoord.protocol and
groupcoord.storage, so a user's environment gets one top-level name, not three generic ones
that other distributions also use (this folder links to them)."""
