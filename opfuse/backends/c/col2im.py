"""Col2Im (ONNX opset 18; torch's ``nn.Fold``, in MobileViTV2 exports): sliding blocks summed
back into an image (docs/architecture.md, "Col2Im in C").

The input is ``[N, C * prod(block), L]``: for each of the ``L`` block positions of the grid
``L_d = floor((image_d + pad_begin_d + pad_end_d - dilation_d * (block_d - 1) - 1) / stride_d)
+ 1``, one column of ``C`` blocks. Entry ``(c, k, b)`` (block offset ``k``, block position
``b``, both in row-major order over the spatial dims) is added to image element
``b_d * stride_d + k_d * dilation_d - pad_begin_d`` of channel ``c``; entries that land in the
padding are dropped.

The kernel zeroes the output, then per channel and per block offset ``k`` adds its row of ``L``
entries, looping only over the block positions whose element lies inside the image: the first
and last such position of each spatial dim and offset are tables computed when the C is
generated (``_ranges``), so the loops test nothing. The innermost loop walks the last spatial
dim, contiguous in the input and ``stride`` apart in the output (vectorized by gcc at stride 1).
The summation order is onnxruntime's (column by column), so sums agree to rounding.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, contiguous, dims, need_const, who
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError


def _geometry(node: ir.Node) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(image, block, strides, dilations, pads) of a Col2Im node, checked against its input."""
    image = [int(v) for v in need_const(node, 1, "image_shape").reshape(-1)]
    block = [int(v) for v in need_const(node, 2, "block_shape").reshape(-1)]
    rank = len(image)
    strides = [int(v) for v in attr(node, "strides", [1] * rank)]
    dilations = [int(v) for v in attr(node, "dilations", [1] * rank)]
    pads = [int(v) for v in attr(node, "pads", [0] * 2 * rank)]
    if rank == 0 or len(block) != rank or len(strides) != rank or len(dilations) != rank \
            or len(pads) != 2 * rank:
        raise OpfuseError(f"C backend: {who(node)}: image_shape {image}, block_shape {block}, "
                          f"strides {strides}, dilations {dilations} and pads {pads} do not "
                          "describe one spatial rank")
    for name, values, low in (("image_shape", image, 1), ("block_shape", block, 1),
                              ("strides", strides, 1), ("dilations", dilations, 1),
                              ("pads", pads, 0)):
        if any(v < low for v in values):
            raise OpfuseError(f"C backend: {who(node)}: {name} {values} must be >= {low}")
    return image, block, strides, dilations, pads


def block_grid(node: ir.Node) -> list[int]:
    """The number of block positions along each spatial dim (``L_d`` of the module docstring)."""
    image, block, strides, dilations, pads = _geometry(node)
    rank = len(image)
    grid = [(image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1)
            // strides[d] + 1 for d in range(rank)]
    if any(n < 1 for n in grid):
        raise OpfuseError(f"C backend: {who(node)}: block_shape {block} with dilations "
                          f"{dilations} does not fit image_shape {image} padded by {pads}")
    return grid


def _ranges(size: int, blocks: int, block: int, stride: int, dilation: int,
            pad: int) -> tuple[list[int], list[int]]:
    """Per block offset ``k``, the first and one past the last block position ``b`` whose
    element ``b * stride + k * dilation - pad`` lies in ``[0, size)`` (first = last when none)."""
    first, last = [], []
    for k in range(block):
        shift = k * dilation - pad
        lo = max(0, -(shift // stride) if shift < 0 else 0)  # ceil(-shift / stride)
        hi = min(blocks, (size - 1 - shift) // stride + 1 if size - 1 - shift >= 0 else 0)
        first.append(lo)
        last.append(max(lo, hi))
    return first, last


def emit_col2im(w: CWriter, node: ir.Node, params: Params) -> None:
    image, block, strides, dilations, pads = _geometry(node)
    grid = block_grid(node)
    rank = len(image)
    xs, ys = dims(node.inputs[0], node), dims(node.outputs[0], node)
    kernel, blocks = math.prod(block), math.prod(grid)
    if len(xs) != 3 or xs[1] % kernel or xs[2] != blocks:
        raise OpfuseError(f"C backend: {who(node)}: input {list(xs)} is not [N, C x {kernel}, "
                          f"{blocks}] for blocks {block} on a {grid} grid")
    batch, channels = xs[0], xs[1] // kernel
    if list(ys) != [batch, channels, *image]:
        raise OpfuseError(f"C backend: {who(node)}: output {list(ys)} is not "
                          f"{[batch, channels, *image]}")
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    plane = math.prod(image)
    if batch * channels == 0:
        return
    image_st, grid_st, block_st = contiguous(image), contiguous(grid), contiguous(block)
    for d in range(rank):
        first, last = _ranges(image[d], grid[d], block[d], strides[d], dilations[d], pads[d])
        w(f"static const int first{d}[{block[d]}] = {{{', '.join(map(str, first))}}};")
        w(f"static const int last{d}[{block[d]}] = {{{', '.join(map(str, last))}}};")
    w(f"memset({y}, 0, {batch * channels * plane * 4}u);")
    w.open(f"for (int nc = 0; nc < {batch * channels}; ++nc)")
    w(f"const float *xc = {x} + nc*{kernel * blocks};")
    w(f"float *yc = {y} + nc*{plane};")
    for d in range(rank):
        w.open(f"for (int k{d} = 0; k{d} < {block[d]}; ++k{d})")
    krow = " + ".join(f"k{d}*{block_st[d]}" for d in range(rank))
    w(f"const float *xk = xc + ({krow})*{blocks};")
    # the element of block position b: sum over d of (b_d*stride_d + k_d*dilation_d - pad_d) * st_d
    shift = " + ".join(f"(k{d}*{dilations[d]} - {pads[d]})*{image_st[d]}" for d in range(rank))
    w(f"const int yk = {shift};")
    for d in range(rank):
        w(f"for (int b{d} = first{d}[k{d}]; b{d} < last{d}[k{d}]; ++b{d})")
    y_at = " + ".join(f"b{d}*{strides[d] * image_st[d]}" for d in range(rank))
    x_at = " + ".join(f"b{d}*{grid_st[d]}" for d in range(rank))
    w(f"    yc[yk + {y_at}] += xk[{x_at}];")
    for _ in range(rank):
        w.close()
    w.close()
