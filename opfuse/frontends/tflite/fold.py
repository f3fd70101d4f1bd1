"""Ops whose inputs are all constants are evaluated at import, in TFLite's own (NHWC) terms:
shape arithmetic (SHAPE, STRIDED_SLICE, PACK...), fp16 weights behind DEQUANTIZE, and DENSIFY of
sparse weights. No runtime executes them per inference, so "before" does not count them either
(docs/architecture.md, the frontends' row).
"""

from __future__ import annotations

import math

import numpy as np

from opfuse.frontends.limits import refuse, refuse_expansion
from opfuse.frontends.tflite.graph import Graph
from opfuse.frontends.tflite.reader import Operator
from opfuse.frontends.tflite.tables import Sparsity


def _dequantize(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    q = g.tensor(op.inputs[0]).quant
    if x.dtype.kind in "iu" and q is not None:
        axis = g.quant_axis(op.inputs[0], q)
        shape = [1] * x.ndim
        if axis is not None:
            shape[axis] = -1
        scale = q.scale.reshape(shape) if axis is not None else q.scale[0]
        zero = q.zero_point.reshape(shape) if axis is not None else q.zero_point[0]
        return ((x.astype(np.float64) - zero) * scale).astype(np.float32)
    return x.astype(np.float32)


def _strided_slice(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    x, begin, end, strides = args[0], *(np.ravel(a).astype(np.int64) for a in args[1:4])
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask():
        g.fail("STRIDED_SLICE with ellipsis or new-axis masks is not folded")
    index: list = []
    for axis in range(x.ndim):
        if axis >= begin.size:
            index.append(slice(None))
            continue
        b = None if o.BeginMask() >> axis & 1 else int(begin[axis])
        e = None if o.EndMask() >> axis & 1 else int(end[axis])
        if o.ShrinkAxisMask() >> axis & 1:
            index.append(int(begin[axis]))
        else:
            index.append(slice(b, e, int(strides[axis])))
    return np.asarray(x[tuple(index)])


def _pack(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return np.stack(args, axis=int(op.options.Axis()))


def _concat(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(args, axis=int(op.options.Axis()))


def _reshape(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return args[0].reshape(g.shape(op.outputs[0]))


def _transpose(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(args[0].transpose(np.ravel(args[1]).astype(int)))


def _cast(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return args[0].astype(g.tensor(op.outputs[0]).dtype)


def _gather(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    return np.take(args[0], args[1].astype(np.int64), axis=int(op.options.Axis()))


def _arith(fn):
    def fold(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
        return fn(args[0], args[1]).astype(g.tensor(op.outputs[0]).dtype)

    return fold


def _densify(g: Graph, op: Operator, args: list[np.ndarray]) -> np.ndarray:
    t = g.tensor(op.inputs[0])
    return densify(t.data, t.sparsity, g.shape(op.outputs[0]))


def densify(values: np.ndarray, sparsity: Sparsity, shape: tuple[int, ...]) -> np.ndarray:
    """Expand TFLite's sparse format: a walk over ``traversal_order``, where a DENSE level counts
    its ``dense_size`` and a SPARSE_CSR level reads segments and indices; block dimensions
    (``block_map``) refine the dimension they split."""
    rank = len(shape)
    order, block_map, levels = sparsity.traversal_order, sparsity.block_map, sparsity.levels
    block_size = {block_map[i]: levels[rank + i].dense_size for i in range(len(block_map))}
    dense = np.zeros(shape, dtype=values.dtype)
    walk: list[tuple[int, int, list[int]]] = [(0, 0, [])]
    while walk:
        level, position, idx = walk.pop()
        if level == len(order):
            coords = [0] * rank
            for t, d in enumerate(order):
                if d < rank:
                    coords[d] += idx[t] * block_size.get(d, 1)
                else:
                    coords[block_map[d - rank]] += idx[t]
            dense[tuple(coords)] = values[position]
            continue
        md = levels[level]
        if md.dense:
            size = md.dense_size
            walk.extend((level + 1, position * size + i, idx + [i]) for i in range(size))
        else:
            seg, ind = md.segments, md.indices
            walk.extend((level + 1, k, idx + [int(ind[k])])
                        for k in range(int(seg[position]), int(seg[position + 1])))
    return dense


FOLDERS = {
    "DEQUANTIZE": _dequantize,
    "STRIDED_SLICE": _strided_slice,
    "PACK": _pack,
    "CONCATENATION": _concat,
    "RESHAPE": _reshape,
    "SQUEEZE": _reshape,
    "EXPAND_DIMS": _reshape,
    "TRANSPOSE": _transpose,
    "CAST": _cast,
    "GATHER": _gather,
    "ADD": _arith(np.add),
    "SUB": _arith(np.subtract),
    "MUL": _arith(np.multiply),
    "DENSIFY": _densify,
}


def try_fold(g: Graph, op: Operator) -> bool:
    """Evaluate ``op`` when its inputs are constants (SHAPE: when its input's shape is static).
    Quantized values fold only through ops that move data, never through arithmetic."""
    if op.opcode == "SHAPE":
        out = g.tensor(op.outputs[0])
        g.consts[op.outputs[0]] = np.asarray(g.shape(op.inputs[0]), dtype=out.dtype)
        return True
    if op.opcode not in FOLDERS or len(op.outputs) != 1:
        return False
    if op.opcode == "DENSIFY":
        if g.tensor(op.inputs[0]).data is None:
            return False
    elif not all(i in g.consts for i in op.inputs if i >= 0):
        return False
    out = g.tensor(op.outputs[0])
    moves_data = op.opcode in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "GATHER",
                               "DENSIFY", "PACK", "CONCATENATION", "STRIDED_SLICE")
    if g.quant(op.outputs[0]) is not None and not moves_data:
        return False
    args = [g.consts[i] for i in op.inputs if i >= 0 and i in g.consts]
    _guard(g, op, out, _fold_elements(g, op, args))
    result = np.asarray(FOLDERS[op.opcode](g, op, args))
    if out.shape and result.size == int(np.prod(out.shape)):
        result = result.reshape(out.shape)
    g.consts[op.outputs[0]] = result.astype(out.dtype, copy=False)
    return True


def _fold_elements(g: Graph, op: Operator, args: list[np.ndarray]) -> int:
    """Elements folding ``op`` allocates, from its constant inputs, before it is evaluated: a
    broadcast of two vectors is their product, a concatenation of N references to one tensor N of
    it, a densified tensor its declared shape; the other folds move or convert their input."""
    code = op.opcode
    if code in ("ADD", "SUB", "MUL"):
        return math.prod(np.broadcast_shapes(*(np.shape(a) for a in args[:2])))
    if code in ("PACK", "CONCATENATION"):
        return sum(int(np.size(a)) for a in args)
    if code == "GATHER":
        params = args[0]
        axis = int(op.options.Axis()) % max(params.ndim, 1)
        return int(np.size(args[1])) * (params.size // max(params.shape[axis], 1) if params.ndim else 1)
    if code == "DENSIFY":
        return math.prod(g.shape(op.outputs[0]))
    return max((int(np.size(a)) for a in args), default=0)


def _guard(g: Graph, op: Operator, out, elements: int) -> None:
    """The constant and expansion limits (opfuse/frontends/limits.py) on one fold and on all the
    folds of the file so far, against the file's own bytes."""
    size = elements * max(out.dtype.itemsize, 1)
    what = f"{g.model.path}: operator {op.index} ({op.opcode}) folds into constant '{out.name}'"
    refuse(f"{what}, which", size, "constant")
    g.folded_bytes += size
    refuse_expansion(f"{what}; the folds so far", g.folded_bytes, g.file_bytes)
