"""Write the ConvTranspose models convt.py's sub-pixel phases were measured on (docs/measurements.md)
into a folder: decoder upsamplings as they appear in segmentation, generative and audio models (no
model of ../shared/models has a ConvTranspose).

    python benchmarks/convt_models.py OUTDIR
    python benchmarks/c_revisions.py --base REV --march native OUTDIR/*.onnx
    python benchmarks/mcu_float.py --builds "cortex-m4,cortex-m55 MVE-F" OUTDIR/*.onnx

``unet_k2s2``: a U-Net decoder's 2x upsampling, 64 -> 32 channels 2x2 stride 2 from 16x16, ReLU;
``unet_k4s2p1``: pix2pix / DCGAN's 4x4 stride 2 pad 1, 64 -> 32 from 16x16, ReLU then the skip
connection's Add; ``audio_k16s8``: a MelGAN / EnCodec decoder's 1-D upsampling, 64 -> 32 channels
k=16 stride 8 pad 4 over 96 steps, LeakyRelu; ``fcn_up8_grouped``: FCN's 8x upsampling of 21
class scores as a grouped (one channel a group) k=16 stride 8 pad 4 from 8x8; ``grouped_k4s2``:
64 -> 64 channels in 4 groups, 4x4 stride 2 pad 1 from 12x12, with output_padding 1, Sigmoid.
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
    node = helper.make_node

    def w(name: str, shape: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    _save(out, "unet_k2s2", [node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2]),
                             node("Relu", ["c"], ["y"])],
          [_f("x", [1, 64, 16, 16])], [w("w", [64, 32, 2, 2]), w("b", [32])])
    _save(out, "unet_k4s2p1", [node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2],
                                    pads=[1, 1, 1, 1]),
                               node("Relu", ["c"], ["r"]), node("Add", ["r", "skip"], ["y"])],
          [_f("x", [1, 64, 16, 16]), _f("skip", [1, 32, 32, 32])],
          [w("w", [64, 32, 4, 4]), w("b", [32])])
    _save(out, "audio_k16s8", [node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[8],
                                    pads=[4, 4]),
                               node("LeakyRelu", ["c"], ["y"], alpha=0.2)],
          [_f("x", [1, 64, 96])], [w("w", [64, 32, 16]), w("b", [32])])
    _save(out, "fcn_up8_grouped", [node("ConvTranspose", ["x", "w"], ["y"], strides=[8, 8],
                                        pads=[4, 4, 4, 4], group=21)],
          [_f("x", [1, 21, 8, 8])], [w("w", [21, 1, 16, 16])])
    _save(out, "grouped_k4s2", [node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2],
                                     pads=[1, 1, 1, 1], group=4, output_padding=[1, 1]),
                                node("Sigmoid", ["c"], ["y"])],
          [_f("x", [1, 64, 12, 12])], [w("w", [64, 16, 4, 4]), w("b", [64])])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[3].strip())
    main(Path(sys.argv[1]))
