"""A seeded, bounded mutation fuzzer for the `opfuse` command over real model protobufs.

Each case mutates one seed model (a built-in, or one of the exporter-style models that
tests/exports.py builds), writes it to a file, and runs `opfuse compile FILE -o OUT` and then
`opfuse analyze FILE --json OUT` in a forked child with a timeout. Every run must end with exit 0,
1 or 2, an error as one line with no traceback, and no half-written output (an output file only
when the command succeeded, and then a readable one; no temporary file left behind).

    PYTHONPATH=$PWD python benchmarks/fuzz.py [--cases 10000] [--seed 0] [--timeout 20] [--all]

prints the counts by outcome and the first cases of every bad outcome (reproduce one with
``--only CASE``). tests/test_fuzz.py runs a few hundred cases of the same fuzzer in CI.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import select
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fuzz_mutations import mutate  # noqa: E402

GOOD = ("ok", "exit1", "rejected")  # exit 0, exit 1, exit 2 with one line
BAD = ("traceback", "hang", "crash", "half_written", "bad_exit")
SMALL_SEEDS = ("seed_block", "ds_cnn", "tiny_transformer", "paddle_style", "custom_op",
               "control_flow_if", "control_flow_loop", "control_flow_scan")
LARGE_SEEDS = ("seed_pipeline", "mobilenet_v2", "resnet18")


def seed_protos(names: tuple[str, ...] = SMALL_SEEDS) -> dict[str, bytes]:
    """Serialized seed models by name."""
    from opfuse import models
    from tests import exports

    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "paddle_style": exports.paddle_style,
        "custom_op": exports.custom_op,
        "control_flow_if": lambda: exports.control_flow("If"),
        "control_flow_loop": lambda: exports.control_flow("Loop"),
        "control_flow_scan": lambda: exports.control_flow("Scan"),
    }
    out = {}
    for name in names:
        proto = builders[name]() if name in builders else models.build_model(name)
        out[name] = proto.SerializeToString(deterministic=True)
    return out


# --- running one case -----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    kind: str  # one of GOOD or BAD
    detail: str  # the command and its last stderr line, for the report


def _child(argv: list[str], write_fd: int) -> None:
    """Run the CLI in this (forked) process; report (exit code, stderr) on ``write_fd``."""
    from opfuse.cli import main

    err = io.StringIO()
    sys.stdout = io.StringIO()
    sys.stderr = err
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # an escaped exception: what the fuzzer is here to find
        import traceback

        traceback.print_exc(file=err)
        code = 99
    payload = json.dumps({"code": code, "err": err.getvalue()[-4000:]}).encode()
    os.write(write_fd, payload)
    os._exit(0)


def run_cli_forked(argv: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(exit code or None, stderr, status) of the CLI run in a forked child: status is
    'done', 'hang' or 'crash' (the child died without reporting)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(argv, write_fd)
        finally:
            os._exit(3)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    status = "done"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            status = "hang"
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    _, wstatus = os.waitpid(pid, 0)
    if status == "hang":
        return None, "", "hang"
    try:
        report = json.loads(b"".join(chunks))
    except ValueError:
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else None
        return None, f"child died (signal {sig})", "crash"
    return report["code"], report["err"], "done"


def _leftovers(folder: Path, keep: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in (keep, "model.onnx"))


def _check_output(path: Path, reader: Callable[[bytes], object]) -> bool:
    try:
        reader(path.read_bytes())
        return True
    except Exception:
        return False


def _parse_onnx(data: bytes) -> None:
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    if not proto.graph.node and not proto.graph.output:
        raise ValueError("empty")


def run_case(model_bytes: bytes, folder: Path, timeout: float) -> Outcome:
    """Compile and analyze one (mutated) model; classify the worst of the two runs."""
    src = folder / "model.onnx"
    src.write_bytes(model_bytes)
    commands = (
        (["compile", str(src), "-o", str(folder / "out.onnx")], "out.onnx", _parse_onnx),
        (["analyze", str(src), "--json", str(folder / "a.json")], "a.json", json.loads),
    )
    worst = Outcome("ok", "")
    for argv, out_name, reader in commands:
        code, err, status = run_cli_forked(argv, timeout)
        out = folder / out_name
        label = f"{argv[0]}: {err.strip().splitlines()[-1] if err.strip() else status}"
        if status != "done":
            outcome = Outcome(status, label)
        elif "Traceback" in err or code == 99:
            outcome = Outcome("traceback", f"{argv[0]}: {err.strip()[-600:]}")
        elif code not in (0, 1, 2):
            outcome = Outcome("bad_exit", f"{argv[0]}: exit {code}: {err.strip()[-300:]}")
        elif code == 2 and len(err.strip().splitlines()) != 1:
            outcome = Outcome("traceback", f"{argv[0]}: not one line: {err.strip()[-600:]}")
        elif (code == 0 and not _check_output(out, reader)) or (code != 0 and out.exists()) \
                or _leftovers(folder, out_name):
            outcome = Outcome("half_written", f"{label} (files: {_leftovers(folder, '')})")
        else:
            outcome = Outcome({0: "ok", 1: "exit1", 2: "rejected"}[code], label)
        for p in folder.iterdir():
            if p.name != "model.onnx":
                p.unlink()
        if BAD.count(outcome.kind) or (worst.kind == "ok" and outcome.kind != "ok"):
            worst = outcome
        if outcome.kind in BAD:
            break
    return worst


def fuzz(cases: int, seed: int = 0, timeout: float = 20.0, seeds: dict[str, bytes] | None = None,
         only: int | None = None, on_case: Callable[[int, str, str, Outcome], None] | None = None,
         offset: int = 0, stride: int = 1) -> Counter:
    """Run cases ``offset, offset + stride, ...`` below ``cases`` (case i uses
    Random(seed * 1_000_003 + i)); counts by outcome."""
    import opfuse.api  # noqa: F401  (imported once here, not in every forked child)

    seeds = seeds or seed_protos()
    names = sorted(seeds)
    counts: Counter = Counter()
    shm = Path("/dev/shm")  # outputs are fsynced: on tmpfs that costs nothing
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="opfuse-fuzz-", dir=base) as tmp:
        folder = Path(tmp)
        for i in range(offset, cases, stride) if only is None else [only]:
            rng = random.Random(seed * 1_000_003 + i)
            name = names[i % len(names)]
            data, what = mutate(seeds[name], rng)
            outcome = run_case(data, folder, timeout)
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
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per command")
    parser.add_argument("--all", action="store_true", help="also the large built-ins")
    parser.add_argument("--only", type=int, help="run this one case, verbosely")
    parser.add_argument("--show", type=int, default=5, help="examples per bad outcome")
    parser.add_argument("--write", metavar="PATH", help="with --only: save the mutated model")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (case i to i %% N)")
    parser.add_argument("--status", metavar="PREFIX",
                        help="each worker keeps its counts so far in PREFIX.<pid> (JSON)")
    args = parser.parse_args()
    seeds = seed_protos(SMALL_SEEDS + (LARGE_SEEDS if args.all else ()))
    if args.write and args.only is not None:
        names = sorted(seeds)
        data, what = mutate(seeds[names[args.only % len(names)]],
                            random.Random(args.seed * 1_000_003 + args.only))
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
                                                     None, report, k, args.jobs))
    else:
        counts = fuzz(args.cases, args.seed, args.timeout, seeds, args.only, report)
    elapsed = time.perf_counter() - t0
    total = sum(counts.values())
    print(f"{total} cases in {elapsed:.0f} s (seed {args.seed}, {len(seeds)} seed models)")
    for kind in GOOD + BAD:
        print(f"  {kind:13s} {counts[kind]}")
    sys.exit(1 if any(counts[k] for k in BAD) else 0)


if __name__ == "__main__":
    main()
