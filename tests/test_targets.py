"""Target profiles are data: every file loads, carries its source, and bad files are refused clearly."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from opfuse.errors import OpfuseError
from opfuse.targets import (
    FusionCaps,
    MemoryLevel,
    Perf,
    Target,
    list_targets,
    load_target,
    target_file,
)
from tests.helpers.targets import GOOD, PERF, write

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
def test_target_loads_with_source(name):
    target = load_target(name)
    assert isinstance(target, Target) and isinstance(target.fusion, FusionCaps)
    assert target.name == name and target.description and len(target.source) > 40
    assert target.precisions and target.fusion.max_chain >= 2
    assert not target.fusion.recompute


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_target_has_perf_numbers_with_sources(name):
    perf = load_target(name).perf
    assert isinstance(perf, Perf) and perf.clock_hz > 0 and perf.ram_bytes > 0
    assert set(perf.peak_macs_per_s) == set(perf.pj_per_mac) == set(load_target(name).precisions)
    assert all(isinstance(m, MemoryLevel) and m.read_bytes_per_s > 0 for m in perf.memory)
    assert perf.weight_level() and perf.activation_level(0).write_bytes_per_s > 0
    # every number in [perf] carries its source: a comment on its line or the line above
    lines = (TARGETS_DIR / f"{name}.toml").read_text().splitlines()
    start = lines.index("[perf]")
    for i, line in enumerate(lines[start:], start):
        if "=" in line and not line.lstrip().startswith("#") and any(c.isdigit() for c in line):
            if line.split("=", 1)[0].strip() in ("name", "holds"):
                continue
            assert "#" in line or lines[i - 1].lstrip().startswith("#"), f"{name}: no source: {line}"


def test_parts_named_in_the_brief():
    assert load_target("cortex-m7").perf.ram_bytes == 512 * 1024  # STM32H743 AXI SRAM
    assert load_target("ethos-u55").perf.clock_hz == 500e6  # Vela Ethos_U55_High_End_Embedded
    u55 = {m.name: m for m in load_target("ethos-u55").perf.memory}
    assert u55["sram"].read_bytes_per_s == 4e9 and u55["flash"].read_bytes_per_s == 0.5e9


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


@pytest.mark.parametrize("name", list_targets())
def test_every_target_says_whether_it_cascades_and_why(name):
    # the [fusion] table sets cascade explicitly, under a comment giving the reason
    path = Path(str(resources.files("opfuse.targets"))) / f"{name}.toml"
    if not path.is_file():
        pytest.skip("a user target")
    lines = path.read_text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("cascade =")]
    assert lines[at - 1].startswith("#") and "ascade" in " ".join(lines[at - 4 : at])
    caps = load_target(name).fusion
    assert caps.cascade == (lines[at].split("=")[1].split("#")[0].strip() == "true")
    assert caps.cascade_max_anchors >= 1 and caps.cascade_band_rows >= 1


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
        (GOOD + "cascade = 1\n", r"'fusion.cascade' must be true or false"),
        (GOOD + "cascade_max_anchors = 0\n", r"'fusion.cascade_max_anchors' must be an integer"),
        (GOOD + "cascade_band_rows = true\n", r"'fusion.cascade_band_rows' must be an integer"),
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


def test_perf_table_parses(tmp_path):
    perf = load_target(write(tmp_path, GOOD + PERF)).perf
    assert perf == Perf(
        1e9, 1024, 1e-6, {"int8": 1e9}, {"int8": 0.2},
        (MemoryLevel("sram", 1024, 1e9, 1e9, 1.0, ("activations", "weights")),),
    )  # fmt: skip
    assert load_target(write(tmp_path, GOOD)).perf is None


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("clock_hz = 1e9", "clock = 1e9", r"unknown key 'perf.clock'"),
        ("{ int8 = 1e9 }", "{ fp32 = 1e9 }", r"'perf.peak_macs_per_s' has no entry for int8"),
        ("{ int8 = 0.2 }", "{ int8 = 0.2, fp16 = 1 }", r"'perf.pj_per_mac.fp16' is not one of"),
        ("read_bytes_per_s = 1e9", "read_bytes_per_s = 0", r"read_bytes_per_s' must be > 0"),
        ("write_bytes_per_s = 1e9", "write_bytes_per_s = 0", r"holds activations, so it needs"),
        ('"activations", "weights"', '"weights"', r"no 'perf.memory' level holds activations"),
        ('"activations", "weights"', '"code"', r"holds' must be a non-empty list"),
        ("pj_per_byte = 1.0\n", "", r"missing key 'perf.memory\[0\].pj_per_byte'"),
        ("ram_bytes = 1024", "ram_bytes = 'big'", r"'perf.ram_bytes' must be a finite number"),
    ],
)
def test_bad_perf_tables_are_refused(tmp_path, old, new, message):
    with pytest.raises(OpfuseError, match=message):
        load_target(write(tmp_path, GOOD + PERF.replace(old, new)))


def test_user_target_dir_is_searched_after_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("OPFUSE_TARGETS_DIR", str(tmp_path))
    (tmp_path / "my-npu.toml").write_text(GOOD)
    (tmp_path / "cortex-m7.toml").write_text(GOOD)  # a built-in name: the package's file wins
    assert "my-npu" in list_targets() and load_target("my-npu").name == "my-npu"
    assert load_target("cortex-m7").name == "cortex-m7"


def test_missing_target_file(tmp_path):
    with pytest.raises(OpfuseError, match="no such target file"):
        load_target(tmp_path / "absent.toml")


@pytest.mark.parametrize("key", ["clock_hz", "dispatch_overhead_s", "read_bytes_per_s"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_target_number_that_is_not_finite_is_one_line(tmp_path, key, value):
    """TOML's nan and inf passed the "> 0" checks (nan compares false with everything) and
    analyze --html then ended in a traceback; they are refused naming the file and the key."""
    lines = target_file("cortex-m7").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"{key} = "))
    lines[first] = f"{key} = {value}"
    path = tmp_path / "bad.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(OpfuseError, match="must be a finite number") as err:
        load_target(path)
    assert str(path) in str(err.value) and key in str(err.value)
