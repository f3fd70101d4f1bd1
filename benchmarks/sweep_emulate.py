"""`opfuse sweep --emulate` against `opfuse validate --backend c --emulate`, for every shared int8
`.tflite` on cortex-m4 and cortex-m7: one sweep of them all, then one validate process per model
and target, and the figures compared (instructions per inference, ELF flash, RAM and arena, and
the verdict). tests/test_sweep.py checks one model; this checks the corpus (minutes of QEMU).

    PYTHONPATH=$PWD python benchmarks/sweep_emulate.py [--jobs 2] [--targets cortex-m4,cortex-m7]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "models" / "tflite"
FIELDS = ("emu_instructions", "emu_flash_bytes", "emu_ram_bytes", "emu_arena_bytes")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def validate_figures(model: Path, target: str) -> dict:
    """What `validate --backend c --emulate` prints, parsed."""
    proc = subprocess.run([sys.executable, "-m", "opfuse", "validate", str(model), "--backend", "c",
                           "--emulate", "--target", target], env=_env(), capture_output=True,
                          text=True, check=False)
    text = proc.stdout
    totals = re.findall(r"^\s+total\s+([\d,]+)", text, re.M)
    arena = re.search(r"^\s+RAM\s+arena\s+([\d,]+)", text, re.M)
    count = re.search(r"invoke total: ([\d,]+) instructions", text)
    if proc.returncode not in (0, 1) or not (totals and arena and count):
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    n = lambda s: int(s.replace(",", ""))  # noqa: E731
    return {"emu_instructions": n(count.group(1)), "emu_flash_bytes": n(totals[0]),
            "emu_ram_bytes": n(totals[1]), "emu_arena_bytes": n(arena.group(1)),
            "match": "result: match" in text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--targets", default="cortex-m4,cortex-m7")
    args = parser.parse_args()
    models = sorted(p for p in SHARED.glob("*.tflite") if "int8" in p.name or "quant" in p.name
                    or p.name in ("kws_ref_model.tflite", "person_detect.tflite",
                                  "mcunet_vww.tflite"))
    if not models:
        sys.exit(f"{SHARED}: no shared int8 .tflite models")
    with tempfile.TemporaryDirectory(prefix="opfuse-sweep-emu-") as tmp:
        out = Path(tmp) / "emu.json"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "opfuse", "sweep", *map(str, models), "--targets",
                        args.targets, "--precisions", "int8", "--emulate", "--jobs", args.jobs,
                        "-o", str(out), "--quiet"], env=_env(), check=True, capture_output=True)
        print(f"sweep --emulate of {len(models)} models: {time.perf_counter() - t0:.0f} s")
        rows = {(Path(r["model"]).name, r["target"]): r for r in json.loads(out.read_text())}
    equal = 0
    for model in models:
        for target in args.targets.split(","):
            row, want = rows[(model.name, target)], validate_figures(model, target)
            got = {k: row[k] for k in FIELDS}
            same = "error" not in want and got == {k: want[k] for k in FIELDS}
            verdict_ok = "error" not in want and (row["emu_verdict"] in ("bit-exact",
                                                  "within tolerance")) == want["match"]
            equal += same and verdict_ok
            print(f"  {model.name:<32} {target:<10} sweep {row['emu_verdict']:<16} "
                  f"{got['emu_instructions']!s:>12} instr; validate "
                  f"{want.get('emu_instructions', want.get('error'))!s:>12}; "
                  f"{'equal' if same and verdict_ok else 'DIFFERENT'}")
    print(f"{equal} of {len(models) * len(args.targets.split(','))} equal")


if __name__ == "__main__":
    main()
