"""A seeded, bounded mutation fuzzer for the `opfuse` command over real models, ONNX or TFLite.

Each case mutates one seed model (benchmarks/fuzz_seeds.py: the shared real models and built-in
ones), writes it to a file, and runs `opfuse compile FILE -o OUT`, `opfuse analyze FILE --json J
--html H`, `opfuse compile FILE --emit c -o DIR` and, on small models, `opfuse validate FILE
--backend c`, each in a forked child with a timeout (benchmarks/fuzz_run.py). Every run must end
with exit 0, 1 or 2, an error as one line with no traceback, and no half-written output (an output
only when the command succeeded, and then a readable one; no temporary file left behind).

    PYTHONPATH=$PWD python benchmarks/fuzz.py --format tflite|onnx [--cases 2000] [--seed 0]
        [--timeout 60] [--jobs 2] [--all]

prints the counts by outcome and the first cases of every bad outcome (reproduce one with
``--only CASE``, save its bytes with ``--write PATH``). tests/test_fuzz.py runs a few hundred cases
of the same fuzzer in CI and replays the files of tests/data/fuzz/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fuzz_flatbuffers import mutate_tflite  # noqa: E402
from benchmarks.fuzz_mutations import mutate  # noqa: E402
from benchmarks.fuzz_run import BAD, COMMANDS, GOOD, Command, Outcome, run_case  # noqa: E402
from benchmarks.fuzz_seeds import NO_VALIDATE, seed_protos, seeds_for  # noqa: E402

__all__ = ["BAD", "GOOD", "Outcome", "fuzz", "mutate", "run_case", "seed_protos", "seeds_for"]
MUTATORS = {"onnx": mutate, "tflite": mutate_tflite}


def case_bytes(seeds: dict[str, bytes], fmt: str, seed: int, i: int) -> tuple[str, bytes, str]:
    """(seed name, mutated bytes, what was done) of case ``i``: Random(seed * 1_000_003 + i)."""
    names = sorted(seeds)
    name = names[i % len(names)]
    data, what = MUTATORS[fmt](seeds[name], random.Random(seed * 1_000_003 + i))
    return name, data, what


def fuzz(cases: int, seed: int = 0, timeout: float = 60.0, seeds: dict[str, bytes] | None = None,
         only: int | None = None, on_case: Callable[[int, str, str, Outcome], None] | None = None,
         offset: int = 0, stride: int = 1, fmt: str = "onnx",
         commands: tuple[Command, ...] = COMMANDS) -> Counter:
    """Run cases ``offset, offset + stride, ...`` below ``cases`` of format ``fmt``; counts by
    outcome."""
    import opfuse.api  # noqa: F401  (imported once here, not in every forked child)

    seeds = seeds or seeds_for(fmt)
    counts: Counter = Counter()
    shm = Path("/dev/shm")  # outputs are fsynced: on tmpfs that costs nothing
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="opfuse-fuzz-", dir=base) as tmp:
        folder = Path(tmp)
        for i in range(offset, cases, stride) if only is None else [only]:
            name, data, what = case_bytes(seeds, fmt, seed, i)
            outcome = run_case(data, folder, timeout, f".{fmt}", commands,
                               validate=name not in NO_VALIDATE)
            counts[outcome.kind] += 1
            if on_case is not None:
                on_case(i, name, what, outcome)
    return counts


def _parallel(jobs: int, work: Callable[[int], Counter]) -> Counter:
    """Run ``work(k)`` for k < jobs in forked workers; the sum of their counts."""
    pipes = []
    for k in range(jobs):
        read_fd, write_fd = os.pipe()
        if os.fork() == 0:
            os.close(read_fd)
            counts = work(k)
            os.write(write_fd, json.dumps(dict(counts)).encode())
            os._exit(0)
        os.close(write_fd)
        pipes.append(read_fd)
    total: Counter = Counter()
    for fd in pipes:
        with os.fdopen(fd, "rb") as fh:
            total.update(json.loads(fh.read() or b"{}"))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", dest="fmt", choices=sorted(MUTATORS), default="onnx")
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    parser.add_argument("--all", action="store_true", help="also the large seed models")
    parser.add_argument("--only", type=int, help="run this one case, verbosely")
    parser.add_argument("--show", type=int, default=5, help="examples per bad outcome")
    parser.add_argument("--write", metavar="PATH", help="with --only: save the mutated model")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (case i to i %% N)")
    parser.add_argument("--status", metavar="PREFIX",
                        help="each worker keeps its counts so far in PREFIX.<pid> (JSON)")
    args = parser.parse_args()
    seeds = seeds_for(args.fmt, args.all)
    if args.write and args.only is not None:
        _, data, what = case_bytes(seeds, args.fmt, args.seed, args.only)
        Path(args.write).write_bytes(data)
        print(f"wrote {args.write}: {what}")
    shown: Counter = Counter()
    tally: Counter = Counter()
    t0 = time.perf_counter()

    def report(i: int, name: str, what: str, outcome: Outcome) -> None:
        tally[outcome.kind] += 1
        if args.status:  # this worker's counts so far, readable while a long run goes on
            path, tmp = Path(f"{args.status}.{os.getpid()}"), Path(f"{args.status}.{os.getpid()}~")
            tmp.write_text(json.dumps(dict(tally)))
            tmp.replace(path)
        if (i + 1) % 500 == 0:
            print(f"... case {i + 1}, {time.perf_counter() - t0:.0f} s: this worker {dict(tally)}",
                  flush=True)
        if args.only is not None or (outcome.kind in BAD and shown[outcome.kind] < args.show):
            shown[outcome.kind] += 1
            print(f"case {i} [{name}] {what}: {outcome.kind}: {outcome.detail}", flush=True)

    if args.jobs > 1 and args.only is None:
        counts = _parallel(args.jobs, lambda k: fuzz(args.cases, args.seed, args.timeout, seeds,
                                                     None, report, k, args.jobs, args.fmt))
    else:
        counts = fuzz(args.cases, args.seed, args.timeout, seeds, args.only, report, fmt=args.fmt)
    elapsed = time.perf_counter() - t0
    total = sum(counts.values())
    print(f"{total} {args.fmt} cases in {elapsed:.0f} s (seed {args.seed}, {len(seeds)} seed "
          f"models: {', '.join(sorted(seeds))})")
    for kind in GOOD + BAD:
        print(f"  {kind:13s} {counts[kind]}")
    sys.exit(1 if any(counts[k] for k in BAD) else 0)


if __name__ == "__main__":
    main()
