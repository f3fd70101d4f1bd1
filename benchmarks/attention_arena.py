"""Peak arena and kernel counts with the attention core streamed by query rows vs stored scores.

    python benchmarks/attention_arena.py [--targets x86-host,cortex-m7] [--no-validate]
                                         [--silu-what-if] [MODEL ...]

For each model (default: the transformer exports in ``$OPFUSE_TRANSFORMERS`` (default ``transformer_models/``, written by ``transformer_export.py``)) and target, the same
compile run twice in one process: "stored" is the target with ``[fusion] attention = false`` (the
scores and probabilities are arena tensors, as before), "streamed" the target as shipped
(``opfuse/fusion/attention.py``). Printed side by side: kernels, attention kernels, the peak arena
(greedy plan) and its ratio, and the most bytes live at one attention step (the Softmax kernel's
step when stored, the attention kernel's when streamed), which is what streaming removes even
where the model's peak lies elsewhere (MobileViT's is in its convolutional stem).

Then ``validate --backend c`` (x86-host): the whole model where the C covers its ops, and, always,
the first attention core cut out of the canonicalized model (``onnx.utils.extract_model``: its
Q, Kt / K, V and mask as inputs) compiled to C and compared with onnxruntime. Arena figures are deterministic (no
timing), so they do not depend on the CPU.

``--silu-what-if`` first rewrites every ``Mul(x, Sigmoid(x))`` whose Sigmoid has no other reader
into one ``HardSwish(x)``: another activation of the same fusion class, the stand-in for a SiLU
epilogue measured before canonicalization had one (the Conv's output read twice kept MobileViT's
stem conv stored, ``multiple_consumers``). ``fuse_swish`` (``opfuse/passes/swish.py``) now makes
the same rewrite into ``Swish``, so the what-if leaves the figures as they are. Arena and kernel
figures only; the numbers differ, so no validation.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir

import opfuse
from opfuse.analysis import analyze
from opfuse.errors import OpfuseError
from opfuse.memory import peak_step
from opfuse.memory.inplace import merged_buffers
from opfuse.targets import load_target

FOLDER = Path(os.environ.get("OPFUSE_TRANSFORMERS", "transformer_models"))
MODELS = ("vit_tiny", "mobilevit", "mobilevit_dynamo", "kws_transformer")


def silu_as_one_op(source: Path, out: Path) -> Path:
    """``source`` with each single-reader ``Mul(x, Sigmoid(x))`` as ``HardSwish(x)`` (docstring)."""
    model = onnx.load(source)
    graph = model.graph
    made = {o: n for n in graph.node for o in n.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    dropped, swapped = set(), {}
    for node in graph.node:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        for x, s in (node.input, reversed(node.input)):
            p = made.get(s)
            if p is not None and p.op_type == "Sigmoid" and p.input[0] == x and readers[s] == 1:
                dropped.add(id(p))
                swapped[id(node)] = onnx.helper.make_node("HardSwish", [x], list(node.output),
                                                          name=node.name)
                break
    nodes = [swapped.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.save(model, out)
    return out


def _stored(target: str):
    t = load_target(target)
    return dataclasses.replace(t, fusion=dataclasses.replace(t.fusion, attention=False))


def _live(plan, steps: list[int]) -> int:
    """The most aligned bytes live at one of ``steps`` (aliased tensors once)."""
    buffers = merged_buffers(plan.tensors, plan.aliases)
    return max((sum(b.size for b in buffers if b.first <= s <= b.last) for s in steps), default=0)


def side(path: Path, target) -> dict:
    result = opfuse.compile(path, target)
    part = result.partition
    plan = analyze(result).after.plan
    softmax = {n.name for n in result.optimized.graph if n.op_type == "Softmax"}
    steps = [i for i, k in enumerate(part.kernels) if softmax & set(k.nodes)]
    return {"result": result, "kernels": len(part.kernels),
            "attention": sum(k.name.startswith("attention") for k in part.kernels),
            "peak": plan.peak_bytes, "at_attention": _live(plan, steps),
            "peak_kernel": part.kernels[peak_step(plan).step].name}


def _mb(n: int) -> str:
    return f"{n / 2**20:8.2f}"


def first_core(result, out: Path) -> Path | None:
    """The first attention kernel's nodes as a model of their own, cut from the canonicalized
    model (whose value names the kernel uses)."""
    kernel = next((k for k in result.partition.kernels if k.name.startswith("attention")), None)
    if kernel is None:
        return None
    whole = out.with_name(out.stem + "_whole.onnx")
    onnx.save(ir.serde.serialize_model(result.optimized), whole)
    consts = {v.name for v in result.optimized.graph.initializers.values()}
    inputs = [v for v in kernel.inputs if v not in consts]
    onnx.utils.extract_model(str(whole), str(out), inputs, list(kernel.outputs), check_model=False)
    return out


def validate(path: Path, streamed: dict, tmp: Path) -> str:
    try:
        whole = opfuse.validate_c(path, "x86-host")
        text = f"model {'match' if whole.ok else 'MISMATCH'}"
    except OpfuseError as exc:  # an op the C does not cover yet (Gather, ...): say which
        text = "model: " + str(exc).split(";")[0].removeprefix("C backend: ")
    try:
        core = first_core(streamed["result"], tmp / f"{path.stem}_core.onnx")
    except Exception as exc:  # noqa: BLE001  (a graph onnx cannot cut between these names)
        return f"{text}; core not extracted ({type(exc).__name__}: {str(exc)[:80]})"
    if core is None:
        return text
    report = opfuse.validate_c(core, "x86-host")
    err = max(o.max_abs_err / max(o.max_ref, 1e-30) for o in report.outputs)
    return f"{text}; first core {'match' if report.ok else 'MISMATCH'} (rel err {err:.1e})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--targets", default="x86-host,cortex-m7")
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--silu-what-if", action="store_true",
                        help="SiLU as one activation (HardSwish stands in); implies --no-validate")
    args = parser.parse_args()
    print(f"{'model':<22}{'target':<11}{'kernels':>15}{'attn':>6}{'peak MiB':>20}{'x':>7}"
          f"{'at attention MiB':>22}{'x':>7}  peak kernel (streamed)")
    print(f"{'':<33}{'stored  streamed':>16}{'':>6}{'stored  streamed':>20}{'':>7}"
          f"{'stored  streamed':>22}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = Path(name) if name.endswith(".onnx") else FOLDER / f"{name}.onnx"
            if not path.is_file():
                print(f"{name:<22}missing ({path})")
                continue
            if args.silu_what_if:
                path = silu_as_one_op(path, Path(tmp) / path.name)
            streamed = None
            for target in args.targets.split(","):
                off, on = side(path, _stored(target)), side(path, target)
                streamed = on if target == "x86-host" else streamed or on
                print(f"{path.stem:<22}{target:<11}{off['kernels']:>7}{on['kernels']:>8}"
                      f"{on['attention']:>6}{_mb(off['peak'])}  {_mb(on['peak'])}"
                      f"{off['peak'] / on['peak']:>7.2f}{_mb(off['at_attention']):>14}"
                      f"{_mb(on['at_attention'])}"
                      f"{off['at_attention'] / max(on['at_attention'], 1):>7.2f}  "
                      f"{on['peak_kernel']}")
            if not (args.no_validate or args.silu_what_if) and streamed is not None:
                print(f"{'':<22}validate --backend c (x86-host): "
                      f"{validate(path, streamed, Path(tmp))}")


if __name__ == "__main__":
    main()
