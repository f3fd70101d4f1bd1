"""The int8 C model's work against the loop trips of the C the x86 host really runs: an int8
pool's taps, window rows and outputs (int8/pools.py) and a depthwise conv's ``vpdpbusd`` and
vectors (x86/depthwise_vbmi.py), each counted here from the generated C's own text (its loop
bounds, its instructions), not from the cost model's formulas (opfuse/cost/cwork.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opfuse.api import compile as compile_model
from opfuse.backends.c.emit import c_schedule, emit_c
from opfuse.cost.cwork import kernel_work
from opfuse.kernelplan.dw8 import has_dw8
from opfuse.measure.calibrate.int8_probe import conv_attrs, quantized_probe
from opfuse.quant import ROUNDING, TFLITE

POOLS = (  # int8_probe's cases: strided, padded (edge windows cut), a whole plane
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 8, 15, 15), None, ""),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 4, 9, 9),
     None, ""),
    ("AveragePool", {"kernel_shape": [25, 5]}, (1, 16, 25, 5), None, ""),
)
DEPTHWISE = (  # flat planes (5 x 5 out of 10 x 10 at 7x7 stride 2; 12 x 12), rows (20 x 20 s2)
    ("Conv", conv_attrs(7, 2, 16), (1, 16, 10, 10), (16, 1, 7, 7), "relu"),
    ("Conv", conv_attrs(3, 1, 8), (1, 8, 12, 12), (8, 1, 3, 3), "relu"),
    ("Conv", conv_attrs(3, 2, 8), (1, 8, 40, 40), (8, 1, 3, 3), "relu"),
    ("Conv", conv_attrs(5, 1, 8), (1, 8, 25, 5), (8, 1, 5, 5), "relu"),
)


def _build(tmp: Path, cases: tuple):  # noqa: ANN202
    """(kernel work items, kernel body) of every kernel of ``cases``' x86-host int8 C."""
    result = compile_model(quantized_probe(tmp, cases), "x86-host")
    result.optimized.meta[ROUNDING] = TFLITE  # as calibrate's probe
    emit_c(result, tmp / "c", cascades=False)
    text = (tmp / "c" / "model.c").read_text()
    bodies = dict(re.findall(r"static void (k\d+)_\w+\(.*?\{\n(.*?)\n\}\n", text, re.S))
    sched = c_schedule(result, cascades=False)
    nodes = {n.name: n for n in sched.model.graph}
    dw = has_dw8(result.target.isa.name)
    assert dw  # the x86 host writes the depthwise vectors
    for i, k in enumerate(sched.partition.kernels):
        yield kernel_work([nodes[n] for n in k.nodes], True, dw), bodies[f"k{i}"]


def _num(pattern: str, body: str) -> list[int]:
    return [int(v) for v in re.search(pattern, body).groups()]


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    return [(w, b) for w, b in _build(tmp_path_factory.mktemp("pools"), POOLS)
            if w and w[0].path.startswith("pool")]


def test_pool_work_is_the_trips_of_its_c_loops(pools):
    assert [w[0].path for w, _ in pools] == ["pool", "pool_max", "pool"]
    for works, body in pools:
        # the integer pool (no float requantization: one quantization in and out)
        assert "opfuse_quantize_f" not in body
        assert "acc += xr[iw]" in body or "acc = xr[iw]" in body
        (c,) = _num(r"for \(int c = 0; c < (\d+);", body)
        (oh,) = _num(r"for \(int oh = 0; oh < (\d+);", body)
        (ow,) = _num(r"for \(int ow = 0; ow < (\d+);", body)
        sh, ph, sw, pw = _num(r"ih0 = oh\*(\d+) - (\d+), iw0 = ow\*(\d+) - (\d+);", body)
        (kh,) = _num(r"for \(int kh = 0; kh < (\d+);", body)
        (kw,) = _num(r"for \(int kw = 0; kw < (\d+);", body)
        (ih,) = _num(r"if \(ih < 0 \|\| ih >= (\d+)\) continue;", body)
        rows = taps = 0
        for o in range(oh):  # the C's loop nest, run here: its row loop and its column loop
            for _ in range(ow):
                for r in range(kh):
                    rows += 1
                    if 0 <= o * sh - ph + r < ih:
                        taps += kw
        (work,) = works
        assert (work.lane_macs, work.loops, work.outputs) == (c * taps, c * rows, c * oh * ow)
        assert sw and pw >= 0


@pytest.fixture(scope="module")
def depthwise(tmp_path_factory):
    return [(w, b) for w, b in _build(tmp_path_factory.mktemp("dw"), DEPTHWISE)
            if w and w[0].path == "depthwise_zmm"]


