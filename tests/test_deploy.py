"""The deployment verdict and the three columns in `analyze --json` and its terminal panel, the files
opfuse writes (modes follow the umask), and `explore --serve` serving one page only."""

from __future__ import annotations

import json
import os
import stat
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from opfuse.memory.lifetimes import align

MIB2 = 2 * 1024 * 1024  # STM32H743 (DS12110) and STM32F429ZI (DS9405): 2 MB of flash each
M7_RAM = 512 * 1024  # DS12110: the 512 KB AXI SRAM


@pytest.fixture(scope="module")
def m7_json(tmp_path_factory) -> dict:
    from opfuse.cli import main

    out = tmp_path_factory.mktemp("json") / "a.json"
    # layer by layer (--no-cascades, as `--emit c --no-cascades`): the 1.4 MiB arena does not fit; with row-streamed
    # cascades it would (tests/test_cascade.py)
    main(["analyze", "mobilenet_v2", "--target", "cortex-m7", "--precision", "int8",
          "--no-cascades", "--json", str(out)])  # fmt: skip
    return json.loads(out.read_text())


def test_deployment_keys_and_verdict(m7_json) -> None:
    dep = m7_json["deployment"]
    assert m7_json["accounting"] == "activations+weights"
    assert dep["side"] == "after" and dep["ram_bytes"] == M7_RAM and dep["flash_bytes"] == MIB2
    assert dep["arena_bytes"] == m7_json["after"]["peak_arena_bytes"]
    assert dep["fits_ram"] is (dep["arena_bytes"] <= M7_RAM) is False
    assert dep["ram_margin_bytes"] == M7_RAM - dep["arena_bytes"] < 0
    assert dep["fits_flash"] is (dep["weight_bytes"] <= MIB2) is False
    assert dep["flash_margin_bytes"] == MIB2 - dep["weight_bytes"] < 0


def _stored_int8_weights(proto: onnx.ModelProto) -> int:
    """Bytes of the initializers the nodes read, floats stored as int8: read from the emitted
    ONNX file with onnx's own helpers, not through opfuse's IR or cost model."""
    used = {name for node in proto.graph.node for name in node.input}
    total = 0
    for init in proto.graph.initializer:
        if init.name in used:
            array = numpy_helper.to_array(init)
            total += array.size * (1 if array.dtype.kind == "f" else array.dtype.itemsize)
    return total


def test_weight_bytes_against_the_emitted_model(m7_json, run_cli, tmp_path) -> None:
    out = tmp_path / "m.onnx"
    code, _, err = run_cli("compile", "mobilenet_v2", "--target", "cortex-m7", "-o", str(out))
    assert code == 0, err
    assert m7_json["deployment"]["weight_bytes"] == _stored_int8_weights(onnx.load(out))


def test_peak_tensors_are_those_live_at_the_peak(m7_json) -> None:
    peak = m7_json["deployment"]["peak"]
    names = [k["name"] for k in m7_json["kernels"]]
    assert names[peak["step"]] == peak["kernel"]
    assert all(t["first"] <= peak["step"] <= t["last"] for t in peak["tensors"])
    # no in-place aliases at this step: the live sum is the plan's lower bound
    assert sum(align(t["size_bytes"]) for t in peak["tensors"]) == peak["live_bytes"]
    assert peak["live_bytes"] == m7_json["after"]["arena_lower_bound_bytes"]


def test_peak_step_counts_an_in_place_chain_once() -> None:
    from opfuse.memory import TensorLife, peak_step, plan_tensors

    # a (0-1) is overwritten in place by b (1-2); c (1-3) lives beside them; d (3) after
    lives = (
        TensorLife("a", 1000, 0, 1, "input"),
        TensorLife("b", 1000, 1, 2, "intermediate"),
        TensorLife("c", 500, 1, 3, "intermediate"),
        TensorLife("d", 2000, 3, 3, "output"),
    )
    merged = peak_step(plan_tensors(lives, "greedy-inplace", {"b": "a"}))
    assert (merged.step, merged.live_bytes) == (3, align(500) + align(2000))
    plain = peak_step(plan_tensors(lives, "greedy"))
    assert plain.step == 1 and plain.live_bytes == 2 * align(1000) + align(500)
    assert [t.name for t in plain.tensors] == ["a", "b", "c"]


