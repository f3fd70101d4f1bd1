"""Write the conv models convrows.py's row nest was measured on (docs/measurements.md) into a
folder: three Conv + ReLU + pool chains for a target that fuses the pool (npu-generic), three convs
whose weights and bias are graph inputs.

    python benchmarks/conv_rows_models.py OUTDIR
    python benchmarks/c_revisions.py --base REV --target npu-generic OUTDIR/convpool_*.onnx
    python benchmarks/c_revisions.py --base REV OUTDIR/runtime_*.onnx
    python benchmarks/mcu_float.py --builds cortex-m4,cortex-m7 OUTDIR/runtime_*.onnx

``convpool_a``: 16 -> 32 channels 3x3 over 56x56, MaxPool 2x2/2; ``convpool_b``: 32 -> 64 over
28x28, MaxPool 3x3/2 padded (overlapping windows); ``convpool_c``: a 3-channel stem to 16 over
64x64, AveragePool 2x2/2. ``runtime_a``: 16 -> 32 channels in two groups, 3x3 stride 2 over 32x32;
``runtime_b``: 32 -> 32 3x3 over 28x28; ``runtime_c``: 64 -> 64 3x3 over 7x7 (short rows).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx_writer import float_value as _f
from onnx_writer import save as _save


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)

    def w(name: str, shape: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    pools = [("convpool_a", 16, 32, 56, "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
             ("convpool_b", 32, 64, 28, "MaxPool",
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
             ("convpool_c", 3, 16, 64, "AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2]))]
    for name, c, oc, hw, op, attrs in pools:
        _save(out, name, [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                          helper.make_node("Relu", ["c"], ["r"]),
                          helper.make_node(op, ["r"], ["y"], **attrs)],
              [_f("x", [1, c, hw, hw])], [w("w", [oc, c, 3, 3]), w("b", [oc])])
    runtime = [("runtime_a", 16, 32, 32, 2, 2), ("runtime_b", 32, 32, 28, 1, 1),
               ("runtime_c", 64, 64, 7, 1, 1)]
    for name, c, oc, hw, group, s in runtime:
        _save(out, name, [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                                           strides=[s, s], group=group),
                          helper.make_node("Relu", ["c"], ["y"])],
              [_f("x", [1, c, hw, hw]), _f("w", [oc, c // group, 3, 3]), _f("b", [oc])], [])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[3].strip())
    main(Path(sys.argv[1]))
