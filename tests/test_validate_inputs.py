"""validate and compile --check feed a model inputs it can take (opfuse/measure/validate/input_ranges.py) and hold
--inputs FILE.npz to the model's inputs (opfuse/measure/validate/given_inputs.py).

The BERT-like graph: token ids index a 30-row word table, token-type ids (through a Cast) a 2-row
table, and the attention mask enters as (1 - mask) * -10000 added to the scores. Random ints in
[0, 10) overrun the 2-row table: onnxruntime refused to run it, so validation could not start.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from opfuse.measure.validate.input_ranges import index_ranges
from opfuse.measure.validate.ort import random_inputs
from tests.helpers.cli import assert_clean_error

HIDDEN, SEQ = 16, 8

BERT_LIKE = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (int64[1,{SEQ}] input_ids, int64[1,{SEQ}] {{mask}}, int64[1,{SEQ}] token_type_ids)
  => (float[1,{SEQ},{HIDDEN}] y) {{
  words = Gather<axis = 0>(word_table, input_ids)
  types32 = Cast<to = 6>(token_type_ids)
  types = Gather<axis = 0>(type_table, types32)
  emb = Add(words, types)
  h = LayerNormalization<axis = -1>(emb, gamma, beta)
  ht = Transpose<perm = [0, 2, 1]>(h)
  scores = MatMul(h, ht)
  ax = Constant<value = int64[1] {{1}}>()
  m3 = Unsqueeze({{mask}}, ax)
  mf = Cast<to = 1>(m3)
  one = Constant<value = float {{1.0}}>()
  inv = Sub(one, mf)
  low = Constant<value = float {{-10000.0}}>()
  bias = Mul(inv, low)
  masked = Add(scores, bias)
  p = Softmax<axis = -1>(masked)
  y = MatMul(p, h)
}}
"""


def bert_like(mask: str = "attention_mask", type_rows: int = 2) -> onnx.ModelProto:
    model = onnx.parser.parse_model(BERT_LIKE.replace("{mask}", mask))
    rng = np.random.default_rng(3)
    tables = {"word_table": (30, HIDDEN), "type_table": (type_rows, HIDDEN)}
    for name, shape in tables.items():
        model.graph.initializer.append(
            numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
    for name, value in (("gamma", 1.0), ("beta", 0.0)):
        model.graph.initializer.append(
            numpy_helper.from_array(np.full(HIDDEN, value, np.float32), name))
    onnx.checker.check_model(model, full_check=True)
    return model


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_token_ids_stay_in_their_tables_and_the_mask_is_ones() -> None:
    model = bert_like()
    feeds = random_inputs(_session(model), seed=0, model=model)
    assert 0 <= feeds["input_ids"].min() and feeds["input_ids"].max() < 30
    assert feeds["input_ids"].max() >= 10  # the whole table is drawn from, not [0, 10)
    assert set(np.unique(feeds["token_type_ids"])) <= {0, 1}
    assert (feeds["attention_mask"] == 1).all()
    _session(model).run(None, feeds)  # onnxruntime takes them


def test_a_one_row_table_gets_zeros_and_the_mask_is_found_by_its_arithmetic() -> None:
    """No 'mask' in the name: (1 - m) * min says what it is."""
    model = bert_like(mask="m", type_rows=1)
    ranges = index_ranges(model)
    assert (ranges["m"].low, ranges["m"].high) == (1, 2)
    assert (ranges["token_type_ids"].low, ranges["token_type_ids"].high) == (0, 1)
    assert (ranges["input_ids"].low, ranges["input_ids"].high) == (0, 30)
    feeds = random_inputs(_session(model), seed=0, model=model)
    assert (feeds["token_type_ids"] == 0).all() and (feeds["m"] == 1).all()


def test_the_smallest_table_bounds_an_input_that_indexes_several() -> None:
    model = bert_like()
    text = onnx.printer.to_text(model.graph)
    assert "type_table, types32" in text
    model.graph.node[1].input[0] = "input_ids"  # the type table now also reads the token ids
    assert (index_ranges(model)["input_ids"].high) == 2


def test_validate_and_compile_check_pass_on_the_bert_like_graph(run_cli, tmp_path) -> None:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_like(), path)
    code, out, err = run_cli("compile", str(path), "-o", str(tmp_path / "out.onnx"), "--check")
    assert code == 0, err
    assert "result: match" in out
    assert ("'input_ids' in [0, 30), 'attention_mask' all ones, 'token_type_ids' in [0, 2)"
            in out)  # the report says how it drew them
    code, out, err = run_cli("validate", str(path), str(tmp_path / "out.onnx"))
    assert code == 0, err
    assert "result: match" in out


def test_validate_backend_c_passes_on_the_bert_like_graph(run_cli, tmp_path) -> None:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_like(), path)
    code, out, err = run_cli("validate", str(path), "--backend", "c")
    if code == 3 and "no C kernel for op" in err:
        pytest.skip(f"the C backend lacks a kernel this graph needs: {err.strip()}")
    assert code == 0, err
    assert "result: match" in out


def _good(**change: np.ndarray) -> dict[str, np.ndarray]:
    arrays = {"input_ids": np.arange(SEQ, dtype=np.int64)[None],
              "attention_mask": np.ones((1, SEQ), np.int64),
              "token_type_ids": np.zeros((1, SEQ), np.int64)}
    arrays.update(change)
    return arrays


BAD = {
    "missing": ({k: v for k, v in _good().items() if k != "attention_mask"}, "attention_mask"),
    "shape": (_good(input_ids=np.zeros((1, SEQ + 1), np.int64)), "input_ids"),
    "dtype": (_good(token_type_ids=np.zeros((1, SEQ), np.float32)), "token_type_ids"),
}


@pytest.mark.parametrize("case", ["missing", "shape", "dtype"])
@pytest.mark.parametrize("command", ["compile-check", "validate", "validate-c"])
def test_a_bad_inputs_file_is_one_line_naming_the_input_and_the_file(
        run_cli, tmp_path, case: str, command: str) -> None:
    path, npz, out = tmp_path / "bert.onnx", tmp_path / "given.npz", tmp_path / "out.onnx"
    onnx.save(bert_like(), path)
    arrays, culprit = BAD[case]
    np.savez(npz, **arrays)
    args = {"compile-check": ("compile", str(path), "-o", str(out), "--check"),
            "validate": ("validate", str(path), str(path)),
            "validate-c": ("validate", str(path), "--backend", "c")}[command]
    code, _, err = run_cli(*args, "--inputs", str(npz))
    assert_clean_error(code, err, "given.npz", culprit)
    assert not out.exists(), "nothing may be written when the inputs file is bad"


def test_given_inputs_are_used(run_cli, tmp_path) -> None:
    path, npz = tmp_path / "bert.onnx", tmp_path / "given.npz"
    onnx.save(bert_like(), path)
    np.savez(npz, **_good(input_ids=np.arange(SEQ, dtype=np.int32)[None]))  # int32: converted
    code, out, err = run_cli("compile", str(path), "-o", str(tmp_path / "o.onnx"), "--check",
                             "--inputs", str(npz))
    assert code == 0, err
    assert "inputs: " + str(npz) in out or "given arrays" in out


def test_inputs_without_check_is_refused(run_cli, tmp_path) -> None:
    path = tmp_path / "bert.onnx"
    onnx.save(bert_like(), path)
    code, _, err = run_cli("compile", str(path), "-o", str(tmp_path / "o.onnx"),
                           "--inputs", str(tmp_path / "x.npz"))
    assert_clean_error(code, err, "--inputs", "--check")
