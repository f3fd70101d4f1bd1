"""Calibration and evaluation data for ``opfuse quantize`` (docs/quantize.md, "Data").

DATA is an ``.npz`` with one array per graph input, keyed by the input's name, or a folder of
``NAME.npy`` files (the file stem is the input name). Each array has a leading sample axis: its
shape is ``(N, *input_shape)``, or ``(N, *input_shape[1:])`` when the input's batch is 1 (one
sample per row, the batch axis added). Every check fails on one line naming the file, the input
and the dimension (docs/architecture.md, "Outputs and limits"): a missing input, a wrong shape,
fewer than ``MIN_SAMPLES`` samples, NaN or infinity, a non-float dtype, a constant input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.frontends.arrays import read_npz

MIN_SAMPLES = 2  # calibration samples at least (a range of one sample is an accident)
HELD_OUT = 0.25  # without --eval: the last quarter of DATA is held out for the report


@dataclass(frozen=True)
class InputShape:
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Samples:
    """Per input, ``count`` float32 samples each of the input's exact shape."""

    where: str
    arrays: dict[str, np.ndarray]  # name -> (count, *shape)
    count: int

    def feeds(self, i: int) -> dict[str, np.ndarray]:
        return {name: a[i] for name, a in self.arrays.items()}

    def split(self, held_out: float = HELD_OUT) -> tuple[Samples, Samples]:
        """(calibration, evaluation): the last ``held_out`` fraction (at least one) evaluates."""
        n_eval = max(1, int(round(self.count * held_out)))
        n_cal = self.count - n_eval
        if n_cal < MIN_SAMPLES:
            raise OpfuseError(
                f"{self.where}: {self.count} samples are too few to calibrate on and hold out "
                f"{n_eval} for the report: give at least {MIN_SAMPLES + 1}, or --eval DATA")
        cal = {k: a[:n_cal] for k, a in self.arrays.items()}
        ev = {k: a[n_cal:] for k, a in self.arrays.items()}
        return (Samples(f"{self.where} (first {n_cal})", cal, n_cal),
                Samples(f"{self.where} (held-out last {n_eval})", ev, n_eval))


def read_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """Named arrays of an .npz file or a folder of .npy files (no pickles)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.npy"))
        if not files:
            raise OpfuseError(f"{path}: a folder without .npy files")
        arrays = {}
        for f in files:
            try:
                arrays[f.stem] = np.load(f, allow_pickle=False)
            except Exception as exc:  # noqa: BLE001 (numpy raises many kinds on a bad file)
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise OpfuseError(f"{f}: not a readable .npy file: {first}") from None
        return arrays
    return read_npz(p)


def load_samples(path: str | Path, inputs: list[InputShape], minimum: int = MIN_SAMPLES) -> Samples:
    """The samples in DATA for ``inputs``, checked (see the module docstring)."""
    where = str(path)
    arrays = read_arrays(path)
    missing = [i.name for i in inputs if i.name not in arrays]
    if missing:
        have = ", ".join(sorted(arrays)) or "none"
        raise OpfuseError(f"{where}: no samples for input '{missing[0]}' (it has: {have})")
    out: dict[str, np.ndarray] = {}
    counts = set()
    for spec in inputs:
        a = np.asarray(arrays[spec.name])
        out[spec.name] = _checked(a, spec, where)
        counts.add(out[spec.name].shape[0])
    if len(counts) > 1:
        sizes = ", ".join(f"{k}: {v.shape[0]}" for k, v in out.items())
        raise OpfuseError(f"{where}: the inputs have different sample counts ({sizes})")
    count = counts.pop() if counts else 0
    if count < minimum:
        raise OpfuseError(f"{where}: {count} sample(s), at least {minimum} are needed")
    return Samples(where, out, count)


def _checked(a: np.ndarray, spec: InputShape, where: str) -> np.ndarray:
    name = spec.name
    if a.dtype.kind != "f":
        raise OpfuseError(f"{where}: input '{name}' is {a.dtype}, calibration data must be float")
    want = spec.shape
    if a.ndim == len(want) + 1 and tuple(a.shape[1:]) == want:
        samples = a
    elif want and want[0] == 1 and a.ndim == len(want) and tuple(a.shape[1:]) == want[1:]:
        samples = a[:, None]
    else:
        shown = "x".join(map(str, want)) or "scalar"
        got = "x".join(map(str, a.shape)) or "scalar"
        raise OpfuseError(f"{where}: input '{name}' has shape {got}; the model takes {shown}, so "
                          f"N x {shown} (a leading sample axis) is expected"
                          + _first_wrong(a.shape, want))
    samples = samples.astype(np.float32)
    if not np.isfinite(samples).all():
        bad = "NaN" if np.isnan(samples).any() else "infinity"
        index = np.argwhere(~np.isfinite(samples))[0]
        raise OpfuseError(f"{where}: input '{name}' holds {bad} (first at sample {index[0]})")
    if samples.size and float(samples.max()) == float(samples.min()):
        raise OpfuseError(f"{where}: input '{name}' is constant ({float(samples.min()):g} "
                          "everywhere): no range to calibrate on")
    return samples


def _first_wrong(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    """' (dimension K is A, the model's is B)' for the first differing dimension after the sample
    axis, when the ranks allow a comparison (a batch of 1 may be left out of the samples)."""
    if want and want[0] == 1 and len(got) == len(want):
        got, want = (got[0], 1, *got[1:]), want
    if len(got) != len(want) + 1:
        return f" (rank {len(got)}, expected {len(want) + 1})"
    for k, (g, w) in enumerate(zip(got[1:], want, strict=True)):
        if g != w:
            return f" (dimension {k} is {g}, the model's is {w})"
    return ""
