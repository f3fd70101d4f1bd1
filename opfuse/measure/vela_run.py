"""Run Arm Vela on a ``.tflite`` with the configuration a target names (``[perf.vela]``), in a
temporary directory, and read its estimate back (``opfuse.cost.vela``). Vela is optional: it comes
with ``pip install 'opfuse[vela]'``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from opfuse.cost.vela import VelaRun, read_output_dir
from opfuse.errors import OpfuseError
from opfuse.targets import Target

INSTALL_HINT = "Vela is not installed: pip install 'opfuse[vela]' (ethos-u-vela)"


class VelaMissing(OpfuseError):
    """Vela is not installed (the CLI prints INSTALL_HINT and exits 2)."""


def vela_available() -> bool:
    """Whether ethos-u-vela is installed. find_spec of a dotted name imports its parent package
    and raises ModuleNotFoundError when that is absent, so the parent is asked first."""
    try:
        return (importlib.util.find_spec("ethosu") is not None
                and importlib.util.find_spec("ethosu.vela") is not None)
    except (ImportError, ValueError):
        return False


def vela_command(model: str | Path, target: Target, output_dir: str | Path) -> list[str]:
    perf = target.perf
    if perf is None or not perf.vela:
        raise OpfuseError(f"target '{target.name}' names no Vela configuration ([perf.vela])")
    cfg = perf.vela
    # the `vela` script of this interpreter's environment, found also when that environment is
    # not on PATH; else its entry point called directly (ethosu.vela.vela has no __main__ block,
    # so `python -m ethosu.vela.vela` exits 0 having done nothing)
    beside = Path(sys.executable).with_name("vela")
    exe = str(beside) if beside.is_file() else shutil.which("vela")
    head = [exe] if exe else [sys.executable, "-c",
                              "import sys; from ethosu.vela.vela import main; sys.exit(main())"]
    return [*head, str(model), "--accelerator-config", cfg["accelerator"], "--config",
            cfg["config"], "--system-config", cfg["system_config"], "--memory-mode",
            cfg["memory_mode"], "--output-dir", str(output_dir), "--verbose-performance"]


def run_vela(model: str | Path, target: Target, timeout_s: float = 600.0) -> VelaRun:
    """Vela's estimate of ``model`` on ``target`` (raises VelaMissing when Vela is absent)."""
    model = Path(model)
    if model.suffix.lower() != ".tflite":
        raise OpfuseError(f"{model}: --compare vela needs a .tflite model (Vela reads only TFLite)")
    if not vela_available():
        raise VelaMissing(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="opfuse-vela-") as tmp:
        cmd = vela_command(model, target, tmp)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OpfuseError(f"{model}: Vela did not run ({exc})") from exc
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["?"]
            raise OpfuseError(f"{model}: Vela failed (exit {done.returncode}): {last[0]}")
        run = read_output_dir(tmp, model.stem)
    return VelaRun(run.summary, run.layers, tuple(cmd[1:]))


def compare_vela(result, analysis, vela: VelaRun | None = None):  # noqa: ANN001, ANN201
    """``analysis`` of ``result`` (a compiled ``.tflite``) beside Vela's estimate of the same file
    (runs Vela unless ``vela`` is given): an ``opfuse.cost.compare.Comparison``."""
    from opfuse.cost.compare import compare, tflite_op_outputs
    from opfuse.ir.provenance import source_map

    target = result.target
    if vela is None:
        vela = run_vela(result.source, target)
    if analysis.cascades:  # rows are per TFLite operator: compare the layer-by-layer kernels (a
        # cascade spans many operators; its arena is only smaller, so the SRAM figure is an upper one)
        from opfuse.analysis import analyze

        analysis = analyze(result, precision=analysis.precision, planner=analysis.planner,
                           activations_only=analysis.activations_only, cascades=False)
    return compare(analysis, source_map(result.optimized), tflite_op_outputs(result.source), vela,
                   target.perf.vela if target.perf is not None else {})
