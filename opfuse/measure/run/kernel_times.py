"""Per-kernel time of opfuse's generated C on this machine, each kernel as it runs in the full
invoke (docs/architecture.md, the cost row): the measurement the host's int8 figures are
calibrated on (``opfuse.measure.calibrate.int8_probe``) and checked against
(``benchmarks/roofline_vs_measured.py``).

The emitted ``model.c`` marks the start of every kernel and the end of the last one when built with
``-DOPFUSE_PROFILE`` (``OPFUSE_PROFILE_MARK``; the deployable build has no marks). Here it is built
as a shared library (``-O3 -march=native``, as ``opfuse.measure.run.host.build_shared``) together with a small
timer file that defines the mark as a read of ``CLOCK_MONOTONIC`` (the TSC through the vDSO on
Linux, ~20 ns) into a static array. Each timed run writes the inputs into the arena, invokes the
whole schedule once and keeps ``mark[k + 1] - mark[k]`` for every kernel ``k``; after ``warmup``
untimed runs, a kernel's time is the median over the runs, less the timer's own cost (the median
of two back-to-back marks), so an empty kernel (a view the memory plan placed on its input)
measures about 0. Kernels run warm, in their schedule's order and cache state, with no per-call
overhead beyond a C call.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opfuse.backends.c.flags import BASE, WARN
from opfuse.measure.run.host import CModel, compiler, manifest

_builds = itertools.count()
MAX_MARKS = 65536

_TIMER_C = """\
/* Kernel timer for opfuse.measure.run.kernel_times (not part of the generated model). */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <time.h>
#define NMARKS {max_marks}
uint64_t {prefix}_ktimer_marks[NMARKS];
static inline uint64_t ktimer_now(void) {{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}}
void {prefix}_profile_mark(int kernel) {{
    if (kernel >= 0 && kernel < NMARKS) {prefix}_ktimer_marks[kernel] = ktimer_now();
}}
/* ns between two back-to-back clock reads: the cost of one mark, subtracted from each kernel. */
uint64_t {prefix}_ktimer_pair(void) {{
    uint64_t a = ktimer_now();
    uint64_t b = ktimer_now();
    return b - a;
}}
"""


@dataclass(frozen=True)
class KernelTimes:
    """Per-kernel medians (seconds, schedule order) of one build, and how they were taken."""

    seconds: tuple[float, ...]
    functions: tuple[str, ...]  # the C function of each kernel (model.json kernel_outputs)
    runs: int
    timer_s: float  # the timer's own cost, subtracted from every kernel

    @property
    def total_s(self) -> float:
        return sum(self.seconds)


def build_profiled(folder: Path | str, march: str = "native") -> Path:
    """``folder``'s C (as emitted) with profile marks and the timer, as a fresh shared library
    (``-march=<march>``)."""
    from opfuse.measure.run.host import run_tool

    folder = Path(folder)
    info = manifest(folder)
    prefix = info.prefix
    (folder / "ktimer.c").write_text(_TIMER_C.format(max_marks=MAX_MARKS, prefix=prefix))
    # a fresh file name per build: dlopen hands back an already loaded library of the same path
    name = f"libopfuse_ktimer.{os.getpid()}.{next(_builds)}.so"
    flags = [*BASE, *WARN, f"-march={march}", "-fPIC", f"-D{prefix.upper()}_PROFILE"]
    cc = compiler()
    run_tool([cc, *flags, "-c", "weights.c", "-o", f"{name}.w.o"], folder)
    run_tool([cc, *flags, "-c", "model.c", "-o", f"{name}.m.o"], folder)
    run_tool([cc, *flags, "-c", "ktimer.c", "-o", f"{name}.t.o"], folder)
    run_tool([cc, "-shared", "-o", name, f"{name}.m.o", f"{name}.w.o", f"{name}.t.o", "-lm"], folder)
    return folder / name


def _timer_s(lib: ctypes.CDLL, prefix: str, pairs: int = 2001) -> float:
    fn = getattr(lib, f"{prefix}_ktimer_pair")
    fn.restype = ctypes.c_uint64
    return statistics.median(fn() for _ in range(pairs)) * 1e-9


def time_kernels(
    folder: Path | str,
    feeds: Mapping[str, np.ndarray],
    budget_s: float = 1.0,
    warmup: int = 3,
    min_runs: int = 7,
    max_runs: int = 2000,
) -> KernelTimes:
    """Per-kernel time of ``folder``'s C on ``feeds`` (module docstring): ``warmup`` runs, then at
    least ``min_runs`` and as many more as ``budget_s`` allows."""
    folder = Path(folder)
    lib_path = build_profiled(folder)
    model = CModel(lib_path)
    info = model.info
    entries = sorted(info.kernel_outputs, key=lambda k: k.index)
    count = len(entries) if entries else int(info.kernels)
    marks = (ctypes.c_uint64 * MAX_MARKS).in_dll(model.lib, f"{model.prefix}_ktimer_marks")
    timer = _timer_s(model.lib, model.prefix)
    bound = model.bind(feeds)
    per_kernel: list[list[int]] = [[] for _ in range(count)]
    for _ in range(warmup):
        model.call(bound)
    end = time.perf_counter() + budget_s
    runs = 0
    while runs < min_runs or (time.perf_counter() < end and runs < max_runs):
        model.call(bound)
        row = marks[: count + 1]
        for k in range(count):
            per_kernel[k].append(row[k + 1] - row[k])
        runs += 1
    seconds = tuple(max(statistics.median(t) * 1e-9 - timer, 0.0) for t in per_kernel)
    functions = tuple(e.function for e in entries) or tuple(f"k{k}" for k in range(count))
    return KernelTimes(seconds, functions, runs, timer)
