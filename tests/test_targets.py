"""Target profiles are data: every file loads, carries its source, and bad files are refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from opfuse.errors import OpfuseError
from opfuse.targets import FusionCaps, Target, list_targets, load_target

REQUIRED = {
    "cortex-m4",
    "cortex-m7",
    "ethos-u55",
    "npu-generic",
    "cortex-a76",
    "mobile-gpu",
    "x86-host",
}
TARGETS_DIR = Path(__file__).resolve().parents[1] / "opfuse" / "targets"


def test_required_targets_exist():
    assert REQUIRED <= set(list_targets())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_target_loads_with_source_and_perf_placeholder(name):
    target = load_target(name)
    assert isinstance(target, Target) and isinstance(target.fusion, FusionCaps)
    assert target.name == name and target.description and len(target.source) > 40
    assert target.precisions and target.fusion.max_chain >= 2
    assert not target.fusion.recompute
    assert "# [perf]" in (TARGETS_DIR / f"{name}.toml").read_text()


def test_capabilities_match_the_brief():
    m7, gpu, npu = (
        load_target("cortex-m7").fusion,
        load_target("mobile-gpu").fusion,
        load_target("npu-generic").fusion,
    )
    assert m7.anchor_epilogue == ("clamp",) and not m7.residual_add
    assert load_target("cortex-m4").fusion == m7
    assert (
        gpu.residual_add
        and gpu.elementwise_chains
        and set(gpu.anchor_epilogue) == {"clamp", "activation", "arith"}
    )
    assert npu.anchor_pool and "arith" in npu.anchor_epilogue
    u55 = load_target("ethos-u55").fusion
    assert "activation" in u55.anchor_epilogue and "activation" in u55.pool_epilogue
    assert "activation" in u55.elementwise_epilogue and not u55.elementwise_chains
    x86 = load_target("x86-host").fusion
    assert x86.residual_add and "activation" in x86.anchor_epilogue


def test_unknown_target_lists_known_ones():
    with pytest.raises(OpfuseError, match="unknown target 'nope'.*cortex-m7"):
        load_target("nope")


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


def test_a_target_file_by_path(tmp_path):
    target = load_target(write(tmp_path, GOOD))
    assert target.name == "my-npu" and target.fusion.anchor_epilogue == ("clamp",)
    assert target.fusion.max_chain == FusionCaps().max_chain


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD + "bogus = 1\n", r"my-npu.toml: unknown key 'fusion.bogus'"),
        ("colour = 'red'\n" + GOOD, r"my-npu.toml: unknown key 'colour'"),
        (
            GOOD.replace('["clamp"]', '["clamp", "magic"]'),
            r"'fusion.anchor_epilogue' must be a list of",
        ),
        (GOOD + "max_chain = 0\n", r"'fusion.max_chain' must be an integer >= 1"),
        (GOOD + "residual_add = 'yes'\n", r"'fusion.residual_add' must be true or false"),
        (GOOD + "recompute = true\n", r"recompute = true' is not implemented"),
        (GOOD.replace('source = "a datasheet"\n', ""), r"missing key 'source'"),
        (GOOD.replace('["int8"]', "[]"), r"'precisions' must be a non-empty list"),
        ("name = \n", r"my-npu.toml: not valid TOML"),
    ],
)
def test_bad_target_files_are_refused_naming_file_and_key(tmp_path, text, message):
    with pytest.raises(OpfuseError, match=message):
        load_target(write(tmp_path, text))


def test_missing_target_file(tmp_path):
    with pytest.raises(OpfuseError, match="no such target file"):
        load_target(tmp_path / "absent.toml")
