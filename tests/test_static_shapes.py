"""Exporter shape subgraphs over static inputs fold away at import (opfuse/frontends/static_shapes.py).

Each graph is written the way ``torch.onnx.export`` (opset 17) writes it: ``F.pad`` pads built with
ConstantOfShape/Concat/Reshape/Slice/Transpose/Cast, the flatten's Shape->Gather->Unsqueeze->Concat->
Reshape behind it, a class token Expand-ed to a shape built with Equal/Where over constants, a mask
through Where. onnx's first inference gives the values behind them symbolic dims; after import none
may be unknown, no Shape op may be left, and the emitted ONNX must compute what the original does.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest

from opfuse.frontends import import_proto
from opfuse.ir import require_static
from tests.helpers.cli import assert_clean_error

# torch's F.pad(x, (1, 2, 0, 1)): pads of the last two dims, reversed into ONNX's begin..end order.
_TORCH_PAD = """
  p4 = Constant<value = int64[1] {4}>()
  given = Constant<value = int64[4] {1, 2, 0, 1}>()
  fill = ConstantOfShape<value = int64[1] {0}>(p4)
  cat = Concat<axis = 0>(given, fill)
  pairs_shape = Constant<value = int64[2] {-1, 2}>()
  pairs = Reshape(cat, pairs_shape)
  s0 = Constant<value = int64[1] {0}>()
  sb = Constant<value = int64[1] {-1}>()
  se = Constant<value = int64[1] {-9223372036854775807}>()
  sst = Constant<value = int64[1] {-1}>()
  rev = Slice(pairs, sb, se, s0, sst)
  tr = Transpose<perm = [1, 0]>(rev)
  flat_shape = Constant<value = int64[1] {-1}>()
  flat = Reshape(tr, flat_shape)
  pads = Cast<to = 7>(flat)
  zero = Constant<value = float {0.0}>()
  padded = Pad<mode = "constant">(x, pads, zero)
"""

FLATTEN_AFTER_PAD = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,2,5,5] x) => (float[1,?] y) {{
{_TORCH_PAD}
  act = Relu(padded)
  s = Shape(act)
  i0 = Constant<value = int64 {{0}}>()
  batch = Gather<axis = 0>(s, i0)
  ax = Constant<value = int64[1] {{0}}>()
  b1 = Unsqueeze(batch, ax)
  m1 = Constant<value = int64[1] {{-1}}>()
  shp = Concat<axis = 0>(b1, m1)
  y = Reshape(act, shp)
}}
"""

# ViT's class token: cls.expand(batch, -1, -1), the -1s resolved with Equal/Where, batch read from
# the patch embeddings behind a computed Pad.
EXPAND_FROM_SHAPE = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,2,5,5] x) => (float[1,?,8] y) {{
{_TORCH_PAD}
  emb_shape = Constant<value = int64[3] {{1, -1, 8}}>()
  tokens = Reshape(padded, emb_shape)
  s = Shape(tokens)
  i0 = Constant<value = int64 {{0}}>()
  batch = Gather<axis = 0>(s, i0)
  ax = Constant<value = int64[1] {{0}}>()
  b1 = Unsqueeze(batch, ax)
  rest = Constant<value = int64[2] {{-1, -1}}>()
  want = Concat<axis = 0>(b1, rest)
  three = Constant<value = int64[1] {{3}}>()
  ones = ConstantOfShape<value = int64[1] {{1}}>(three)
  neg = Constant<value = int64 {{-1}}>()
  minus = Mul(ones, neg)
  is_free = Equal(want, minus)
  target = Where(is_free, ones, want)
  cls = Constant<value = float[1,1,8] {{1, 2, 3, 4, 5, 6, 7, 8}}>()
  cls_b = Expand(cls, target)
  y = Concat<axis = 1>(cls_b, tokens)
}}
"""

# BERT's extended mask: mask[:, None, None, :].expand(1, -1, 4, 4) (the -1 resolved with
# Equal/Where over constants, as torch writes it), then (1 - mask) * min through Where.
MASK_WHERE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,2,4,4] scores, int64[1,4] mask) => (float[1,2,4,4] y) {
  ax = Constant<value = int64[2] {1, 2}>()
  m4 = Unsqueeze(mask, ax)
  want = Constant<value = int64[4] {1, -1, 4, 4}>()
  four = Constant<value = int64[1] {4}>()
  ones = ConstantOfShape<value = int64[1] {1}>(four)
  neg = Constant<value = int64 {-1}>()
  minus = Mul(ones, neg)
  is_free = Equal(want, minus)
  target = Where(is_free, ones, want)
  big = Expand(m4, target)
  mf = Cast<to = 1>(big)
  one = Constant<value = float {1.0}>()
  inv = Sub(one, mf)
  zero = Constant<value = float {0.0}>()
  is_zero = Equal(inv, zero)
  low = Constant<value = float {-10000.0}>()
  bias = Where(is_zero, zero, low)
  y = Add(scores, bias)
}
"""