def test_depthwise_work_is_the_dots_and_vectors_of_its_vbmi_c(depthwise):
    assert len(depthwise) == len(DEPTHWISE)
    layouts = set()
    for (work,), body in depthwise:
        branch = body.split("defined(__AVX512VBMI__)\n", 1)[1].split("\n#elif", 1)[0]
        (c,) = _num(r"for \(int c = 0; c < (\d+);", branch)
        weights = re.findall(r"const __m512i w(\d+) = ", branch)
        rows = re.search(r"for \(int oh = 0; oh < (\d+);", branch)
        dots = [int(t) for t in re.findall(r"opfuse_x86_dot16\(acc\d, .*?, w(\d+)\);", branch)]
        stores = branch.count("_mm_mask_storeu_epi8(")
        if rows is None:  # flat: every vector unrolled once per channel
            layouts.add("flat")
            assert work.lane_macs == c * len(dots) * 64 and work.loops == c * stores
            continue
        layouts.add("rows")
        oh = int(rows.group(1))
        kq = len(weights) // len({int(m) for m in re.findall(r"const int ih(\d+) = ", branch)})
        taps = {int(k): (int(s), int(o)) for k, s, o in
                re.findall(r"const int ih(\d+) = oh\*(\d+) \+ (-?\d+);", branch)}
        (ih,) = {int(v) for v in re.findall(r"ih\d+ < (\d+);", branch)}
        # each dot under its tap row's `if (in<kh>)`: run for the output rows where it is inside
        run = sum(sum(1 for o in range(oh) if 0 <= o * taps[t // kq][0] + taps[t // kq][1] < ih)
                  for t in dots)
        assert work.lane_macs == c * run * 64 and work.loops == c * oh * stores
    assert layouts == {"flat", "rows"}


def test_the_probe_fits_the_vectors_and_the_portable_depthwise_on_the_same_times():
    """A depthwise layer of the x86 probe is fitted on depthwise_zmm and, counted as the portable
    C, on depthwise (the rates of a conv the vectors do not take), and counted once."""
    from opfuse.cost.cwork import Work
    from opfuse.measure.calibrate.int8_probe import calibrate_int8c

    found = [("view", [], 2e-8)]
    for n in range(1, 5):
        t = n * 64e3 * 1e-11 + (n % 2 + 1) * 100 * 1e-9
        found += [("layer", [Work(n * 64e3, 1000, (n % 2 + 1) * 100, "depthwise_zmm")], t),
                  ("portable", [Work(n * 9e3, 1000, 50 * n, "depthwise", 10 * n)], t)]
    got = calibrate_int8c(lambda: found)
    assert got["kernels"] == 5
    assert got["mac_s"]["depthwise_zmm"] == pytest.approx(1e-11)
    assert got["loop_s"]["depthwise_zmm"] == pytest.approx(1e-9)
    assert "depthwise" in got["mac_s"] and "depthwise" in got["tail_s"]


def test_a_depthwise_conv_is_priced_as_the_vectors_where_the_table_has_their_rates(tmp_path):
    """On the host (x86, TFLite rounding) a table with depthwise_zmm's rates prices a depthwise
    conv as its vectors; a table without them (a host calibrated before) as the portable C."""
    from opfuse.cost import cost_model
    from opfuse.measure.calibrate.host import host_target_text
    from opfuse.targets import load_target
    from tests.helpers.cost import FIGURES

    table = {"dispatch_overhead_s": 0.0, "mac_s": {"depthwise": 6e-11},
             "output_s": {"depthwise": 2e-9}, "loop_s": {}, "tail_s": {}, "kernels": 1}
    zmm = {**table, "mac_s": {"depthwise": 6e-11, "depthwise_zmm": 1e-11},
           "loop_s": {"depthwise_zmm": 1e-9}}
    hosts = []
    for name, t in (("old", table), ("new", zmm)):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "host.toml"
        path.write_text(host_target_text(dict(FIGURES, int8c=t)))
        hosts.append(load_target(path))
    result = compile_model(quantized_probe(tmp_path, DEPTHWISE[1:2]), "x86-host")
    result.optimized.meta[ROUNDING] = TFLITE
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    (k,) = [k for k in part.kernels if any(nodes[n].op_type == "Conv" for n in k.nodes)]
    i = part.kernels.index(k)
    members = [nodes[n] for n in k.nodes]
    (pairs,), (vectors,) = kernel_work(members), kernel_work(members, dw=True)
    assert (pairs.path, vectors.path) == ("depthwise", "depthwise_zmm")
    old, new = (cost_model(model, part, h).kernels[i].compute_s for h in hosts)
    assert old == pytest.approx(pairs.lane_macs * 6e-11 + pairs.outputs * 2e-9)
    assert new == pytest.approx(vectors.lane_macs * 1e-11 + vectors.loops * 1e-9)


def test_a_stems_transpose_is_read_in_place_not_counted_as_an_epilogue(tmp_path):
    """A TFLite stem (the probe's "stem": NHWC input, Transpose, Conv) is one kernel whose conv
    reads the NHWC rows in place: its work is the conv's alone, no loop for the Transpose."""
    stem = (("Conv", conv_attrs(3, 2), (1, 3, 24, 24), (8, 3, 3, 3), "stem"),)
    result = compile_model(quantized_probe(tmp_path, stem), "x86-host")
    sched = c_schedule(result, cascades=False)
    nodes = {n.name: n for n in sched.model.graph}
    (members,) = [[nodes[n] for n in k.nodes] for k in sched.partition.kernels
                  if any(nodes[n].op_type == "Conv" for n in k.nodes)]
    assert [n.op_type for n in members] == ["Transpose", "Conv"]  # one kernel (Relu folded)
    assert [w.path for w in kernel_work(members, True, True)] == ["conv_rows"]
