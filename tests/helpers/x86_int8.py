"""The x86 int8 micro-kernels' builds compared with TFLite Micro (tests/test_c_int8_x86.py,
tests/test_x86_avx2_conv.py): each model's generated C built with -march=x86-64-v2 (the portable
C), x86-64-v3 (the AVX2 branch), x86-64-v3 -mavxvnni or -mavx512vnni -mavx512vl (the ymm VNNI
branch) and native (the zmm VNNI branches), every build equal to TFLite Micro on every element."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb
from tests.helpers.c_int8 import SX, SY, conv_pair, int8_inputs, nchw, nhwc
from tests.helpers.cpu import cpu_flags, gcc_macros
from tests.helpers.qgraphs import QGraph, compile_ir

RUNS = 6


CPU = cpu_flags()
# (name, gcc flags, the macro that selects its branch, the CPU flag it needs)
BUILDS = [
    ("portable", ["-march=x86-64-v2"], None, None),
    ("avx2", ["-march=x86-64-v3"], "__AVX2__", "avx2"),
    ("ymm_vnni", ["-march=x86-64-v3", "-mavxvnni"], "__AVXVNNI__", "avx_vnni"),
    # the same ymm branch on an AVX-512 part without AVX-VNNI (VNNI + VL, no BW: no zmm branch)
    ("ymm_vnni_vl", ["-march=x86-64-v3", "-mavx512vnni", "-mavx512vl"], "__AVX512VNNI__",
     "avx512_vnni"),
    ("native", ["-march=native"], "__AVX512VNNI__", "avx512_vnni"),
]


def builds() -> list[tuple[str, list[str]]]:
    """The builds this machine can run; the SIMD ones checked to select their branch."""
    out = []
    for name, flags, macro, cpu in BUILDS:
        if cpu is not None and cpu not in CPU:
            continue
        if macro is not None:
            assert macro in gcc_macros(flags), f"{flags} does not define {macro}"
        out.append((name, flags))
    return out


def _run_builds(folder: Path, feeds: list[dict]) -> dict[str, list[dict]]:
    from opfuse.measure.run.host import CModel, build_shared

    results = {}
    for name, flags in builds():
        model = CModel(build_shared(folder, flags, name=f"lib_{name}.so"))
        results[name] = [{k: np.array(v) for k, v in model.run(f).items()} for f in feeds]
    return results


def check(tfl: bytes, model, xs: list[list[np.ndarray]], names: list[str],
           needs: str = "opfuse_x86_", lacks: str | None = None) -> None:
    """Every build of ``model``'s C equals TFLite Micro on the NHWC inputs ``xs``; the C
    contains ``needs`` (the micro-kernel under test is used) and not ``lacks``."""
    from opfuse.backends.c import emit_c

    if "avx512_vnni" not in CPU and "avx_vnni" not in CPU:
        pytest.skip("this CPU has neither avx512_vnni nor avx_vnni: only the AVX2 and portable "
                    "branches could be checked")
    ref = q.run_tflm(tfl, xs)
    out = model.graph.outputs[0].name
    to_ir = [nchw if x.ndim == 4 else (lambda a: a) for x in xs[0]]
    from_ir = nhwc if ref[0][0].ndim == 4 else (lambda a: a)
    feeds = [{n: f(x) for n, f, x in zip(names, to_ir, run, strict=True)} for run in xs]
    with tempfile.TemporaryDirectory(prefix="opfuse-x86-") as tmp:
        folder = Path(tmp) / "m"
        emit_c(compile_ir(model), folder)
        text = (folder / "model.c").read_text()
        assert needs in text and (lacks is None or lacks not in text)
        results = _run_builds(folder, feeds)
    assert "native" in results or "ymm_vnni" in results
    for build, got in results.items():
        for r, g in zip(ref, got, strict=True):
            c = from_ir(g[out])
            diff = int(np.sum(r[0] != c))
            assert diff == 0, f"{build}: {diff} of {c.size} elements differ"


def large_sums(oc: int, seed: int) -> dict:
    """conv_pair's scales, biases and weight bounds outside the short requantization: even
    channels a real multiplier of 0.6-3 (a left shift) on weights of at most 2; odd channels
    a bias of 2^30 or more with weights up to 127 (sums past 2^30), brought to +-60..100 and
    a half, so that rounding the sum is decided by its taps."""
    rng = np.random.default_rng(seed)
    even = np.arange(oc) % 2 == 0
    big = rng.integers(2**30, 2**30 + 2**28, oc) * rng.choice([-1, 1], oc)
    bias = np.where(even, rng.integers(-20, 20, oc), big)
    tie = (rng.integers(60, 100, oc) + 0.5) / np.abs(big)  # the taps' share decides the rounding
    real = np.where(even, rng.uniform(0.6, 3.0, oc), tie)
    return {"ws": real * SY / SX, "bias": bias, "wmax": np.where(even, 2, 127)}


# a residual Add/Sub after the conv: (op, other's scale and zero point, output's, fused act)
PLAIN_ADD = ("Add", 0.05, 3, 0.12, -2, None)  # decimal scales: many exact ties, the exact form


def conv_models(spec: tuple, residual: bool | tuple = False, large: bool = False,  # noqa: ANN201
                first: bool = True, zy: int | None = None):
    """(TFLite file, IR model, input runs, input names) of conv_pair's ``spec`` (``large``: with
    large_sums' scales and biases; ``zy``: the conv's output zero point), and a residual Add/Sub
    after it (True: PLAIN_ADD), the conv's value its input 0 (``first``) or 1."""
    h, w_, c, oc, *_, seed = spec
    p = conv_pair(*spec, **(large_sums(oc, seed) if large else {}), zy=zy)
    m, x, y, g, xi, out, oc, oh, ow = p.m, p.x, p.y, p.g, p.xi, p.out, p.oc, p.oh, p.ow
    names, shapes = [xi.name], [(1, h, w_, c)]
    if residual:  # Conv + Add: the kernel's epilogue chain, lane by lane
        op, sr, zr, so, zo, act = PLAIN_ADD if residual is True else residual
        r = q.tensor(m, (1, oh, ow, oc), np.int8, sr, zr)
        z = q.tensor(m, (1, oh, ow, oc), np.int8, so, zo)
        opts = q.add_options(act) if op == "Add" else q.sub_options(act)
        q.add_op(m, op.upper(), [y, r] if first else [r, y], [z], opts)
        ri = g.input((1, oc, oh, ow), sr, zr)
        out = g.op(op, [out, ri] if first else [ri, out], (1, oc, oh, ow), so, zo)
        if act == "relu":
            out = g.op("Relu", [out], (1, oc, oh, ow), so, zo)
        m.inputs, m.outputs = [x, r], [z]
        names.append(ri.name)
        shapes.append((1, oh, ow, oc))
    else:
        m.inputs, m.outputs = [x], [y]
    xs = [int8_inputs(sh, seed + 100 * i) for i, sh in enumerate(shapes)]
    runs = [[xs[i][j] for i in range(len(shapes))] for j in range(RUNS)]
    return m.build(), g.model(out), runs, names


