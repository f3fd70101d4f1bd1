"""``[perf.npu]`` and ``[perf.vela]`` in a target file, and the block-granular cycle model
(``opfuse.cost.npu``) on single layers; the model against Vela's own figures is in test_vela.py."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from opfuse.cost import npu as npu_cost
from opfuse.errors import OpfuseError
from opfuse.targets import load_target
from tests.helpers.targets import GOOD, PERF, write

NPU = """
[perf.vela]
accelerator = "ethos-u55-128"
config = "Arm/vela.ini"
system_config = "Ethos_U55_High_End_Embedded"
memory_mode = "Shared_Sram"
[perf.npu]
ofm_ublock = [1, 2, 8]
ifm_depth_step = 32
partkernel_depth_step = 8
kernel_elements_per_step = 4
cycles_per_step = 4
weight_cycles_per_ublock = 32
output_cycles_per_element = { default = 0.5, Add = 1.5 }
lowered_ops = { Softmax = 27 }
weight_compression = "entropy"
"""


def test_npu_and_vela_tables_parse(tmp_path):
    perf = load_target(write(tmp_path, GOOD + PERF + NPU)).perf
    assert perf.vela["system_config"] == "Ethos_U55_High_End_Embedded"
    assert perf.npu.ofm_ublock == (1, 2, 8)
    assert perf.npu.output_cycles("Add") == 1.5 and perf.npu.output_cycles("Relu") == 0.5
    assert load_target(write(tmp_path, GOOD + PERF)).perf.npu is None


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("cycles_per_step = 4", "cycles_per_step = 0", r"'perf.npu.cycles_per_step' must be a positive"),
        ("ofm_ublock = [1, 2, 8]", "ofm_ublock = [2, 8]", r"ofm_ublock' must be \[height"),
        ('"entropy"', '"zip"', r"weight_compression' must be one of"),
        ("lowered_ops", "lowered", r"unknown key 'perf.npu.lowered'"),
        ('memory_mode = "Shared_Sram"\n', "", r"missing key 'perf.vela.memory_mode'"),
        ("accelerator =", "accel =", r"unknown key 'perf.vela.accel'"),
    ],
)
def test_bad_npu_tables_are_refused(tmp_path, old, new, message):
    with pytest.raises(OpfuseError, match=message):
        load_target(write(tmp_path, GOOD + PERF + NPU.replace(old, new)))


def _conv(cin: int, cout: int, k: int, hw: int, group: int = 1) -> ir.Node:
    x = ir.Value(name="x", shape=ir.Shape([1, cin, hw, hw]))
    w = ir.Value(name="w", shape=ir.Shape([cout, cin // group, k, k]))
    y = ir.Value(name="y", shape=ir.Shape([1, cout, hw, hw]))
    node = ir.Node("", "Conv", [x, w], attributes=[ir.AttrInt64("group", group)], outputs=[y])
    return node


@pytest.fixture(scope="module")
def u55():
    return load_target("ethos-u55").perf.npu


def test_dense_conv_reaches_peak_only_with_32_input_channels(u55):
    """128 MACs/cycle (2x1x8 micro-block x 32 channels / 4 cycles) when the input is 32 deep; a
    1-channel input pays the part-kernel granule (8 channels x 4 kernel elements per step): its 9
    kernel elements take 3 steps instead of 9, for 1/32 of the MACs."""
    full = _conv(32, 64, 3, 16)
    macs = 32 * 64 * 9 * 16 * 16
    assert npu_cost.mac_cycles(full, u55) == pytest.approx(macs / 128)
    thin = _conv(1, 64, 3, 16)
    assert npu_cost.mac_cycles(thin, u55) == pytest.approx(macs / 128 * 3 / 9)


def test_depthwise_runs_below_dense_rate(u55):
    dw = _conv(64, 64, 3, 16, group=64)
    macs = 64 * 9 * 16 * 16
    # 16 outputs x 4 kernel elements per 4 cycles, 9 elements in 3 steps: 12 MACs/cycle
    assert npu_cost.mac_cycles(dw, u55) == pytest.approx(macs / 12)


def test_entropy_coded_weights_shrink_with_their_entropy(u55):
    rng = np.random.default_rng(0)
    uniform = ir.Value(name="u", const_value=ir.tensor(rng.integers(-128, 128, 4096, dtype=np.int8)))
    sparse = ir.Value(name="s", const_value=ir.tensor(
        np.where(rng.random(4096) < 0.9, 0, 1).astype(np.int8)))
    assert npu_cost.encoded_bytes(uniform, 4096, u55) > 0.95 * 4096
    assert npu_cost.encoded_bytes(sparse, 4096, u55) < 0.5 * 4096
