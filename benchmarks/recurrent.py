"""LSTM and GRU C kernels (opfuse/backends/c/recurrent.py) vs onnxruntime, one thread.

    PYTHONPATH=$PWD python benchmarks/recurrent.py [--repeats N]

Per case (keyword-spotting and VAD sizes, random weights, seed 0): the generated C
(``opfuse.api.bench``: warm medians of alternating blocks, first run of each dropped) beside
onnxruntime at ORT_ENABLE_ALL and ORT_DISABLE_ALL, and C / ORT_ENABLE_ALL (< 1: the C is faster).
The models are written by the tests' builder (tests/helpers/recurrent.py), so run from the repo.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import onnx

from opfuse import api
from opfuse.measure.calibrate.host import cpu_name
from tests.helpers.recurrent import recurrent_model

CASES = {  # steps x input -> hidden
    "lstm 100x40->64 (KWS)": {"op": "LSTM", "steps": 100, "size": 40, "hidden": 64},
    "gru 100x40->64 (KWS)": {"op": "GRU", "steps": 100, "size": 40, "hidden": 64},
    "lstm 1x128->128 (VAD step)": {"op": "LSTM", "steps": 1, "size": 128, "hidden": 128},
    "lstm bidir 50x64->64": {"op": "LSTM", "steps": 50, "size": 64, "hidden": 64,
                             "direction": "bidirectional"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    print(f"{cpu_name()}; one thread; median of block medians")
    print(f"{'case':28} {'C ms':>8} {'ORT all ms':>11} {'ORT none ms':>12} {'C/ORT':>6}")
    with tempfile.TemporaryDirectory(prefix="opfuse-rnn-") as tmp:
        for index, (name, case) in enumerate(CASES.items()):
            path = Path(tmp) / f"case{index}.onnx"
            onnx.save(recurrent_model(batch=1, **case), path)
            data = api.bench(str(path), "x86-host", repeats=args.repeats)
            print(f"{name:28} {data['fused_c_s'] * 1e3:8.3f} {data['ort_all_s'] * 1e3:11.3f} "
                  f"{data['ort_disabled_s'] * 1e3:12.3f} {data['fused_c_vs_ort_all']:6.2f}")


if __name__ == "__main__":
    main()