def test_three_columns(m7_json, run_cli) -> None:
    from opfuse.pipeline import compile_model

    before, canonical, after = m7_json["before"], m7_json["canonical"], m7_json["after"]
    assert set(before) == set(canonical) == set(after)
    result = compile_model("mobilenet_v2", "cortex-m7")
    assert before["kernels"] == len(list(result.original.graph))
    assert canonical["kernels"] == len(list(result.optimized.graph)) > after["kernels"]
    assert canonical["flops"] == after["flops"]  # fusion moves no arithmetic; folding does
    assert before["flops"] > canonical["flops"]
    code, out, _ = run_cli("analyze", "mobilenet_v2", "--target", "cortex-m7", "--precision", "int8",
                           "--no-cascades")
    assert code == 0
    header = next(line for line in out.splitlines() if "imported" in line)
    assert ["imported", "canonical", "fused", "folding", "fusion"] == header.strip(" │|").split()
    assert "does not fit in 512.0 KiB of RAM" in out and "of flash" in out and "Peak at step" in out


def test_time_split_follows_the_per_kernel_rule() -> None:
    from opfuse.analysis import analyze
    from opfuse.pipeline import compile_model

    for target in ("cortex-m7", "npu-generic"):
        a = analyze(compile_model("mobilenet_v2", target), precision="int8")
        t = a.to_json()["deployment"]["time"]
        ks = a.after.cost.kernels
        assert t["memory_bound_kernels"] == sum(k.memory_s > k.compute_s for k in ks)
        want = "memory" if sum(k.memory_s for k in ks) > sum(k.compute_s for k in ks) else "compute"
        assert t["bound"] == want
        assert (t["intensity"] < t["ridge_point"]) == (want == "memory")


def test_activations_only_is_recorded_and_flash_unknown(run_cli) -> None:
    code, out, _ = run_cli("analyze", "seed_block", "--activations-only", "--json", "-")
    data = json.loads(out)
    assert code == 0 and data["accounting"] == "activations-only"
    assert data["after"]["weight_bytes"] == 0 < data["deployment"]["weight_bytes"]
    assert data["deployment"]["flash_bytes"] is None and data["deployment"]["fits_flash"] is None
    code, out, _ = run_cli("analyze", "seed_block", "--activations-only")
    assert "flash size unknown" in out and "--activations-only" in out


# -- files ---------------------------------------------------------------------------------------


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_written_files_follow_the_umask(run_cli, tmp_path) -> None:
    with umask(0o022):
        model, page, explorer, c = (tmp_path / n for n in ("m.onnx", "r.html", "e.html", "c"))
        assert run_cli("compile", "seed_block", "-o", str(model))[0] == 0
        assert run_cli("analyze", "seed_block", "--html", str(page), "--json", str(tmp_path / "a.json"))[0] == 0
        assert run_cli("explore", "-o", str(explorer))[0] == 0
        assert run_cli("compile", "seed_block", "--emit", "c", "-o", str(c))[0] == 0
        for path in (model, page, explorer, tmp_path / "a.json", *c.iterdir()):
            assert _mode(path) == 0o644, path
        assert _mode(c) == 0o755
    with umask(0o077):
        assert run_cli("compile", "seed_block", "-o", str(model))[0] == 0
        assert _mode(model) == 0o600


# -- explore --serve -----------------------------------------------------------------------------


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_serve_answers_only_the_page(tmp_path) -> None:
    from opfuse.report.explorer import page_server

    page = tmp_path / "explorer.html"
    page.write_text("<!DOCTYPE html><title>p</title>", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("private", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    server = page_server(page, 0)
    assert server.server_address[0] == "127.0.0.1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert _get(f"{base}/explorer.html") == (200, page.read_bytes())
        assert _get(f"{base}/") == (200, page.read_bytes())
        for path in ("/secret.txt", "/sub/", "/sub", "/../secret.txt", "/explorer.html/x",
                     "/%2e%2e/secret.txt", "/index.html"):  # fmt: skip
            assert _get(base + path)[0] == 404, path
    finally:
        server.shutdown()
        server.server_close()


def test_a_fusion_that_raises_the_peak_is_said_with_both_figures(m7_json) -> None:
    """The unfused (one kernel per node) arena is in the deployment record, and a fused peak above
    it gets its own line naming both figures and the step; at or below it, no line."""
    from opfuse.report.verdict import deployment_lines

    dep = m7_json["deployment"]
    assert dep["unfused_arena_bytes"] == m7_json["canonical"]["peak_arena_bytes"]
    keys = [line["key"] for line in deployment_lines(dep, "cortex-m7")]
    assert ("fusion_peak" in keys) is (dep["arena_bytes"] > dep["unfused_arena_bytes"])
    raised = {**dep, "unfused_arena_bytes": dep["arena_bytes"] * 3 // 4}
    (line,) = [x for x in deployment_lines(raised, "cortex-m7") if x["key"] == "fusion_peak"]
    assert "+33%" in line["text"] and f"step {dep['peak']['step']}" in line["text"]
    assert "--no-fuse" in line["text"]
    lower = {**dep, "unfused_arena_bytes": dep["arena_bytes"]}
    assert "fusion_peak" not in [x["key"] for x in deployment_lines(lower, "cortex-m7")]