def fully_connected(k: int, n: int, per_channel: bool, rows: int, sy: float = 0.11,
                     wmax: int = 128, needs: str | None = None, extremes: bool = False,
                     w128: bool = False) -> None:
    rng = np.random.default_rng(k + n)
    sx, zx, zy = 0.03, 7, -4
    ws = (rng.uniform(0.002, 0.02, n) if per_channel else np.full(1, 0.01)).astype(np.float32)
    wt = rng.integers(1 - wmax, wmax, (n, k)).astype(np.int8)
    if extremes:
        wt = rng.choice(np.array([-127, 127], np.int8), (n, k))
        ws = ws / 20
    if w128:
        wt[0, 0] = -128
    bias = rng.integers(-5000, 5000, n).astype(np.int32) * (wmax // 128)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (rows, k), np.int8, sx, zx)
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 0, wt)
    bi = q.tensor(m, (n,), np.int32, sx * np.broadcast_to(ws, (n,)), 0, 0, bias)
    y = q.tensor(m, (rows, n), np.int8, sy, zy)
    q.add_op(m, "FULLY_CONNECTED", [x, wi, bi], [y], q.fc_options("relu"))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((rows, k), sx, zx)
    out = g.op("Gemm", [xi, g.const(wt, ws, 0, axis=0 if per_channel else None),
                        g.const(bias, sx * ws, 0)], (rows, n), sy, zy, transB=1)
    out = g.op("Relu", [out], (rows, n), sy, zy)
    xs = [[x_] for x_ in int8_inputs((rows, k), 12)[:RUNS]]
    if extremes:
        xs = [[rng.choice(np.array([-128, 127], np.int8), (rows, k))] for _ in range(RUNS)]
    check(m.build(), g.model(out), xs,
           [xi.name], needs or ("batch-1 GEMV" if rows == 1 else "opfuse_x86_dot"))
