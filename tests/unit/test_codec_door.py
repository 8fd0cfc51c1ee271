"""Byte-level codecs live in protocol/: no module outside it imports aiokafka (the record
batch codec) or kio (the API message codec); they use protocol/'s wrappers and re-exports
(protocol/batches.py, protocol/api.py)."""

from __future__ import annotations

import grimp

CODECS = ("aiokafka", "kio")


def test_only_protocol_imports_the_codec_libraries() -> None:
    # No on-disk cache: one left by an earlier checkout can outlive a merge.
    graph = grimp.build_graph(
        "groupcoord",
        include_external_packages=True,
        exclude_type_checking_imports=False,
        cache_dir=None,
    )
    outside = [
        m
        for m in graph.modules
        if m.startswith("groupcoord.") and not m.startswith("groupcoord.protocol")
    ]
    assert len(outside) > 50  # the symlinked packages were walked
    found = sorted(
        (module, imported)
        for module in outside
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] in CODECS
    )
    assert found == []
    # protocol/ does import them: the check would see an import if there were one.
    assert any(
        imported.split(".")[0] == "aiokafka"
        for imported in graph.find_modules_directly_imported_by("groupcoord.protocol.batches")
    )
