"""The Cortex-M cost table (opfuse.measure.calibrate.mcu_probe): written into a target file between its markers
(replaced, never duplicated), read back by the target loader in seconds at the part's clock, and
the committed tables of both Cortex-M targets make the cost model price opfuse's own int8 C."""

from __future__ import annotations

from pathlib import Path

import pytest

from opfuse.measure.calibrate.mcu_probe import (
    BEGIN,
    CYCLES_PER_INSTRUCTION,
    END,
    predicted_instructions,
    table_lines,
    write_table,
)
from opfuse.targets import load_target, parse_target

TARGETS = Path(__file__).resolve().parents[1] / "opfuse" / "targets"
FIGURES = {"dispatch_overhead_s": 9.0, "kernels": 3,
           "mac_s": {"depthwise": 1.5, "gemm": 3.0}, "output_s": {"depthwise": 20.0},
           "loop_s": {"gemm": 14.0}, "tail_s": {}}


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_table_round_trips_through_the_target_file(target: str, tmp_path: Path) -> None:
    path = tmp_path / f"{target}.toml"
    path.write_text((TARGETS / f"{target}.toml").read_text())
    clock = load_target(target).perf.clock_hz
    write_table(path, table_lines(target, FIGURES, clock))
    write_table(path, table_lines(target, FIGURES, clock))  # again: replaced, not added
    text = path.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    int8c = parse_target(path).perf.int8c
    cpi = CYCLES_PER_INSTRUCTION[target]
    assert int8c.mac_s["depthwise"] == pytest.approx(1.5 * cpi / clock, rel=1e-3)
    assert int8c.loop_s["gemm"] == pytest.approx(14.0 * cpi / clock, rel=1e-3)
    assert int8c.dispatch_overhead_s == pytest.approx(9.0 * cpi / clock, rel=1e-3)
    # seconds back to instructions: the clock and the assumed CPI undone
    assert predicted_instructions(int8c.mac_s["gemm"] * clock, target) == pytest.approx(3.0,
                                                                                      rel=1e-3)


@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
def test_committed_table_prices_the_int8_paths(target: str) -> None:
    int8c = load_target(target).perf.int8c
    assert int8c is not None, "run python benchmarks/mcu_calibrate.py"
    for path in ("conv_lanes", "pointwise", "conv_rows", "depthwise", "gemm", "pool"):
        assert int8c.mac_s.get(path, 0) > 0, path
    text = (TARGETS / f"{target}.toml").read_text()
    assert f"x {CYCLES_PER_INSTRUCTION[target]} cycles per instruction" in text
