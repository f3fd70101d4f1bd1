"""Per-kernel time of opfuse's C beside onnxruntime's per-node profile, one thread, one model.

    python benchmarks/kernels_vs_ort.py [--runs N] [--no-cascades] MODEL

The C is built with its kernel marks (``opfuse.measure.run.kernel_times.build_profiled``, ``-O3
-march=native``) and run ``N`` times; a kernel's time is the median of its mark-to-mark times.
onnxruntime (ORT_ENABLE_ALL, one thread) runs opfuse's optimized graph (``emit_onnx``: the nodes
carry opfuse's names; ORT's NCHWc convs are named after the output they write) ``N`` times
with ``SessionOptions.enable_profiling``; a node's time is the median of its ``_kernel_time``
events. Each opfuse kernel is set beside the sum of the ORT nodes named like its nodes or their
outputs; ORT
nodes of no kernel (its layout reorders) are summed on a line of their own. Printed: kernel,
C us, ORT us, C - ORT, C / ORT, the kernel's ops and output shape, then the sums; the lines
sorted by C - ORT, so where the C loses comes first. A finding tool (issue 28's light_resnet50
gap), not a gate: both sides run in the same process, alternating round by round.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import onnxruntime as ort

from opfuse.backends.c import emit_c
from opfuse.backends.onnx.emit import emit_onnx
from opfuse.measure.run.host import CModel
from opfuse.measure.run.kernel_times import MAX_MARKS, build_profiled
from opfuse.measure.sessions import one_thread_options
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from opfuse.safe_text import for_terminal


def _ort_session(result, tmp: Path) -> ort.InferenceSession:  # noqa: ANN001
    proto = emit_onnx(result.optimized, result.partition)
    opts = one_thread_options(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp / "ort_profile")
    return ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _ort_nodes(profile: Path, runs: int) -> dict[str, float]:
    """node name -> median us over its last ``runs`` kernel_time events."""
    per: dict[str, list[float]] = defaultdict(list)
    for event in json.loads(profile.read_text()):
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            per[name.removesuffix("_kernel_time").removesuffix("_nchwc")].append(
                float(event["dur"]))
    return {k: statistics.median(v[-runs:]) for k, v in per.items()}


def _shapes(node) -> str:  # noqa: ANN001
    """The first node's input shapes -> output shape."""
    if node is None:
        return ""
    ins = " ".join("x".join(map(str, v.shape)) for v in node.inputs if v is not None and v.shape)
    return f"{ins} -> {'x'.join(map(str, node.outputs[0].shape))}"


def compare(model: str, tmp: Path, runs: int, cascades: bool) -> list[str]:
    result = compile_model(model, "x86-host")
    emit_c(result, tmp / "c", cascades=cascades)
    feeds, _, _ = reference(model)
    c = CModel(build_profiled(tmp / "c"))
    entries = sorted(c.info.kernel_outputs, key=lambda e: e.index)
    marks = (ctypes.c_uint64 * MAX_MARKS).in_dll(c.lib, f"{c.prefix}_ktimer_marks")
    bound = c.bind(feeds)
    sess = _ort_session(result, tmp)
    ort_feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
    per: list[list[float]] = [[] for _ in entries]
    for r in range(runs + 1):
        for side in ("c", "ort") if r % 2 else ("ort", "c"):
            if side == "ort":
                sess.run(None, ort_feeds)
                continue
            c.write(bound)
            c.call(bound)
            row = marks[: len(entries) + 1]
            if r:
                for k in range(len(entries)):
                    per[k].append((row[k + 1] - row[k]) / 1e3)
    nodes = _ort_nodes(Path(sess.end_profiling()), runs)
    graph = {n.name: n for n in result.optimized.graph}
    outputs = {k: [v.name for v in n.outputs] for k, n in graph.items()}
    used: set[str] = set()
    rows = []
    for e, times in zip(entries, per, strict=True):
        names = {x for n in e.nodes for x in (n, *outputs.get(n, ()))}
        mine = [n for n in nodes if n in names]
        used.update(mine)
        a, b = statistics.median(times), sum(nodes[n] for n in mine)
        rows.append((a - b, f"  {e.index:3d} {a:9.1f} {b:9.1f} {a - b:+8.1f} "
                     f"{a / max(b, 1e-3):6.2f}x  {for_terminal('+'.join(e.ops))} "
                     f"{_shapes(graph.get(e.nodes[0]))}"))
    rest = sum(v for k, v in nodes.items() if k not in used)
    total_c = sum(statistics.median(t) for t in per)
    total_ort = sum(nodes.values())
    lines = [f"{for_terminal(Path(model).name)}: kernel, C us, ORT us, C - ORT, C / ORT, ops"]
    lines += [text for _, text in sorted(rows, key=lambda x: -x[0])]
    lines.append(f"  ORT nodes of no kernel (reorders...): {rest:.1f} us")
    lines.append(f"  sum {total_c:9.1f} {total_ort:9.1f} {total_c - total_ort:+8.1f} "
                 f"{total_c / max(total_ort, 1e-3):6.2f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an ONNX/TFLite path or a built-in name")
    parser.add_argument("--runs", type=int, default=30, help="runs of each side")
    parser.add_argument("--no-cascades", action="store_true", help="layer by layer")
    args = parser.parse_args()
    path = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    with tempfile.TemporaryDirectory(prefix="opfuse-kernels-ort-") as tmp_name:
        print("\n".join(compare(path, Path(tmp_name), args.runs, not args.no_cascades)))


if __name__ == "__main__":
    main()