GRAPHS = {"flatten_after_pad": FLATTEN_AFTER_PAD, "expand_from_shape": EXPAND_FROM_SHAPE,
          "mask_where": MASK_WHERE}


def _model(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 2, dims).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_import_leaves_no_unknown_size_and_no_shape_op(name: str) -> None:
    model = import_proto(_model(GRAPHS[name]), f"{name}.onnx")
    assert "Shape" not in {node.op_type for node in model.graph}
    require_static(model, name)  # raises naming the first value without a static shape


def test_first_inference_alone_leaves_them_unknown() -> None:
    """The graphs are the hard case: onnx's inference (what the import ran before) cannot size them."""
    for text in GRAPHS.values():
        inferred = onnx.shape_inference.infer_shapes(_model(text), strict_mode=True, data_prop=True)
        dims = [d for vi in inferred.graph.value_info for d in vi.type.tensor_type.shape.dim]
        assert any(not d.HasField("dim_value") for d in dims)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_emitted_onnx_matches_onnxruntime_and_has_no_shape_op(name: str, run_cli, tmp_path) -> None:
    source = _model(GRAPHS[name])
    path, out = tmp_path / f"{name}.onnx", tmp_path / "out.onnx"
    onnx.save(source, path)
    code, _, err = run_cli("compile", str(path), "-o", str(out))
    assert code == 0, err
    emitted = onnx.load(out)
    assert "Shape" not in {node.op_type for node in emitted.graph.node}
    feeds = _feeds(source)
    for want, got in zip(_run(source, feeds), _run(str(out), feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_analyze_prints_no_unknown_size(name: str, run_cli, tmp_path) -> None:
    path = tmp_path / f"{name}.onnx"
    onnx.save(_model(GRAPHS[name]), path)
    code, out, err = run_cli("analyze", str(path))
    assert code == 0, err
    assert "unknown size" not in out + err
    assert "--input-shape" not in out + err


def test_a_size_known_only_after_folding_is_held_to_the_activation_limit(run_cli, tmp_path) -> None:
    """The mask expanded to 1x1x64x64 int64 (32 KiB) is sized only by the second inference; the
    activation limit applies to it as to every size the first one gave."""
    text = (MASK_WHERE.replace("{1, -1, 4, 4}", "{1, -1, 64, 64}")
            .replace("float[1,2,4,4] y", "int64[1,1,?,?] big")
            .replace("int64[1,4] mask", "int64[1,1] mask")
            .replace("  y = Add(scores, bias)\n", ""))
    path = tmp_path / "wide.onnx"
    onnx.save(_model(text), path)
    code, _, err = run_cli("analyze", str(path), "--limit", "activation=16KiB")
    assert_clean_error(code, err, "wide.onnx", "output 'big'", "activation limit")
    code, _, err = run_cli("analyze", str(path), "--limit", "activation=64KiB")
    assert code == 0, err
