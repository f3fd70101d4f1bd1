"""Re-measure ``[perf.int8c]`` of the Cortex-M targets (opfuse.measure.calibrate.mcu_probe): the probe layers of
opfuse.measure.calibrate.int8_probe, compiled for each target, run on its board under QEMU (-icount), their
instructions per kernel fitted per C path and written into opfuse/targets/<target>.toml as seconds
at the part's clock (instructions x the assumed cycles per instruction / clock_hz).

    python benchmarks/mcu_calibrate.py [--targets cortex-m4,cortex-m7] [--dry-run] [--float]

Run it again whenever the int8 C templates change (the table is theirs); benchmarks/mcu.py then
prints how far the predictions are from the instructions the shared int8 models execute.

``--float``: ``[perf.floatc]`` instead (opfuse.measure.calibrate.mcu_float_probe): the same probe
layers in float and a few cascaded stems, fitted per path of the float conv plan
(opfuse.kernelplan.convf); re-run it whenever the float C's loop nests change.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from opfuse.measure.calibrate import mcu_float_probe as floatp
from opfuse.measure.calibrate import mcu_probe as int8p
from opfuse.targets import load_target

TARGETS_DIR = Path(__file__).resolve().parents[1] / "opfuse" / "targets"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="cortex-m4,cortex-m7")
    ap.add_argument("--dry-run", action="store_true", help="print the tables, write nothing")
    ap.add_argument("--float", action="store_true", help="[perf.floatc]: the float C")
    args = ap.parse_args()
    for target in args.targets.split(","):
        t0 = time.perf_counter()
        clock = load_target(target).perf.clock_hz
        if args.float:
            found = floatp.measure_kernels(target)
            lines = floatp.table_lines(target, floatp.fit(found), clock)
            write_table = floatp.write_table
        else:
            found = int8p.measure_kernels(target)
            lines = int8p.table_lines(target, int8p.calibrate_target(target, found), clock)
            write_table = int8p.write_table
        print(f"{target}: {len(found)} kernels measured in {time.perf_counter() - t0:.0f} s")
        print("\n".join(lines))
        if not args.dry_run:
            write_table(TARGETS_DIR / f"{target}.toml", lines)
            print(f"wrote {TARGETS_DIR / f'{target}.toml'}")


if __name__ == "__main__":
    main()
