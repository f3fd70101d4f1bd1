"""The x86 MaxPool row (opfuse/backends/c/isa/x86/pool.py, ``IsaKernels.max_pool_row``) against
onnxruntime: each model's generated C built with -march=native (the zmm branch, on an AVX-512
host), -march=x86-64-v3 and -march=x86-64-v2 (the portable #else). The shapes reach the row's
edges: stride 2 and 1, left and right pads, a ceil_mode window past the input, widths with a
partial last vector of input and of output, and NaN in the input (NaN in a window gives NaN)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c import emit_c
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model
from tests.helpers.cpu import cpu_flags
from tests.helpers.parsed import normal, parsed_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

CASES = {
    # ResNet's stem pool: 3x3, stride 2, pads 1; 37 columns -> 19 (a partial vector of each)
    "stride2": ("""g (float[1,5,23,37] x) => (float[1,5,12,19] y) {
        y = MaxPool<kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]>(x)
    }""", (1, 5, 23, 37)),
    # stride 2, ceil_mode: the last window reads past the input's right edge; 2x2 no pad
    "stride2_ceil": ("""g (float[1,3,9,33] x) => (float[1,3,5,17] y) {
        y = MaxPool<kernel_shape=[2,2], strides=[2,2], ceil_mode=1>(x)
    }""", (1, 3, 9, 33)),
    # stride 1, a 5-wide window with pads of 2 (YOLO's SPP pool), 40 columns
    "stride1": ("""g (float[1,4,10,40] x) => (float[1,4,10,40] y) {
        y = MaxPool<kernel_shape=[5,5], strides=[1,1], pads=[2,2,2,2]>(x)
    }""", (1, 4, 10, 40)),
}

BUILDS = [("native", "avx512f"), ("x86-64-v3", "avx2"), ("x86-64-v2", None)]


@pytest.mark.parametrize("march,cpu", BUILDS, ids=[b[0] for b in BUILDS])
@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_row_matches_onnxruntime(case: str, march: str, cpu: str | None,
                                          tmp_path: Path) -> None:
    if cpu is not None and cpu not in cpu_flags():
        pytest.skip(f"this CPU has no {cpu}")
    text, shape = CASES[case]
    model = tmp_path / "m.onnx"
    model.write_bytes(parsed_model(text).SerializeToString())
    emit_c(compile_model(str(model), "x86-host"), tmp_path / "c", cascades=False)
    assert "_mm512_permutex2var_ps" in (tmp_path / "c" / "model.c").read_text() or \
        case == "stride1", "the pool did not take the vector row"
    x = normal(*shape)
    x.ravel()[[0, 77, shape[-1] * 3 + 5, x.size - 1]] = np.nan  # corners and the inside
    # onnxruntime's MaxPool drops a NaN; the C's gives NaN (tests/test_c_ieee.py): the
    # reference is onnxruntime's output on the NaNs as +inf, its infinities as NaN
    _, want, _ = reference(model, {"x": np.where(np.isnan(x), np.float32(np.inf), x)})
    lib = CModel(build_shared(tmp_path / "c", (f"-march={march}",), name="lib_t.so"))
    got = lib.run({"x": x})
    for name, ref in want.items():
        ref = np.where(np.isinf(ref), np.float32(np.nan), ref)
        assert np.isnan(ref).any(), "no window held a NaN"
        np.testing.assert_array_equal(got[name].reshape(ref.shape), ref,
                                      err_msg=f"{case} -march={march}")
