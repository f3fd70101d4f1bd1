"""InstanceNormalization and GroupNormalization kernels (docs/architecture.md, "Transformer ops
in C").

Both normalize contiguous runs of an (N, C, spatial...) tensor: a group is ``C / G`` channels of
``S`` spatial elements each, so its ``C/G * S`` elements are one run (instance norm: G = C).
``y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c]`` with the biased variance of the run,
computed in two passes (mean, then squared deviations) as onnxruntime does, each pass with 8
partial sums so gcc vectorizes it without -ffast-math. GroupNormalization's scale and bias have
one entry per channel (opset 21) or per group (opset 18); either is read per channel here.

torch exports GroupNorm as Reshape -> InstanceNormalization (scale 1, bias 0, on the groups)
-> Reshape -> Mul -> Add; that chain runs as these kernels and the epilogue chain as it is.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, flit, who
from opfuse.backends.c.norms import sum8 as sum8
from opfuse.backends.c.tensors import Params
from opfuse.errors import OpfuseError


def emit_instance_norm(w: CWriter, node: ir.Node, params: Params) -> None:
    xs = dims(node.inputs[0], node)
    _emit(w, node, params, xs[1] if len(xs) > 1 else 1)


def emit_group_norm(w: CWriter, node: ir.Node, params: Params) -> None:
    groups = attr(node, "num_groups")
    if groups is None:
        raise OpfuseError(f"{who(node)}: GroupNormalization needs its num_groups attribute")
    _emit(w, node, params, int(groups))


def _emit(w: CWriter, node: ir.Node, params: Params, groups: int) -> None:
    xs = dims(node.inputs[0], node)
    if len(xs) < 2:
        raise OpfuseError(f"C backend: {who(node)}: its input needs a channel dim (N, C, ...)")
    batch, channels, spatial = xs[0], xs[1], math.prod(xs[2:])
    if groups <= 0 or channels % groups:
        raise OpfuseError(f"{who(node)}: {channels} channels do not split into {groups} groups")
    per = channels // groups
    run = per * spatial
    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    coef = [_per_channel(node, i, channels, groups, params) for i in (1, 2)]
    eps = flit(attr(node, "epsilon", 1e-5))
    w.open(f"for (int g = 0; g < {batch * groups}; ++g)")
    w(f"const float *xr = {x} + g*{run};")
    w(f"float *yr = {y} + g*{run};")
    w.open("")
    sum8(w, "sum", run, "xr[@]")
    w(f"const float mean = sum * {flit(1.0 / run)};")
    w.open("")
    sum8(w, "sq", run, "(xr[@] - mean) * (xr[@] - mean)")
    w(f"const float rstd = 1.0f / sqrtf(sq * {flit(1.0 / run)} + {eps});")
    w.open(f"for (int c = 0; c < {per}; ++c)")
    w(f"const int ch = (g % {groups})*{per} + c;")
    w(f"const float a = rstd * {coef[0]}, b = {coef[1]};")
    w(f"for (int s = 0; s < {spatial}; ++s) "
      f"yr[c*{spatial} + s] = (xr[c*{spatial} + s] - mean) * a + b;")
    w.close()
    w.close()
    w.close()
    w.close()


def _per_channel(node: ir.Node, index: int, channels: int, groups: int, params: Params) -> str:
    """The C expression of the scale (1) or bias (2) of channel ``ch``."""
    value = node.inputs[index] if len(node.inputs) > index else None
    if value is None:
        return "1.0f" if index == 1 else "0.0f"
    size = math.prod(dims(value, node))
    ptr = params.inp(value, node)
    if size == channels:
        return f"{ptr}[ch]"
    if size == groups:
        return f"{ptr}[ch / {channels // groups}]"
    if size == 1:
        return f"{ptr}[0]"
    raise OpfuseError(f"{who(node)}: its {'scale' if index == 1 else 'bias'} has {size} values "
                      f"for {channels} channels in {groups} groups")
