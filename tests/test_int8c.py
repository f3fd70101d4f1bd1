"""The host's int8 C model: ``[perf.int8c]`` read, validated and written by calibrate, a target
without it costed as before, the work counted on the C template path the backend really emits,
the probe's fit, and the per-kernel C timer (counts and results only: no timing asserted)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from opfuse import ops
from opfuse.api import compile as compile_model
from opfuse.backends.c.emit import c_schedule, emit_c
from opfuse.cost import cost_model, int8c
from opfuse.cost.cwork import is_view, kernel_work
from opfuse.errors import OpfuseError
from opfuse.kernelplan.conv8 import has_gemv8
from opfuse.measure.calibrate.host import host_target_text
from opfuse.measure.calibrate.int8_probe import (
    calibrate_int8c,
    conv_attrs,
    fit_class,
    quantized_probe,
)
from opfuse.measure.run.host import CModel, manifest
from opfuse.measure.run.kernel_times import time_kernels
from opfuse.measure.validate.per_kernel import random_feeds
from opfuse.quant import ROUNDING, TFLITE
from opfuse.targets import load_target
from opfuse.targets.int8c import Int8C
from tests.helpers.cost import FIGURES

INT8C = {
    "dispatch_overhead_s": 2e-8,
    "mac_s": {"pointwise": 4e-11, "depthwise": 6e-11, "gemm": 5e-12},
    "tail_s": {"depthwise": 4e-10},
    "output_s": {"pointwise": 1e-10, "depthwise": 2e-9, "epilogue": 3e-9},
    "loop_s": {"pointwise": 1e-7},
    "kernels": 12,
}

# one layer per C template path (the comment: the path emit_conv8 / emit_gemm8 takes)
CASES = (
    ("Conv", {}, (1, 16, 20, 20), (48, 16, 1, 1), "relu"),  # pointwise (400 pixels >= a tile)
    ("Conv", {}, (1, 64, 5, 5), (32, 64, 1, 1), ""),  # conv_lanes (25 pixels, 32 channels)
    ("Conv", conv_attrs(3), (1, 8, 40, 40), (24, 8, 3, 3), "relu"),  # conv_rows (24 = 16 + 8)
    ("Conv", conv_attrs(3, 2, 24), (1, 24, 20, 20), (24, 1, 3, 3), "relu"),  # depthwise
    ("Conv", {}, (1, 24, 16, 16), (40, 24, 1, 1), "add"),  # pointwise + a fused Add
    ("Gemm", {"transB": 1}, (1, 100), (30, 100), ""),  # gemv (x86/gemv.py: one row)
    ("Gemm", {"transB": 1}, (3, 100), (30, 100), ""),  # gemm (K = 100 = 96 + 4)
)
_MARKS = {  # a line only that path's template writes
    # pointwise.py's column tiles (int8/pointwise.py) with no line buffer
    "pointwise": re.compile(r"\A(?![\s\S]*int8_t line\[)[\s\S]*acc\[o\]\[t\] = "),
    # pointwise.py's channel tiles (the plane read as one row: no line buffer)
    "conv_lanes": re.compile(r"s\[t\]\[o\] \+= "),
    # the column tiles over a line buffer (int8/row_tiles.py)
    "conv_rows": re.compile(r"int8_t line\["),
    "depthwise": re.compile(r"const int8_t \*r0 = \(unsigned\)"),  # depthwise_dsp.py
    "gemm": re.compile(r"acc \+= \(\(int32_t\)ar\[kk\]"),
    "gemv": re.compile(r"batch-1 GEMV \(isa/x86/gemv\.py\)"),  # its #else: the gemm's C
}


def _host(tmp_path: Path, int8c_figures: dict | None):
    figures = dict(FIGURES, **({"int8c": int8c_figures} if int8c_figures else {}))
    path = tmp_path / "host.toml"
    path.write_text(host_target_text(figures))
    return load_target(path)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("int8c")
    result = compile_model(quantized_probe(folder, CASES), "x86-host")
    result.optimized.meta[ROUNDING] = TFLITE  # as calibrate's probe (int8_probe.measure_kernels)
    emit_c(result, folder / "c", cascades=False)  # the per-kernel timer: layer by layer
    return result, folder / "c"


def test_calibrate_writes_int8c_and_the_target_reads_it(tmp_path):
    host = _host(tmp_path, INT8C)
    perf = host.perf
    # the host's C is x86-host's, the C the probe timed (without [isa] it was the portable C)
    assert host.isa == load_target("x86-host").isa and host.isa.name == "x86"
    assert perf.int8c == Int8C(2e-8, INT8C["mac_s"], INT8C["output_s"], INT8C["loop_s"],
                               INT8C["tail_s"])
    text = host_target_text(dict(FIGURES, int8c=INT8C))
    assert "[perf.int8c.mac_s]" in text and "12 probe kernels" in text


def test_a_host_calibrated_before_int8c_still_loads_and_costs_int8_as_before(tmp_path, probe):
    old = _host(tmp_path, None)
    assert old.perf.int8c is None and "int8c" not in host_target_text(FIGURES)
    result, _ = probe
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    for kc, k in zip(cost_model(model, part, old).kernels, part.kernels, strict=True):
        members = [nodes[n] for n in k.nodes]
        want = kc.flops / (2 * old.perf.peak_macs_per_s["int8"] * old.perf.efficiency_of(
            kc.kernel_class))
        assert kc.compute_s == pytest.approx(want)  # FLOPs at the int8 peak, as before
        assert kc.latency_s >= old.perf.dispatch_overhead_s
        assert not is_view(members) or kc.ops == ("Reshape",)


def test_with_int8c_a_quantized_kernel_costs_what_the_c_model_says(tmp_path, probe):
    host = _host(tmp_path, INT8C)
    result, _ = probe
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    for kc, k in zip(cost_model(model, part, host).kernels, part.kernels, strict=True):
        members = [nodes[n] for n in k.nodes]
        assert kc.compute_s == pytest.approx(int8c.compute_s(members, host.perf))
        assert kc.latency_s == pytest.approx(max(kc.compute_s, kc.memory_s) + 2e-8)
        if is_view(members):
            assert kc.compute_s == 0 and kc.memory_s == 0
    # a float model on the same target keeps the onnxruntime figures
    (fk,) = cost_model(*_float_conv(), host).kernels
    assert fk.latency_s == pytest.approx(max(fk.compute_s, fk.memory_s) + 3e-6)


def test_a_batch1_gemm_is_priced_as_the_gemv_where_the_table_has_its_rates(tmp_path, probe):
    """The host's ISA (x86) writes the GEMV: with ``gemv`` rates the one-row Gemm costs its
    vectors, steps and outputs at them; the three-row Gemm stays a gemm; a table without them
    (a host calibrated before) counts the one-row Gemm as a gemm, as then."""
    def table(**extra):  # noqa: ANN003, ANN202
        return {k: dict(v, **extra.get(k, {})) if isinstance(v, dict) else v
                for k, v in INT8C.items()}

    rates = table(mac_s={"gemv": 1e-12}, output_s={"gemv": 2e-9}, loop_s={"gemv": 1e-9})
    (tmp_path / "old").mkdir()
    with_gemv, without = _host(tmp_path, rates), _host(tmp_path / "old", INT8C)
    result, _ = probe
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    gemms = {}
    for kc, old, k in zip(cost_model(model, part, with_gemv).kernels,
                          cost_model(model, part, without).kernels, part.kernels, strict=True):
        members = [nodes[n] for n in k.nodes]
        if members[0].op_type == "Gemm":
            gemms[members[0].inputs[0].shape[0]] = (kc.compute_s, old.compute_s, members)
    one, old_one, members = gemms[1]
    assert one == pytest.approx(32 * 100 * 1e-12 + 30 * 2e-9 + 25 * 1e-9)
    assert old_one == pytest.approx(int8c.compute_s(members, without.perf))
    assert old_one == pytest.approx(int8c.compute_s(members, with_gemv.perf, gemv=False))
    three, old_three, members = gemms[3]
    assert three == old_three == pytest.approx(int8c.compute_s(members, with_gemv.perf))


def _float_conv():
    from tests.helpers.cost import single_conv as float_conv

    return float_conv()


def test_work_is_counted_on_the_path_the_backend_emits(probe):
    result, folder = probe
    sched = c_schedule(result, cascades=False)
    model, part = sched.model, sched.partition
    nodes = {n.name: n for n in model.graph}
    text = (folder / "model.c").read_text()
    bodies = dict(re.findall(r"static void (k\d+_\w+)\(.*?\{\n(.*?)\n\}\n", text, re.S))
    entries = sorted(manifest(folder).kernel_outputs, key=lambda e: e.index)
    seen = set()
    for entry, k in zip(entries, part.kernels, strict=True):
        members = [nodes[n] for n in k.nodes]
        works = kernel_work(members, has_gemv8(result.target.isa.name))
        if not works or works[0].path not in _MARKS:
            continue
        work, body = works[0], bodies[entry.function]
        seen.add(work.path)
        own = {work.path, "gemm"} if work.path == "gemv" else {work.path}
        for path, mark in _MARKS.items():  # its own template's line, and no other's
            assert bool(mark.search(body)) == (path in own), (entry.function, path)
        anchor = next(n for n in members if ops.is_anchor(n))
        # no padded taps (conv_lanes' case is a pointwise plane): every MAC counted
        if work.path in ("pointwise", "conv_lanes", "gemm"):
            assert work.lane_macs + work.tail_macs == ops.macs(anchor)
        else:  # a row loop runs every tap over the whole row, a GEMV padded vectors: at least
            assert work.lane_macs + work.tail_macs >= ops.macs(anchor)
        if work.path == "gemv":  # 30 channels in 2 vectors of 16, K = 100 in 25 steps of 4
            assert (work.lane_macs, work.outputs, work.loops) == (32 * 100, 30, 25)
        if "Add" in entry.ops:
            assert [w.path for w in works] == [work.path, "epilogue"]
    assert seen == set(_MARKS)


def test_fit_recovers_known_costs_and_drops_a_negative_one():
    rng = np.random.default_rng(0)
    truth = (2e-11, 5e-10, 3e-9, 1e-7)
    rows = []
    for _ in range(12):
        x = (rng.integers(1e4, 1e6), rng.integers(0, 1e4), rng.integers(1e3, 5e4),
             rng.integers(10, 1000))
        rows.append((*x, sum(c * v for c, v in zip(truth, x, strict=True))))
    assert fit_class(rows) == pytest.approx(truth, rel=1e-6)
    # times that fall with the loop count: that cost is dropped (0), never negative
    bent = [(r[0], 0, 0, r[3], 2e-11 * r[0] - 1e-9 * r[3]) for r in rows]
    got = fit_class(bent)
    assert got[3] == 0 and min(got) >= 0 and got[0] > 0


def test_probe_calibration_fits_each_path_then_the_epilogue():
    from opfuse.cost.cwork import Work

    def work(path, macs, outputs, loops):
        return Work(macs, outputs, loops, path)

    found = [("boundary", [work("elementwise", 10, 10, 0)], 1.0),  # ignored
             ("view", [], 3e-8)]
    for n in range(1, 6):
        out = 1000 * (n % 3 + 1)
        found.append(("layer", [work("pointwise", 1e5 * n, out, 10 * (6 - n) + n * n)],
                      1e5 * n * 1e-11 + out * 1e-10 + (10 * (6 - n) + n * n) * 1e-7))
    for n in (1, 2, 3):  # pointwise + Add: 4e-9 per output beyond the anchor
        w = work("pointwise", 2e5, 1000 * n, 10)
        t = 2e5 * 1e-11 + 1000 * n * 1e-10 + 10 * 1e-7 + 1000 * n * 4e-9
        found.append(("layer", [w, work("epilogue", 1000 * n, 1000 * n, 0)], t))
    got = calibrate_int8c(lambda: found)
    assert got["dispatch_overhead_s"] == 3e-8 and got["kernels"] == 9
    assert got["mac_s"]["pointwise"] == pytest.approx(1e-11)
    assert got["output_s"]["pointwise"] == pytest.approx(1e-10)
    assert got["loop_s"]["pointwise"] == pytest.approx(1e-7)
    # the epilogue's MACs and outputs are one count: what it takes per output is 4e-9 in all
    per_output = got["output_s"]["epilogue"] + got["mac_s"]["epilogue"]
    assert per_output == pytest.approx(4e-9)
    assert "pointwise" in str(got)


@pytest.mark.parametrize("table, message", [
    ("[perf.int8c.mac_s]\nconv = 2e-11", "unknown C path"),
    ("[perf.int8c.mac_s]\npointwise = \"fast\"", "must be a finite number"),
    ("[perf.int8c.output_s]\ngemm = -1e-9", "must be >= 0"),
    ("[perf.int8c]\nspeed = 1", "unknown key 'perf.int8c.speed'"),
])
def test_bad_int8c_tables_are_refused_in_one_line(tmp_path, table, message):
    path = tmp_path / "host.toml"
    text = host_target_text(FIGURES)
    head, tail = text.split("\n[[perf.memory]]", 1)
    path.write_text(head + "\n" + table + "\n\n[[perf.memory]]" + tail)
    with pytest.raises(OpfuseError, match=re.escape(message)) as err:
        load_target(path)
    assert "\n" not in str(err.value)


def test_timer_build_gives_one_time_per_kernel_and_the_same_outputs(probe):
    _, folder = probe
    info = manifest(folder)
    feeds = random_feeds(info)
    times = time_kernels(folder, feeds, budget_s=0.0, warmup=1, min_runs=3)
    assert len(times.seconds) == len(info.kernel_outputs) == len(times.functions)
    assert times.runs == 3 and all(t >= 0 for t in times.seconds) and times.timer_s >= 0
    timed = sorted(folder.glob("libopfuse_ktimer.*.so"))[-1]
    plain = CModel(folder).run(feeds)
    marked = CModel(timed).run(feeds)
    for name, arr in plain.items():
        assert np.array_equal(arr, marked[name])


def test_int8c_replace_keeps_old_targets_untouched():
    x86 = load_target("x86-host")
    assert x86.perf.int8c is None  # no shipped target claims opfuse's C timings
    fake = dataclasses.replace(x86.perf, int8c=Int8C())
    assert fake.int8c.mac_s == {} and fake.int8c.dispatch_overhead_s == 0.0


def test_calibrate_without_a_c_compiler_warns_and_writes_no_int8c(monkeypatch, tmp_path):
    from opfuse.measure.calibrate import host as cal
    from opfuse.measure.calibrate import int8_probe

    monkeypatch.setattr(cal, "_cache_sizes", lambda: {"l2": 1 << 20})
    monkeypatch.setattr(cal, "level_rate", lambda *a: {"bytes_per_s": 1e10, "sizes": [],
                                                       "rates": []})
    monkeypatch.setattr(cal, "_gemm_macs_per_s", lambda int8: 1e10)
    monkeypatch.setattr(cal, "_call_overhead_s", lambda: 1e-6)
    monkeypatch.setattr(cal, "measure_efficiency", lambda *a: {"conv": 0.5})

    def no_compiler():
        raise OpfuseError("C backend: no C compiler found (install gcc or set CC)")

    monkeypatch.setattr(int8_probe, "calibrate_int8c", no_compiler)
    figures = cal.calibrate()
    assert "int8c" not in figures
    assert any("int8 C not measured" in w and "no C compiler" in w for w in figures["warnings"])
    path = tmp_path / "host.toml"
    path.write_text(host_target_text(figures))
    assert load_target(path).perf.int8c is None
