"""Where a float .tflite's difference from LiteRT comes from: a wrong op, or rounding grown over the
layers (issue 31, MediaPipe's pose_landmark_full). Three tables, on seeded standard-normal inputs:

1. every graph output's max abs error between each pair of LiteRT's default kernels (XNNPACK),
   LiteRT's reference kernels (``OpResolverType.BUILTIN_REF``), onnxruntime on the imported ONNX
   and the generated float C (x86-host, layer by layer), with the rtol=1e-4 tolerance beside;
2. each TFLite op's ONNX translation run alone in onnxruntime, fed the reference kernels' own
   tensors (``experimental_preserve_all_tensors``), against that op's reference output: the
   worst relative errors (max abs err / max|reference|);
3. each generated C kernel fed onnxruntime's inputs (``validate --per-kernel``'s isolated mode)
   against onnxruntime: the worst relative errors.

    PYTHONPATH=$PWD python benchmarks/tflite_float_spread.py MODEL.tflite [--seeds 10]

The imported ONNX names each node ``op<index>_<type>`` after the TFLite operator it translates
(frontends/tflite/graph.py); an op's group of nodes is cut out with ``onnx.utils.Extractor``.
Rank-4 tensors go from NHWC to NCHW where the ONNX value is NCHW.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import numpy as np


def _litert(path: Path, reference: bool, keep: bool = False):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from opfuse.measure.quiet import native_stderr_silenced

    kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference else {}
    with native_stderr_silenced():
        it = Interpreter(model_path=str(path), num_threads=1,
                         experimental_preserve_all_tensors=keep, **kw)
        it.allocate_tensors()
    return it


def _run(it, feeds: list[np.ndarray]) -> list[np.ndarray]:
    for d, a in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], a)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def _session(proto):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def outputs_table(path: Path, seeds: int) -> None:
    from opfuse.backends.c.emit import emit_c
    from opfuse.measure.run.host import CModel, build_shared
    from opfuse.pipeline import compile_model, read

    xnn, ref = _litert(path, False), _litert(path, True)
    sess = _session(read(path))
    details = xnn.get_input_details()
    names = [d["name"] for d in xnn.get_output_details()]
    with tempfile.TemporaryDirectory() as tmp:
        emit_c(compile_model(path, "x86-host"), Path(tmp), cascades=False)
        cmodel = CModel(build_shared(Path(tmp)))
        worst: dict[tuple[str, str], float] = {}
        largest = dict.fromkeys(names, 0.0)
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            feeds = [rng.standard_normal(d["shape"]).astype(np.float32) for d in details]
            runs = {"xnnpack": _run(xnn, feeds), "litert-ref": _run(ref, feeds),
                    "onnx": sess.run(None, {i.name: f for i, f in zip(sess.get_inputs(), feeds,
                                                                         strict=True)})}
            got = cmodel.run({d["name"]: f for d, f in zip(details, feeds, strict=True)})
            runs["c"] = [np.asarray(got[n]).reshape(runs["xnnpack"][k].shape)
                         for k, n in enumerate(names)]
            keys = list(runs)
            for k, name in enumerate(names):
                largest[name] = max(largest[name], float(np.abs(runs["xnnpack"][k]).max()))
                for i, a in enumerate(keys):
                    for b in keys[i + 1:]:
                        e = float(np.abs(runs[a][k].astype(np.float64) - runs[b][k]).max())
                        worst[(name, f"{a}~{b}")] = max(worst.get((name, f"{a}~{b}"), 0.0), e)
    pairs = sorted({p for _, p in worst})
    print(f"max abs err over seeds 0..{seeds - 1}; tol = 1e-4 + 1e-4 * max|xnnpack|")
    print(f"{'output':<12} {'tol':>9} " + " ".join(f"{p:>18}" for p in pairs))
    for name in names:
        tol = 1e-4 + 1e-4 * largest[name]
        print(f"{name[:12]:<12} {tol:9.3g} " + " ".join(f"{worst[(name, p)]:18.3g}" for p in pairs))


def _nchw(arr: np.ndarray, shape: list[int]) -> np.ndarray:
    if arr.ndim == 4 and list(arr.transpose(0, 3, 1, 2).shape) == list(shape):
        return arr.transpose(0, 3, 1, 2)
    return arr.reshape(shape)


def ops_table(path: Path, show: int) -> None:
    import onnx
    from onnx.utils import Extractor

    from opfuse.pipeline import read

    proto = onnx.shape_inference.infer_shapes(read(path))
    it = _litert(path, True, keep=True)
    feeds = [np.random.default_rng(0).standard_normal(d["shape"]).astype(np.float32)
             for d in it.get_input_details()]
    _run(it, feeds)
    ops = it._get_ops_details()
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*proto.graph.value_info, *proto.graph.input, *proto.graph.output)}
    inits = {t.name for t in proto.graph.initializer}
    groups: dict[int, list] = {}
    for node in proto.graph.node:
        m = re.match(r"op(\d+)_", node.name)
        groups.setdefault(int(m.group(1)) if m else -1, []).append(node)
    made_by = {o: g for g, nodes in groups.items() for n in nodes for o in n.output}
    readers: dict[str, set[int]] = {}
    for g, nodes in groups.items():
        for n in nodes:
            for i in n.input:
                readers.setdefault(i, set()).add(g)
    graph_outputs = {o.name for o in proto.graph.output}
    graph_inputs = [i.name for i in proto.graph.input if i.name not in inits]
    extractor = Extractor(proto)
    rows = []
    for g, nodes in sorted(groups.items()):
        made = {o for n in nodes for o in n.output}
        ins = sorted({i for n in nodes for i in n.input if i and i not in made and i not in inits})
        outs = [o for o in made if o in graph_outputs or readers.get(o, set()) - {g}]
        if g < 0 or not ins or len(outs) != 1:
            continue
        fed = {}
        for name in ins:
            source = made_by.get(name, -1)
            arr = (it.get_tensor(ops[source]["outputs"][0]) if source >= 0
                   else feeds[graph_inputs.index(name)] if name in graph_inputs else None)
            if arr is None:
                break
            fed[name] = _nchw(arr, shapes[name])
        if len(fed) != len(ins):
            continue
        got = _session(extractor.extract_model(ins, outs)).run(None, fed)[0]
        want = _nchw(it.get_tensor(ops[g]["outputs"][0]), list(got.shape))
        err = float(np.abs(got.astype(np.float64) - want).max())
        top = float(np.abs(want).max())
        rows.append((err / max(top, 1e-30), err, top, g, ops[g]["op_name"]))
    rows.sort(reverse=True)
    print(f"\n{len(rows)} TFLite ops, each translation alone in onnxruntime on the reference "
          "kernels' inputs; worst relative:")
    for rel, err, top, g, op in rows[:show]:
        print(f"  op {g:>4} {op:<20} rel {rel:9.3g}  abs {err:9.3g}  max|ref| {top:9.3g}")


def kernels_table(path: Path, show: int) -> None:
    from opfuse.measure.validate.per_kernel import per_kernel
    from opfuse.pipeline import compile_model

    with tempfile.TemporaryDirectory() as tmp:
        report = per_kernel(compile_model(path, "x86-host"), Path(tmp) / "c")
    rows = sorted(((k.max_rel_err, k.max_abs_err, k.index, "+".join(k.ops))
                   for k in report.kernels), reverse=True)
    print(f"\n{len(rows)} C kernels, each fed onnxruntime's inputs; worst relative:")
    for rel, err, index, ops in rows[:show]:
        print(f"  kernel {index:>4} {ops[:24]:<24} rel {rel:9.3g}  abs {err:9.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--show", type=int, default=5)
    args = parser.parse_args()
    outputs_table(args.model, args.seeds)
    ops_table(args.model, args.show)
    kernels_table(args.model, args.show)


if __name__ == "__main__":
    main()
