"""The golden gate of the C backend (issue 28): a hash of the generated ``model.c`` and
``weights.c`` per model, target and cascade setting, so a structural change to the backend that
should not change the C is shown not to, and one that should names exactly which builds moved.

    python -m tests.helpers.golden            # print what differs from tests/data/golden_c.json
    python -m tests.helpers.golden --write    # record the current C as the gate (after a change
                                              # that is meant to alter the C: say so in its commit)
    python -m tests.helpers.golden --all      # also the three largest shared models (~3 min)

The built-in models are always in the gate; the shared corpus (``../shared/models``) when present.
The seven slowest models (LARGE) take ~200 s of the ~215 s and are left to ``--all`` (and to
``OPFUSE_GOLDEN_ALL=1`` for the test), so the gate stays cheap in CI (~12 s).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.shared import SHARED_MODELS

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_c.json"
TARGETS = ("x86-host", "cortex-m4", "cortex-m7", "cortex-m55")  # every ISA module of the seam
BUILTIN = ("seed_block", "ds_cnn", "tiny_transformer", "mobilenet_v2", "resnet18")
# the slowest to generate (weights.c text, 5-40 s each): in the gate with --all only
LARGE = ("mobilenet_v2", "resnet18", "light_densenet121.onnx", "light_inception_v2.onnx",
         "light_resnet50.onnx", "light_shufflenet.onnx", "light_squeezenet.onnx")


def models(everything: bool = False) -> list[tuple[str, str]]:
    """(key name, source) of every model in the gate: built-ins, then the shared corpus."""
    found = [(name, name) for name in BUILTIN]
    found += [(p.name, str(p)) for p in sorted(SHARED_MODELS.glob("*/*"))
              if p.suffix in (".onnx", ".tflite")]
    return [(name, src) for name, src in found if everything or name not in LARGE]


def digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in ("model.c", "weights.c"):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]


def hashes(name: str, source: str) -> Iterator[tuple[str, str]]:
    """``model|target|cascades|nocascades`` -> digest, or ``error: <exception type>`` when the
    C backend refuses the model on that target (a refusal is part of the gate too)."""
    import opfuse
    from opfuse.backends.c.emit import generate

    for target in TARGETS:
        result = opfuse.compile(source, target=target)
        for cascades in (True, False):
            key = f"{name}|{target}|{'cascades' if cascades else 'no-cascades'}"
            try:
                value = digest(generate(result, cascades=cascades)[0])
            except Exception as exc:  # noqa: BLE001 - the refusal's kind is what is recorded
                value = f"error: {type(exc).__name__}"
            yield key, value


def current(everything: bool = False) -> dict[str, str]:
    return {k: v for name, src in models(everything) for k, v in hashes(name, src)}


def recorded() -> dict[str, str]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


def differences(now: dict[str, str], then: dict[str, str]) -> list[str]:
    """One line per build whose C differs from the record (builds not recorded are new)."""
    return [f"{k}: {then.get(k, 'not recorded')} -> {v}" for k, v in now.items()
            if then.get(k) != v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="record the current C as the gate")
    ap.add_argument("--all", action="store_true", help="include the largest shared models")
    args = ap.parse_args(argv)
    now = current(args.all or bool(os.environ.get("OPFUSE_GOLDEN_ALL")))
    if args.write:
        merged = {**recorded(), **now}
        GOLDEN.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        print(f"recorded {len(now)} builds in {GOLDEN}")
        return 0
    diff = differences(now, recorded())
    print("\n".join(diff) or f"all {len(now)} builds byte-identical to the record")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
