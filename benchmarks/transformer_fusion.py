"""Kernel counts of transformer exports per target, beside onnxruntime's ORT_ENABLE_ALL node count.

For each model: the nodes as imported, after canonicalization (GELU and RMSNorm written out become
one node each: passes/gelu.py, passes/rmsnorm.py), and the kernels of the fused partition per
target; then onnxruntime's node count after its ORT_ENABLE_ALL optimizer (the model it writes to
``SessionOptions.optimized_model_filepath``, one thread, CPU provider). The columns after the
kernel count say what the transformer fusions did there (docs/architecture.md, "Transformer
fusions"): GELU kernels and how many of them share an anchor's kernel, kernels ending in a norm
with the ops before it (the residual Add, on x86-host and mobile-gpu with the MatMul + bias before
that; the sum stored as a second output where the next residual reads it), norms left alone,
MatMul/Gemm kernels that took a bias Add, and MatMul/Gemm kernels without one.

    python benchmarks/transformer_fusion.py [--target T ...] [--random-bias] [MODEL.onnx ...]

``--random-bias``: the exports have random weights but Hugging Face initialises every Linear and
LayerNorm bias to zero, and canonicalization drops an Add of zeros, so no Linear keeps a bias to
fuse; this option first rewrites every all-zero 1-D initializer whose name ends in ``bias`` to
N(0, 0.02) (seed 0) in a temporary copy, as a trained model would have them.

With no MODEL, the ViT-tiny, keyword transformer, BERT-tiny and Llama-tiny exports of
``$OPFUSE_TRANSFORMERS`` (default ``transformer_models/``, what ``transformer_export.py transformer_models`` writes) that exist. Counts are deterministic; no timing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from opfuse.fusion import partition
from opfuse.fusion.transformer import LINEAR_OPS, NORM_OPS, is_anchor_bias
from opfuse.pipeline import c_support, compile_model
from opfuse.schedule import Partition
from opfuse.targets import load_target

MODELS21 = Path(os.environ.get("OPFUSE_TRANSFORMERS", "transformer_models"))
DEFAULT_MODELS = ("vit_tiny", "kws_transformer", "bert_tiny", "llama_tiny")
DEFAULT_TARGETS = ("x86-host", "mobile-gpu", "cortex-m7")


def ort_nodes(path: Path) -> int:
    """Nodes of the model onnxruntime runs after ORT_ENABLE_ALL."""
    with tempfile.TemporaryDirectory(prefix="opfuse-ort-") as tmp:
        out = Path(tmp) / "optimized.onnx"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = 1
        opts.optimized_model_filepath = str(out)
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return len(onnx.load(out).graph.node)


def fusion_counts(model, part: Partition) -> dict[str, int]:  # noqa: ANN001
    nodes = {n.name: n for n in model.graph}
    counts = dict.fromkeys(("gelu", "gelu_in_anchor", "add_norm", "norm", "bias", "linear"), 0)
    for kernel in part.kernels:
        members = [nodes[n] for n in kernel.nodes]
        ops = kernel.ops
        if "Gelu" in ops:
            counts["gelu"] += 1
            counts["gelu_in_anchor"] += any(op in LINEAR_OPS | {"Conv"} for op in ops)
        if ops[-1] in NORM_OPS:
            counts["add_norm" if len(ops) > 1 else "norm"] += 1
        if ops[0] in LINEAR_OPS:
            bias = len(members) > 1 and is_anchor_bias(members[0], members[1], members[0].outputs[0])
            counts["bias" if bias else "linear"] += 1
    return counts


def with_random_bias(path: Path, folder: Path) -> Path:
    """A copy of ``path`` whose all-zero 1-D ``*bias`` initializers are N(0, 0.02)."""
    model = onnx.load(path)
    gen = np.random.default_rng(0)
    for i, init in enumerate(model.graph.initializer):
        arr = numpy_helper.to_array(init)
        if init.name.endswith("bias") and arr.ndim == 1 and arr.dtype == np.float32 \
                and not arr.any():
            new = numpy_helper.from_array((gen.standard_normal(arr.shape) * 0.02)
                                          .astype(np.float32), init.name)
            model.graph.initializer[i].CopyFrom(new)
    out = folder / path.name
    onnx.save(model, out)
    return out


def row(path: Path, targets: list[str]) -> list[str]:
    imported = len(onnx.load(path).graph.node)
    ort_count = ort_nodes(path)
    result = compile_model(path, targets[0])
    lines = []
    for name in targets:
        target = load_target(name)
        part = result.partition if name == targets[0] else partition(
            result.optimized, target, support=c_support())
        c = fusion_counts(result.optimized, part)
        lines.append(
            f"{path.stem:<18} {name:<11} {imported:>8} {len(list(result.optimized.graph)):>9} "
            f"{len(part.kernels):>7} {ort_count:>5} {c['gelu']:>4} {c['gelu_in_anchor']:>5} "
            f"{c['add_norm']:>8} {c['norm']:>5} {c['bias']:>9} {c['linear']:>6}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--target", action="append", dest="targets")
    ap.add_argument("--random-bias", action="store_true",
                    help="give the zero Linear/LayerNorm biases random values first")
    args = ap.parse_args(argv)
    ort.set_default_logger_severity(3)  # the ENABLE_ALL serialization warning on every model
    targets = args.targets or list(DEFAULT_TARGETS)
    paths = args.models or [MODELS21 / f"{m}.onnx" for m in DEFAULT_MODELS
                            if (MODELS21 / f"{m}.onnx").is_file()]
    if not paths:
        print(f"no models: pass .onnx files or put the exports in {MODELS21}", file=sys.stderr)
        return 2
    print(f"onnxruntime {ort.__version__}; ORT = nodes after ORT_ENABLE_ALL (CPU provider)")
    if args.random_bias:
        print("biases: every all-zero 1-D '*bias' initializer set to N(0, 0.02), seed 0")
    print(f"{'model':<18} {'target':<11} {'imported':>8} {'canonical':>9} {'kernels':>7} "
          f"{'ORT':>5} {'gelu':>4} {'+anch':>5} {'add+norm':>8} {'norm':>5} {'lin+bias':>9} "
          f"{'linear':>6}")
    with tempfile.TemporaryDirectory(prefix="opfuse-bias-") as tmp:
        for path in paths:
            source = with_random_bias(path, Path(tmp)) if args.random_bias else path
            for line in row(source, targets):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
