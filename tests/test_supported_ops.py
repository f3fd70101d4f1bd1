"""docs/supported_ops.md is generated from the op registry, the named constraints and the target
files (opfuse/docs/supported_ops.py), and the committed page is the current one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from opfuse.docs.supported_ops import COMMAND, builtin_targets, render
from opfuse.fusion.checks import CONSTRAINTS
from opfuse.fusion.constraints import FAMILIES, HEAD
from opfuse.fusion.pattern_checks import PATTERN_CONSTRAINTS
from opfuse.fusion.types import REASONS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "supported_ops.md"


def test_the_committed_page_is_current() -> None:
    assert PAGE.read_text() == render(), f"docs/supported_ops.md is out of date; run: {COMMAND}"


def test_the_page_names_every_target_constraint_and_reason() -> None:
    page = render()
    for target in builtin_targets():
        assert f"### {target.name}\n" in page
    for c in CONSTRAINTS:
        assert f"`{c.name}`" in page and c.family in FAMILIES and c.reason in REASONS
    for reason in REASONS:
        assert f"| `{reason}` |" in page
    assert len({c.name for c in CONSTRAINTS}) == len(CONSTRAINTS)


def _section(target: str) -> str:
    return render().split(f"### {target}\n")[1].split("\n### ")[0]


def test_the_page_follows_the_target_files() -> None:
    # cortex-m4's CMSIS-NN kernels take only a clamp after an anchor; cortex-a76 every class
    assert "| epilogues an anchor takes | clamp (Clip, Relu) |" in _section("cortex-m4")
    a76 = _section("cortex-a76")
    assert "activation (Abs, " in a76 and "| most ops in one kernel (max_chain) | 4 |" in a76


def test_the_command_prints_and_writes_the_page(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "opfuse.docs"], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert run.returncode == 0 and run.stdout == render()
    out = tmp_path / "page.md"
    run = subprocess.run([sys.executable, "-m", "opfuse.docs", "--write", str(out)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0 and out.read_text() == render()
    run = subprocess.run([sys.executable, "-m", "opfuse.docs", "--write", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


def _pattern(template: str) -> re.Pattern[str]:
    """The messages ``template`` (whole, its head included) formats to; a field may be empty."""
    parts = re.split(r"\{[a-z_]+\}", template)
    return re.compile("(.*?)".join(re.escape(p) for p in parts) + r"\Z", re.S)


PATTERNS = [(c.reason, _pattern(HEAD + c.message)) for c in CONSTRAINTS] + [
    (c.reason, _pattern(c.template)) for c in PATTERN_CONSTRAINTS]


def test_every_refusal_reads_as_its_constraint_on_the_page() -> None:
    # the page's templates are what a user sees: every refused edge of the built-in models, on
    # every target, is one of them, with the constraint's reason code
    from opfuse.api import compile as compile_model

    seen = set()
    for model in ("seed_block", "seed_pipeline", "ds_cnn", "tiny_transformer"):
        for target in builtin_targets():
            for d in compile_model(model, target.name).partition.decisions:
                if d.fused or d.reason == "other_producer_fused" or d.reason.startswith("cascade"):
                    continue
                match = [r for r, p in PATTERNS if p.match(d.message)]
                assert d.reason in match, (d.reason, d.message)
                seen.add(d.reason)
    assert {"multiple_consumers", "not_supported_by_target", "layout_change"} <= seen
