"""serve --cluster: a node's local topics, ACLs and SCRAM credentials made equal to the
metadata store's image (cluster/metadata_sync.py, ClusterMetadata._apply), on a real topic
registry, ACL store and credentials file: topics missing here created with the image's
ids, topics it lacks deleted with their offsets, a name the image gives another id
replaced (its offsets kept: they are the new topic's), partitions grown, configs, ACLs
and credentials set and removed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace

import pytest

from groupcoord.coordinator.cluster.metadata_store import MetadataImage, TopicRecord
from groupcoord.coordinator.cluster.metadata_sync import ClusterMetadata
from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.security.acl_binding import AclBinding
from groupcoord.coordinator.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.acl_store import AclStore
from groupcoord.coordinator.security.credentials import ScramCredentialStore
from groupcoord.coordinator.security.scram import ScramCredential
from groupcoord.coordinator.security.standard_authorizer import StandardAuthorizer
from groupcoord.coordinator.topics.registry import TopicRegistry

ACL = AclBinding(
    ResourceType.TOPIC,
    "t",
    PatternType.LITERAL,
    "User:a",
    "*",
    AclOperation.READ,
    AclPermissionType.DENY,
)
CREDENTIAL = ScramCredential(b"salt", b"stored", b"server", 4096)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[ClusterMetadata, list[Mapping[str, uuid.UUID]]]]:
    config = load_config(overrides={"data_dir": str(tmp_path), "metrics_listen": ""}, environ={})
    registry = TopicRegistry(config)
    registry.load()
    acls = AclStore(tmp_path / "acls", StandardAuthorizer())
    acls.open(salvage=False)
    security = SimpleNamespace(acls=acls, scram=ScramCredentialStore(tmp_path / "scram.json"))
    deleted: list[Mapping[str, uuid.UUID]] = []
    yield ClusterMetadata("postgresql://unused", registry, security, deleted.append, 1), deleted
    acls.close()
    registry.close()


async def test_the_local_state_becomes_the_image(
    node: tuple[ClusterMetadata, list[Mapping[str, uuid.UUID]]],
) -> None:
    metadata, deleted = node
    registry = metadata.topics
    stale = await registry.create_in_steps("stale", 1, {})
    await registry.create_in_steps("replaced", 1, {})
    grown = await registry.create_in_steps("grown", 1, {"retention.ms": "1000"})
    new_id, replacing_id = uuid.uuid4(), uuid.uuid4()
    image = MetadataImage(
        version=3,
        cluster_id="c",
        topics={
            "replaced": TopicRecord("replaced", replacing_id, 2),
            "grown": TopicRecord("grown", grown.topic_id, 3),
            "new": TopicRecord("new", new_id, 2),
        },
        configs={"new": {"retention.ms": "5000"}},
        acls=frozenset({ACL}),
        credentials={("alice", "SCRAM-SHA-256"): CREDENTIAL},
    )
    assert await metadata._apply(image)
    assert registry.get("stale") is None
    # Only the topic the image lacks loses its offsets.
    assert deleted == [{"stale": stale.topic_id}]
    shown = {t.name: (t.topic_id, len(t.partitions), t.configs) for t in registry.topics()}
    assert shown == {
        "replaced": (replacing_id, 2, {}),
        "grown": (grown.topic_id, 3, {}),
        "new": (new_id, 2, {"retention.ms": "5000"}),
    }
    assert metadata.security.acls.authorizer.acls() == [ACL]
    assert metadata.security.scram.get("alice", "SCRAM-SHA-256") == CREDENTIAL
    # Applying it again changes nothing.
    assert await metadata._apply(image)
    assert deleted == [{"stale": stale.topic_id}]
    # An empty image empties the node.
    assert await metadata._apply(MetadataImage(version=4, cluster_id="c"))
    assert registry.topics() == []
    assert metadata.security.acls.authorizer.acls() == []
    assert metadata.security.scram.users() == []
