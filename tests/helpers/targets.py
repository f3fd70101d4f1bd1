"""Target files written for a test: a valid one and its [perf] table (tests/test_targets.py,
tests/test_npu_cost.py)."""

from __future__ import annotations

from pathlib import Path

GOOD = """
name = "my-npu"
source = "a datasheet"
precisions = ["int8"]
[fusion]
anchor_epilogue = ["clamp"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my-npu.toml"
    path.write_text(text)
    return path


PERF = """
[perf]
clock_hz = 1e9
ram_bytes = 1024
dispatch_overhead_s = 1e-6
peak_macs_per_s = { int8 = 1e9 }
pj_per_mac = { int8 = 0.2 }
[[perf.memory]]
name = "sram"
size_bytes = 1024
read_bytes_per_s = 1e9
write_bytes_per_s = 1e9
pj_per_byte = 1.0
holds = ["activations", "weights"]
"""
