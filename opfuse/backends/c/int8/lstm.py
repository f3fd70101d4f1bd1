"""The int8 LSTM: TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM as TFLite Micro computes it
(``lstm_eval``: int8 input and hidden state, int8 weights, int32 gate biases, int16 gate values
and cell state), bit-exact (docs/architecture.md, "Recurrent kernels in C").

The node is the ONNX LSTM the TFLite frontend writes (frontends/tflite/ops_lstm.py) after the
QDQ fold: X int8 ``[T, B, I]``, W ``[1, 4H, I]`` and R ``[1, 4H, H]`` int8 in ONNX's gate order
(i, o, f, c), one scale per gate, B int32 ``[1, 8H]`` (the recurrent half zero), Y int8
``[T, 1, B, H]`` on the hidden state's parameters, and the int16 cell state's scale (a power of
two) in the node's metadata. Per batch entry, state zeroed (h at its zero point), per step and
gate ``j``:

- ``a = requant(sum w (x - z_x) + bias, s_x s_w / 2^-12)`` and ``r = requant(sum r (h - z_h),
  s_h s_r / 2^-12)``, each saturated to int16, and their saturated sum: the gate's input in
  Q3.12; the zero points' products are folded into the sums' start values at generation time
  (the same integers);
- sigmoid (i, f, o) or tanh (c) of it in Q0.15, by TFLite's int16 table interpolation: the
  input times 3, its magnitude split into a table index (bits 9+ for sigmoid, 8+ for tanh) and
  the fraction that interpolates between two entries of ``SIGMOID_TABLE``, then the sign;
- ``c = sat16(requant(f c, 2^-15)) + sat16(requant(i g, 2^-30 / s_c))``, saturated;
- ``h = sat8(z_h + requant(tanh_c(c) o, 2^-30 / s_h))``, where tanh of the cell state takes
  its scale 2^p as an input multiplier: 3 << (p + 12) (p >= -12), else 3 and a rounding right
  shift by -(p + 12).
``requant`` is TFLite's MultiplyByQuantizedMultiplier (``opfuse_requant``), every multiplier
computed in double as TFLite's Prepare does. The products are the ISA's int8 row product
(``IsaKernels.dot``: SMLAD pairs on Cortex-M4/M7, the portable loop elsewhere), exact in int32.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from opfuse.backends.c.cgen import CWriter, attr, dims, need_const, who
from opfuse.backends.c.ctype import INT8, INT32
from opfuse.backends.c.int8.common import quant, rounding
from opfuse.backends.c.isa import kernels
from opfuse.backends.c.tensors import Params
from opfuse.errors import Unsupported
from opfuse.quant import LSTM_CELL_SCALE, TFLITE, quantize_multiplier

GATE_IN = 2.0 ** -12  # a gate's input: Q3.12
GATE_OUT = 2.0 ** -15  # a gate's output: Q0.15
ONNX_GATES = ("i", "o", "f", "c")

# TFLite's table of sigmoid(k / 24) in unsigned 0.16 (kernels/internal/common.h,
# sigmoid_table_uint16): the published values, which rounding 65536 * sigmoid(k / 24) gives at
# 212 of the 256 entries (the others are one more); bit-exactness needs these very numbers.
SIGMOID_TABLE = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794,
    41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443,
    48964, 49475, 49975, 50464, 50942, 51409, 51865, 52311, 52745, 53169, 53581, 53983, 54374,
    54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433, 57724, 58007, 58280, 58544,
    58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110, 61279,
    61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990,
    63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030,
    64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652,
    64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019,
    65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234,
    65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360,
    65367, 65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433,
    65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476,
    65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498, 65500, 65501,
    65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516,
    65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529,
    65529, 65530, 65530, 65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532,
    65532, 65532, 65532, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65534, 65534,
    65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
)


def _mult(real: float) -> str:
    m, s = quantize_multiplier(real)
    return f"{m}, {s}"


def cell_scale(node: ir.Node) -> float:
    """The int16 cell state's scale, a power of two; a refusal when the LSTM is not TFLite's."""
    text = node.metadata_props.get(LSTM_CELL_SCALE)
    if text is None:
        raise Unsupported(f"C backend: {who(node)}: an int8 LSTM has a C kernel only as "
                          "TFLite's UNIDIRECTIONAL_SEQUENCE_LSTM (its int16 cell state's scale)")
    scale = float(text)
    if not (scale > 0 and math.isfinite(scale)) or 2.0 ** round(math.log2(scale)) != scale:
        raise Unsupported(f"C backend: {who(node)}: cell state scale {scale} is not a power of 2")
    return scale


def emit_lstm8(w: CWriter, node: ir.Node, params: Params) -> None:
    if rounding(params) != TFLITE:
        raise Unsupported(f"C backend: {who(node)}: an int8 LSTM from QDQ ONNX has no C kernel")
    sc = cell_scale(node)
    steps, batch, size = dims(node.inputs[0], node)
    hidden = int(attr(node, "hidden_size", 0))
    outs = [v for v in node.outputs[1:] if v.uses() or v.is_graph_output()]
    if outs or attr(node, "direction", "forward") != "forward" or attr(node, "layout", 0) \
            or any(v is not None for v in node.inputs[4:]):
        raise Unsupported(f"C backend: {who(node)}: an int8 LSTM other than TFLite's "
                          "unidirectional sequence LSTM")
    qx, qh = quant(node.inputs[0], node, "X"), quant(node.outputs[0], node, "Y")
    qw, qr = quant(node.inputs[1], node, "W"), quant(node.inputs[2], node, "R")
    zx, zh = int(qx.zero_point[0]), int(qh.zero_point[0])
    W = need_const(node, 1, "W").reshape(4, hidden, size).astype(np.int64)
    R = need_const(node, 2, "R").reshape(4, hidden, hidden).astype(np.int64)
    bias = need_const(node, 3, "B").reshape(8, hidden)[:4].astype(np.int64)
    # the zero points' share of each sum, folded in (TFLite sums (x - z_x) w: the same integers)
    start_in = bias - zx * W.sum(axis=2)
    start_rec = -zh * R.sum(axis=2)
    ws = np.broadcast_to(qw.scale, (4 * hidden,)).reshape(4, hidden)[:, 0]
    rs = np.broadcast_to(qr.scale, (4 * hidden,)).reshape(4, hidden)[:, 0]
    sx, sh = float(qx.scale[0]), float(qh.scale[0])
    mul_in = [_mult(np.float64(sx) * np.float64(s) / GATE_IN) for s in ws]
    mul_rec = [_mult(np.float64(sh) * np.float64(s) / GATE_IN) for s in rs]
    power = round(math.log2(sc))
    shift = 15 + power - 3  # TFLite's tanh input shift for a cell state of scale 2^power
    tanh_mul, tanh_shift = (3 << shift, 0) if shift >= 0 else (3, -shift)

    x, y = params.inp(node.inputs[0], node), params.out(node.outputs[0], node)
    wi = params.weight(f"{node.name}:w", W.astype(np.int8).reshape(-1), INT8)
    wr = params.weight(f"{node.name}:r", R.astype(np.int8).reshape(-1), INT8)
    si = params.weight(f"{node.name}:start_in", start_in.astype(np.int32).reshape(-1), INT32)
    sr = params.weight(f"{node.name}:start_rec", start_rec.astype(np.int32).reshape(-1), INT32)
    lut = params.weight("opfuse:sigmoid_table", np.array(SIGMOID_TABLE, np.int32), INT32)
    w(f"/* TFLite's int8 LSTM, gates {', '.join(ONNX_GATES)}; cell state scale 2^{power} */")
    w(f"static const int32_t mul_in[4][2] = {{{', '.join('{' + m + '}' for m in mul_in)}}};")
    w(f"static const int32_t mul_rec[4][2] = {{{', '.join('{' + m + '}' for m in mul_rec)}}};")
    w(f"int16_t gate[4][{hidden}];")
    w(f"int16_t cell[{hidden}];")
    w(f"int8_t hid[{hidden}];")
    w.open(f"for (int b = 0; b < {batch}; ++b)")
    w(f"for (int j = 0; j < {hidden}; ++j) {{ cell[j] = 0; hid[j] = {zh}; }}")
    w.open(f"for (int t = 0; t < {steps}; ++t)")
    w(f"const int8_t *xt = {x} + (t*{batch} + b)*{size};")
    w.open("for (int g = 0; g < 4; ++g)")
    w.open(f"for (int j = 0; j < {hidden}; ++j)")
    w(f"const int8_t *wj = {wi} + (g*{hidden} + j)*{size};")
    w(f"const int8_t *rj = {wr} + (g*{hidden} + j)*{hidden};")
    w(f"int32_t a = {si}[g*{hidden} + j], r = {sr}[g*{hidden} + j];")
    dot = kernels(params.store.isa).dot  # the ISA's int8 row product (SMLAD pairs on Arm)
    for acc, row, wrow, k in (("a", "xt", "wj", size), ("r", "hid", "rj", hidden)):
        w.open("")
        dot(w, acc, row, "int8_t", 0, wrow, k)
        w.close()
    w("a = opfuse_clamp(opfuse_requant(a, mul_in[g][0], mul_in[g][1]), -32768, 32767);")
    w("r = opfuse_clamp(opfuse_requant(r, mul_rec[g][0], mul_rec[g][1]), -32768, 32767);")
    w("const int32_t s = opfuse_clamp(a + r, -32768, 32767);")
    _activation(w, "s", "gate[g][j]", lut, tanh_when="g == 3")
    w.close()
    w.close()
    m_forget, m_input = _mult(GATE_OUT), _mult(GATE_OUT * GATE_OUT / sc)
    m_out = _mult(GATE_OUT * GATE_OUT / np.float64(sh))
    w.open(f"for (int j = 0; j < {hidden}; ++j)")
    w(f"const int32_t fc = opfuse_clamp(opfuse_requant(gate[2][j] * cell[j], {m_forget}), "
      "-32768, 32767);")
    w(f"const int32_t ic = opfuse_clamp(opfuse_requant(gate[0][j] * gate[3][j], {m_input}), "
      "-32768, 32767);")
    w("cell[j] = (int16_t)opfuse_clamp(fc + ic, -32768, 32767);")
    w(f"const int32_t d = ((int32_t)cell[j] * {tanh_mul}"
      f"{f' + {1 << (tanh_shift - 1)}) >> {tanh_shift}' if tanh_shift else ')'};")
    w("int16_t tc;")
    _tanh(w, "d", "tc", lut)
    w(f"hid[j] = (int8_t)opfuse_clamp({zh} + opfuse_requant(tc * gate[1][j], {m_out}), "
      "-128, 127);")
    w(f"{y}[(t*{batch} + b)*{hidden} + j] = hid[j];")
    w.close()
    w.close()
    w.close()


def _activation(w: CWriter, s: str, out: str, lut: str, tanh_when: str) -> None:
    """``out`` = sigmoid(s), or tanh(s) where ``tanh_when`` holds: s in Q3.12, out in Q0.15
    (TFLite's reference_integer_ops Logistic / Tanh of int16 with input multiplier 3)."""
    w.open(f"if ({tanh_when})")
    _tanh(w, f"{s} * 3", out, lut)
    w.close()
    w.open("else")
    w(f"const int32_t d = {s} * 3;")
    w("const uint32_t m = (uint32_t)(d < 0 ? -d : d), k = m >> 9;")
    w(f"uint32_t v = k >= 255 ? 0x7FFFu << 10 : ((uint32_t){lut}[k] << 9) "
      f"+ (m & 0x1FFu) * (uint32_t)({lut}[k + 1] - {lut}[k]);")
    w("v = d >= 0 ? v + (1u << 9) : (1u << 25) - v + (1u << 9) - 1u;")
    w(f"{out} = (int16_t)(v >> 10);")
    w.close()


def _tanh(w: CWriter, d: str, out: str, lut: str) -> None:
    """``out`` = TFLite's int16 tanh of the scaled input ``d`` (Q0.15 result)."""
    w.open("")
    w(f"const int32_t e = {d};")
    w("const uint32_t m = (uint32_t)(e < 0 ? -e : e), k = m >> 8;")
    w(f"const int32_t v = k >= 255 ? 0xFFFF << 8 : (int32_t)(((uint32_t){lut}[k] << 8) "
      f"+ (m & 0xFFu) * (uint32_t)({lut}[k + 1] - {lut}[k]));")
    w(f"{out} = (int16_t)((e >= 0 ? v - (1 << 23) + (1 << 7) : -v + (1 << 23) + (1 << 7) - 1) >> 8);")
    w.close()
