"""Which imported nodes a node stands for: kept in the node's metadata across rewrites."""

from __future__ import annotations

import onnx_ir as ir

SOURCES_KEY = "opfuse.sources"


def sources_of(node: ir.Node) -> list[str]:
    """Names of the imported nodes this node computes (itself when it was never rewritten)."""
    recorded = node.metadata_props.get(SOURCES_KEY)
    return recorded.split(",") if recorded else [node.name]


def source_map(model: ir.Model) -> dict[str, list[str]]:
    """Node name -> imported node names, for every node of the graph."""
    return {node.name: sources_of(node) for node in model.graph}
