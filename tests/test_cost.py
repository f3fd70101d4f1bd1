"""The cost model: the seeds' worked example exactly, roofline verdicts, fusion never costs more,
precision scaling, the level model, analyze()'s JSON contract and the calibrated host target."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from opfuse import models
from opfuse.analysis import analyze
from opfuse.cost import cost_model, resolve_precision
from opfuse.errors import OpfuseError
from opfuse.measure.calibrate.host import host_target_text, write_host_target
from opfuse.pipeline import compile_model
from opfuse.targets import load_target
from tests.helpers.cost import FIGURES, single_conv, single_node
from tests.helpers.shared import shared_onnx_models

CONTRACT_SIDE = {
    "kernels", "activation_bytes", "weight_bytes", "traffic_bytes", "flops", "macs",
    "peak_arena_bytes", "arena_lower_bound_bytes", "layer_by_layer_lower_bound_bytes", "cascades",
    "latency_s", "energy_j", "fits", "unknown_bytes_tensors", "lower_bounds",
}  # fmt: skip
CONTRACT_KERNEL = {
    "name", "ops", "nodes", "flops", "macs", "bytes_read", "bytes_written",
    "arithmetic_intensity", "bound", "latency_s", "energy_j",
}  # fmt: skip


@pytest.fixture(scope="module")
def seed_block():
    return compile_model("seed_block", "x86-host")


def test_seed_worked_example_exactly(seed_block):
    data = analyze(seed_block, precision="int8", activations_only=True).to_json()
    assert data["before"]["kernels"] == 6 and data["before"]["traffic_bytes"] == 1_705_984
    assert data["after"]["kernels"] == 2 and data["after"]["traffic_bytes"] == 501_760
    assert data["before"]["traffic_bytes"] == 1666 * 1024 and data["after"]["traffic_bytes"] == 490 * 1024
    assert data["before"]["weight_bytes"] == data["after"]["weight_bytes"] == 0


def test_json_contract(seed_block):
    data = analyze(seed_block).to_json()
    assert list(data) == [
        "model", "target", "precision", "precision_note", "planner", "before", "after", "kernels", "decisions",
        "cascade_decisions", "passes", "unknown_bytes_tensors", "accounting", "canonical", "deployment",
    ]  # fmt: skip
    assert data["model"] == "seed_block" and data["target"] == "x86-host"
    assert data["precision"] == "fp32" and data["planner"] == "greedy-inplace"
    assert set(data["before"]) == CONTRACT_SIDE == set(data["after"]) == set(data["canonical"])
    cascade_keys = {"members", "band_rows", "ring_buffer_bytes"}
    assert all(
        set(k) == CONTRACT_KERNEL | {"kernel_class", "efficiency"} | cascade_keys
        for k in data["kernels"]
    )
    assert [k["name"] for k in data["kernels"]] == ["fused_conv_clip", "fused_conv_clip_2"]
    assert data["passes"]["fuse_bn_into_conv"] == 2
    assert data["decisions"] and {"producer", "consumer", "reason"} <= set(data["decisions"][0])
    assert all(k["bound"] in ("memory", "compute") for k in data["kernels"])


def test_far_below_ridge_is_memory_bound_far_above_is_compute_bound():
    target = load_target("x86-host")
    relu, part = single_node("Relu", [(1, 64, 128, 128)], (1, 64, 128, 128))
    (k,) = cost_model(relu, part, target, arena_bytes=10**9).kernels  # activations in DRAM
    assert k.arithmetic_intensity == pytest.approx(1 / 8)  # 1 FLOP per 4 B read + 4 B written
    assert k.arithmetic_intensity < k.ridge_point / 10 and k.bound == "memory"
    assert k.memory_s > k.compute_s
    assert k.latency_s == pytest.approx(k.memory_s + target.perf.dispatch_overhead_s)
    gemm, part = single_node("MatMul", [(1024, 1024), (1024, 1024)], (1024, 1024), weights=1)
    (k,) = cost_model(gemm, part, target).kernels
    assert k.macs == 1024**3 and k.flops == 2 * 1024**3
    assert k.arithmetic_intensity > 10 * k.ridge_point and k.bound == "compute"
    assert k.compute_s == pytest.approx(k.flops / (2 * target.perf.peak_macs_per_s["fp32"]))
    assert k.latency_s == pytest.approx(k.compute_s + target.perf.dispatch_overhead_s)
    assert k.weight_bytes_read == 4 * 1024**2 and k.activation_bytes_read == 4 * 1024**2


def test_energy_is_bytes_per_level_plus_macs():
    target = load_target("cortex-m7")
    gemm, part = single_node("MatMul", [(1, 64), (64, 32)], (1, 32), weights=1)
    side = cost_model(gemm, part, target, "int8")
    (k,) = side.kernels
    perf = target.perf
    levels = {m.name: m for m in perf.memory}
    assert side.activation_level == "dtcm" and side.weight_level == "flash"
    expected = (64 + 32) * levels["dtcm"].pj_per_byte + 64 * 32 * levels["flash"].pj_per_byte
    expected += k.macs * perf.pj_per_mac["int8"]
    assert k.energy_j == pytest.approx(expected * 1e-12)
    assert dict(k.bytes_by_level) == {"dtcm": 96, "flash": 2048}


def test_activation_level_follows_the_arena():
    target = load_target("cortex-m7")
    model, part = single_node("Relu", [(1, 16, 8, 8)], (1, 16, 8, 8))
    assert cost_model(model, part, target, arena_bytes=100_000).activation_level == "dtcm"
    assert cost_model(model, part, target, arena_bytes=300_000).activation_level == "axi_sram"
    assert cost_model(model, part, target, arena_bytes=10**8).activation_level == "axi_sram"
    x86 = load_target("x86-host")
    assert cost_model(model, part, x86, arena_bytes=10**9).activation_level == "dram"


def _sources() -> list:
    return [
        pytest.param(source, id=source.rsplit("/", 1)[-1])
        for source in list(models.MODELS) + [str(p) for p in shared_onnx_models()]
    ]


@pytest.mark.parametrize("source", _sources())
def test_fusion_never_increases_traffic_or_kernels(source):
    for target in ("x86-host", "cortex-m7"):
        result = compile_model(source, target)
        for prec, only in (("int8", True), ("int8", False)):
            before = cost_model(result.original, result.before, result.target, prec, only)
            after = cost_model(result.optimized, result.partition, result.target, prec, only)
            assert after.kernel_count <= before.kernel_count
            assert after.activation_bytes <= before.activation_bytes
            assert after.traffic_bytes <= before.traffic_bytes
            assert after.macs == before.macs


def test_figures_scale_with_precision():
    result = compile_model("seed_block", "cortex-a76")
    m, p, t = result.optimized, result.partition, result.target
    sides = {prec: cost_model(m, p, t, prec, arena_bytes=1) for prec in ("fp32", "fp16", "int8")}
    fp32, fp16, int8 = sides["fp32"], sides["fp16"], sides["int8"]
    assert fp32.activation_bytes == 2 * fp16.activation_bytes == 4 * int8.activation_bytes
    assert fp32.weight_bytes == 2 * fp16.weight_bytes == 4 * int8.weight_bytes
    assert fp32.flops == int8.flops and fp32.macs == int8.macs
    peak = t.perf.peak_macs_per_s
    for prec, side in sides.items():
        for k in side.kernels:
            assert k.compute_s == pytest.approx(k.flops / (2 * peak[prec]))
            assert k.arithmetic_intensity == pytest.approx(k.flops / k.traffic_bytes)
    assert int8.latency_s < fp16.latency_s < fp32.latency_s
    assert int8.energy_j < fp16.energy_j < fp32.energy_j


def test_unknown_precision_raises_naming_supported(seed_block):
    with pytest.raises(OpfuseError, match=r"unknown precision 'bf16'.*fp32, int8"):
        analyze(seed_block, precision="bf16")
    with pytest.raises(OpfuseError, match=r"'fp16' for target 'x86-host'"):
        cost_model(seed_block.optimized, seed_block.partition, seed_block.target, "fp16")
    assert OpfuseError.exit_code == 2


def test_default_precision_is_the_models_own_or_the_targets_first(seed_block):
    assert resolve_precision(seed_block.original, load_target("x86-host"), None) == "fp32"
    assert resolve_precision(seed_block.original, load_target("ethos-u55"), None) == "int8"
    assert analyze(compile_model("seed_block", "ethos-u55")).precision == "int8"


def test_fits_against_target_ram():
    m4 = analyze(compile_model("seed_block", "cortex-m4"), precision="int8")
    assert m4.after.plan.peak_bytes > 196608 and not m4.after.fits
    m7 = analyze(compile_model("seed_block", "cortex-m7"), precision="int8")
    assert m7.after.fits and m7.after.plan.peak_bytes <= 524288
    assert m7.after.to_json()["peak_arena_bytes"] <= m7.before.to_json()["peak_arena_bytes"]


def test_host_target_written_to_user_dir_and_found_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("OPFUSE_TARGETS_DIR", str(tmp_path / "targets"))
    path = write_host_target(figures=FIGURES)
    assert path == tmp_path / "targets" / "host.toml"
    host = load_target("host")
    assert host.name == "host" and host.fusion == load_target("x86-host").fusion
    assert host.perf.peak_macs_per_s == {"fp32": 5e10, "int8": 1e11}
    assert [m.name for m in host.perf.memory] == ["l2", "dram"]
    assert host.perf.weight_level(10**9).name == "dram" and host.perf.weight_level(1).name == "l2"
    assert host.perf.efficiency == {"conv": 0.8, "depthwise": 0.04}
    assert "measured by opfuse calibrate" in host_target_text(FIGURES)
    result = compile_model("seed_block", host)
    assert analyze(result).after.cost.kernel_count == 2


def _with_efficiency(name: str, **efficiency: float):
    target = load_target(name)
    return dataclasses.replace(target, perf=dataclasses.replace(target.perf, efficiency=efficiency))


def test_efficiency_scales_compute_time_exactly():
    plain = load_target("x86-host")
    assert plain.perf.efficiency == {} and plain.perf.efficiency_of("conv") == 1.0  # absent: 1.0
    model, part = single_conv()
    (k1,) = cost_model(model, part, plain).kernels
    assert k1.kernel_class == "conv" and k1.efficiency == 1.0
    assert k1.compute_s == pytest.approx(k1.flops / (2 * plain.perf.peak_macs_per_s["fp32"]))
    slow = _with_efficiency("x86-host", conv=0.25, depthwise=0.5)
    (k4,) = cost_model(model, part, slow).kernels
    assert k4.efficiency == 0.25 and k4.compute_s == pytest.approx(4 * k1.compute_s, rel=1e-12)
    assert k4.memory_s == k1.memory_s and k4.energy_j == k1.energy_j  # time only
    assert k4.ridge_point == pytest.approx(k1.ridge_point / 4)
    assert k4.latency_s == pytest.approx(max(k4.compute_s, k4.memory_s) + slow.perf.dispatch_overhead_s)
    dw_model, dw_part = single_conv(group=32)
    (dw,) = cost_model(dw_model, dw_part, slow).kernels
    assert dw.kernel_class == "depthwise" and dw.efficiency == 0.5
    pw_model, pw_part = single_conv(k=1)
    (pw,) = cost_model(pw_model, pw_part, slow).kernels
    assert pw.kernel_class == "conv1x1" and pw.efficiency == 1.0  # not in the table


def test_kernel_class_is_the_anchors():
    result = compile_model("seed_block", "x86-host")
    side = cost_model(result.optimized, result.partition, result.target)
    # Conv+Clip kernels: the anchor's class, not the epilogue's
    assert [k.kernel_class for k in side.kernels] == ["depthwise", "conv1x1"]
    before = cost_model(result.original, result.before, result.target)
    assert {k.kernel_class for k in before.kernels} == {"depthwise", "conv1x1", "elementwise"}


def test_seed_example_unaffected_by_efficiency():
    result = compile_model("seed_block", _with_efficiency("x86-host", conv=0.1, elementwise=0.2))
    data = analyze(result, precision="int8", activations_only=True).to_json()
    assert (data["before"]["traffic_bytes"], data["after"]["traffic_bytes"]) == (1_705_984, 501_760)
    assert data["before"]["kernels"] == 6 and data["after"]["kernels"] == 2


@pytest.mark.parametrize(
    "table, message",
    [
        ("conv = 0", r"my\.toml: 'perf\.efficiency\.conv' must be > 0"),
        ("depthwise = 1.5", r"my\.toml: 'perf\.efficiency\.depthwise' must be in \(0, 1\]"),
        ("winograd = 0.5", r"my\.toml: unknown kernel class 'perf\.efficiency\.winograd'"),
        ("pool = 'slow'", r"my\.toml: 'perf\.efficiency\.pool' must be a finite number"),
    ],
)
def test_bad_efficiency_is_refused_naming_file_and_key(tmp_path, table, message):
    text = (Path(__file__).resolve().parents[1] / "opfuse/targets/x86-host.toml").read_text()
    path = tmp_path / "my.toml"
    table = f"\n[perf.efficiency]\n{table}\n\n[[perf.memory]]"
    path.write_text(text.replace("\n[[perf.memory]]", table, 1))
    with pytest.raises(OpfuseError, match=message):
        load_target(path)


def test_weights_in_the_last_level_cache_when_they_fit():
    x86 = load_target("x86-host")  # 32 MB L3 holds weights; resnet18 fp32 (45 MB) does not fit
    small = compile_model("mobilenet_v2", x86)
    big = compile_model("resnet18", x86)
    assert cost_model(small.optimized, small.partition, x86).weight_level == "l3"
    assert cost_model(big.optimized, big.partition, x86).weight_level == "dram"
    m7 = load_target("cortex-m7")  # an MCU reads weights from flash in place, whatever their size
    model, part = single_node("MatMul", [(1, 64), (64, 32)], (1, 32), weights=1)
    assert cost_model(model, part, m7, "int8").weight_level == "flash"


def test_measured_efficiency_is_flops_over_time_over_peak():
    from opfuse.measure.calibrate.efficiency import CASES, measure_efficiency

    eff = measure_efficiency(1e10, 1e-6, timer=lambda proto, budget: 1e-3 + 1e-6)
    assert set(eff) == {c[0] for c in CASES} and all(0 < v <= 1 for v in eff.values())
    assert eff["conv"] == 1.0  # ~29 MFLOP in 1 ms against a 20 GFLOP/s peak: capped at 1
    assert eff["pool"] < 0.1 and "pool" in str(eff)
