"""How far onnxruntime's two executions of a QDQ ONNX model are apart on this CPU, in quantization
steps of the output: ORT_ENABLE_ALL (QLinear int8 kernels, chosen by the CPU's instruction set)
against ORT_DISABLE_ALL (QuantizeLinear / DequantizeLinear around float ops: the ONNX definition,
the reference tests/test_c_int8_onnx.py asserts against).

    PYTHONPATH=$PWD python benchmarks/qdq_reference_cpu.py --write /tmp/qdq      # here: quantize
    PYTHONPATH=$PWD python benchmarks/qdq_reference_cpu.py --read /tmp/qdq       # compare, save
    qemu-x86_64 -cpu Haswell $(which python3) benchmarks/qdq_reference_cpu.py --read /tmp/qdq

The last line runs onnxruntime as an AVX2 CPU without AVX-512 or VNNI would (apt-get install
qemu-user); ``--read`` prints each model's ENABLE_ALL distance and whether its DISABLE_ALL outputs
equal the ones saved by the first ``--read`` (the file ``disable_all.npz``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CASES = ("conv", "depthwise_s2", "gemm", "many_ops")


def write(folder: Path) -> None:
    sys.path.insert(0, str(REPO))
    from tests.helpers.qdq_cases import CASES as BUILDERS
    from tests.helpers.quant import quantize

    for case in CASES:
        (folder / case).mkdir(parents=True, exist_ok=True)
        quantize(BUILDERS[case](), folder / case, "qdq", per_channel=True, samples=8)


def _session(path: Path, level):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def read(folder: Path) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    saved_path = folder / "disable_all.npz"
    saved = dict(np.load(saved_path)) if saved_path.is_file() else {}
    outputs = {}
    for case in CASES:
        path = folder / case / "qdq_int8.onnx"
        model = onnx.load(path)
        inits = {i.name: i for i in model.graph.initializer}
        dq = next(n for n in model.graph.node if model.graph.output[0].name in n.output)
        scale = float(numpy_helper.to_array(inits[dq.input[1]]).reshape(-1)[0])
        fast = _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        ref = _session(path, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        x = model.graph.input[0]
        dims = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
        worst, outs = 0.0, []
        for seed in range(5):
            feed = {x.name: np.random.default_rng(seed).standard_normal(dims).astype(np.float32)}
            a, b = fast.run(None, feed)[0], ref.run(None, feed)[0]
            worst = max(worst, float(np.abs(a - b).max()) / scale)
            outs.append(b)
        outputs[case] = np.stack(outs)
        same = "" if case not in saved else \
            f"; DISABLE_ALL {'equals' if np.array_equal(saved[case], outputs[case]) else 'differs from'} the saved run"
        print(f"{case}: ENABLE_ALL vs DISABLE_ALL {worst:.0f} steps{same}")
    if not saved:
        np.savez(saved_path, **outputs)
    print(f"onnxruntime {ort.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="quantize the test models into this folder")
    group.add_argument("--read", type=Path, help="compare the two executions of those models")
    args = parser.parse_args()
    write(args.write) if args.write else read(args.read)


if __name__ == "__main__":
    main()
