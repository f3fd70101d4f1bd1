"""Emit the canonicalized model as standard ONNX, with the kernel grouping recorded in metadata.

Where the grouping lives (both survive a save/load round trip and any ONNX tool ignores them):

* model ``metadata_props``: ``opfuse.kernels`` (JSON list, one object per kernel in schedule order:
  ``index``, ``name``, ``ops``, ``nodes`` (node names in the canonicalized model: names kept from the
  imported model where a node survived, new names for rewritten nodes), ``inputs``, ``outputs``,
  ``emitted`` (the node names in this file; differ from ``nodes`` only where ``--ort`` merged nodes
  into a FusedConv/FusedGemm) and, when given, ``sources`` (original node names)), ``opfuse.target``,
  ``opfuse.version``, ``opfuse.flavor`` (``onnx`` or ``ort``);
* every node's ``metadata_props``: ``opfuse.kernel`` (kernel name) and ``opfuse.kernel_index`` (its
  position in the list: names such as ``fused_conv_relu`` repeat, the index does not).

Node ``metadata_props`` need IR version 10; onnxruntime 1.20+ loads it, so we emit at least IR 10.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

import onnx
import onnx_ir as ir

from opfuse.backends.onnx.ort_fusion import MS_DOMAIN, fuse_for_ort
from opfuse.backends.onnx.qdq import expand_qdq, quant_map
from opfuse.errors import OpfuseError
from opfuse.ir.expand import expand_new_ops
from opfuse.quant import ONNX, ROUNDING
from opfuse.schedule import Partition

KERNELS_KEY = "opfuse.kernels"
TARGET_KEY = "opfuse.target"
VERSION_KEY = "opfuse.version"
FLAVOR_KEY = "opfuse.flavor"
NODE_KERNEL_KEY = "opfuse.kernel"
NODE_INDEX_KEY = "opfuse.kernel_index"
MIN_IR_VERSION = 10  # NodeProto.metadata_props


def _opfuse_version() -> str:
    try:
        return version("opfuse")
    except PackageNotFoundError:
        return "0+unknown"


def emit_onnx(
    model: ir.Model,
    partition: Partition,
    *,
    ort: bool = False,
    source_names: Mapping[str, Sequence[str]] | None = None,
) -> onnx.ModelProto:
    """``model`` as an ONNX ModelProto, every node stamped with its kernel; ``model`` is not changed.

    ``ort``: also merge Conv/Gemm kernels with their activation (and a residual Add) into
    onnxruntime's com.microsoft FusedConv/FusedGemm, so they run fused with its optimizer off.
    ``source_names``: node name -> the original node names it came from, recorded per kernel.
    """
    proto = ir.to_proto(model)
    proto.ir_version = max(proto.ir_version, MIN_IR_VERSION)
    proto.producer_name = "opfuse"
    proto.producer_version = _opfuse_version()
    kernel_of = _kernel_index(proto.graph, partition)
    expand_new_ops(proto, kernel_of)  # a Gelu / RMSNormalization the model's opset lacks
    annotated = quant_map(model)
    if annotated:
        if ort:
            raise OpfuseError(
                "--ort: FusedConv/FusedGemm are float kernels; a quantized model is emitted as QDQ "
                "ONNX without --ort (onnxruntime's ORT_ENABLE_ALL turns it into QLinear kernels)"
            )
        expand_qdq(proto.graph, annotated, kernel_of)
        _set_props(proto.metadata_props, {ROUNDING: str(model.meta.get(ROUNDING, ONNX))})
    if ort:
        fused = fuse_for_ort(proto.graph, kernel_of)
        if fused and not any(op.domain == MS_DOMAIN for op in proto.opset_import):
            proto.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))
    emitted: list[list[str]] = [[] for _ in partition.kernels]
    for node in proto.graph.node:
        index = kernel_of[node.name]
        emitted[index].append(node.name)
        _set_props(
            node.metadata_props,
            {NODE_KERNEL_KEY: partition.kernels[index].name, NODE_INDEX_KEY: str(index)},
        )
    kernels = []
    for index, kernel in enumerate(partition.kernels):
        entry = {
            "index": index,
            "name": kernel.name,
            "ops": list(kernel.ops),
            "nodes": list(kernel.nodes),
            "inputs": list(kernel.inputs),
            "outputs": list(kernel.outputs),
            "emitted": emitted[index],
        }
        if source_names is not None:
            entry["sources"] = sorted({s for n in kernel.nodes for s in source_names.get(n, (n,))})
        kernels.append(entry)
    _set_props(
        proto.metadata_props,
        {
            KERNELS_KEY: json.dumps(kernels, separators=(",", ":")),
            TARGET_KEY: partition.target,
            VERSION_KEY: _opfuse_version(),
            FLAVOR_KEY: "ort" if ort else "onnx",
        },
    )
    return proto


def read_kernels(proto: onnx.ModelProto) -> list[dict]:
    """The kernel list recorded by :func:`emit_onnx` (empty when the model has none)."""
    for prop in proto.metadata_props:
        if prop.key == KERNELS_KEY:
            return json.loads(prop.value)
    return []


def _kernel_index(graph: onnx.GraphProto, partition: Partition) -> dict[str, int]:
    """Node name -> kernel index; the partition must cover exactly the graph's nodes."""
    kernel_of: dict[str, int] = {}
    for index, kernel in enumerate(partition.kernels):
        for name in kernel.nodes:
            if name in kernel_of:
                raise OpfuseError(f"partition lists node '{name}' in two kernels")
            kernel_of[name] = index
    names = [node.name for node in graph.node]
    missing = [n for n in names if n not in kernel_of]
    unknown = sorted(set(kernel_of) - set(names))
    if missing or unknown:
        which = (
            f"node '{missing[0]}' is in no kernel"
            if missing
            else f"kernel node '{unknown[0]}' is not in the model"
        )
        raise OpfuseError(f"the partition for {partition.target} does not match the model: {which}")
    return kernel_of


def _set_props(props, values: dict[str, str]) -> None:
    """Set key/value entries of a repeated StringStringEntryProto, replacing old ones."""
    kept = [(p.key, p.value) for p in props if p.key not in values]
    del props[:]
    for key, value in [*kept, *values.items()]:
        entry = props.add()
        entry.key = key
        entry.value = value
