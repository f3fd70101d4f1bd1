"""Target profiles are data: one TOML file per target beside this module. Adding a target is adding a file.

Search path for a target named ``NAME``: this package's folder first (the built-in targets), then the
user's target folder, ``$OPFUSE_TARGETS_DIR`` if set, else ``$XDG_CONFIG_HOME/opfuse/targets``, else
``~/.config/opfuse/targets`` (where ``opfuse calibrate`` writes ``host.toml``). A path ending in
``.toml`` is read as it is.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.targets.board import Board, parse_board
from opfuse.targets.isa import PORTABLE, Isa, parse_isa
from opfuse.targets.perf import MemoryLevel, Perf, parse_perf

DEFAULT_TARGET = "x86-host"

__all__ = [
    "Board",
    "DEFAULT_TARGET",
    "FusionCaps",
    "MemoryLevel",
    "Perf",
    "Target",
    "list_targets",
    "load_target",
    "parse_target",
    "user_targets_dir",
]


@dataclass(frozen=True)
class FusionCaps:
    """What one kernel of this target can run. Epilogue classes are those of opfuse.ops:
    "clamp" (Relu, Clip), "activation" (other unary nonlinearities), "arith" (Add/Mul/... with a
    constant or per-channel operand)."""

    anchor_epilogue: tuple[str, ...] = ()  # classes an anchor (Conv, Gemm, MatMul) may absorb
    residual_add: bool = False  # an anchor may absorb an Add of a second full-size activation
    # a MatMul/Gemm takes a constant bias along its last dim as its own bias, not as an epilogue
    # (fusion/transformer.py): every fully connected kernel has one (CMSIS-NN arm_fully_connected_s8)
    anchor_bias: bool = True
    # a MatMul/Gemm kernel may end with a LayerNorm/RMSNorm of its output rows, storing the sum it
    # normalises as a second output (fusion/transformer.py): a code generator's choice
    anchor_norm: bool = False
    anchor_pool: bool = False  # an anchor's kernel may end with a pool (Conv+Pool)
    elementwise_chains: bool = False  # standalone elementwise/broadcast chains merge
    elementwise_epilogue: tuple[str, ...] = ()  # classes a standalone elementwise op may absorb
    pool_epilogue: tuple[str, ...] = ()  # classes a pool may absorb
    max_chain: int = 8  # most ops in one kernel
    # an int8 kernel keeps its accumulator through arithmetic/activation epilogues (a residual
    # Add, a requantizing clamp) and requantizes once at the end; when false, an int8 kernel
    # takes only a clamp that is its own requantization clamp (docs/architecture.md)
    int8_requantize_once: bool = False
    # may duplicate a cheap producer with several consumers; not implemented by the partitioner
    # (every target keeps it false), kept so a target file can say it
    recompute: bool = False
    # Cascades (opfuse/fusion/cascade.py): whether kernels may be chained and run in bands of output
    # rows, each intermediate a ring buffer of the rows its consumer's window needs.
    cascade: bool = False
    cascade_max_anchors: int = 8  # most anchors (Conv, Gemm...) in one cascade
    cascade_residual: bool = False  # an Add of a second full activation may join a cascade
    cascade_band_rows: int = 1  # output rows of the last member per band
    # narrowest value (columns) a cascade may stream; 0: any. For code generators whose row
    # kernels lose to whole-tensor ones on short rows (opfuse's C on a CPU)
    cascade_min_width: int = 0
    # cascades that do not lower the peak arena may still be cut (fewer kernels at the same arena);
    # false on every shipped target: opfuse's C pays per band, so only a lower arena buys them
    cascade_same_arena: bool = False
    # the attention core (MatMul, scale, mask, Softmax, MatMul) as one kernel that streams query
    # rows through a scratch row of scores (opfuse/fusion/attention.py)
    attention: bool = False


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    source: str  # where the capabilities come from (datasheet, public tool config)
    fusion: FusionCaps
    precisions: tuple[str, ...]
    perf: Perf | None = None  # rates, memory levels, energy; None when the file has no [perf]
    board: Board | None = None  # the emulated board (QEMU) the C runs on; None without [board]
    isa: Isa = PORTABLE  # what the C's kernels are tiled for ([isa], opfuse/targets/isa.py)


_TOP_KEYS = ("name", "description", "source", "precisions", "fusion", "perf", "board", "isa")
_REQUIRED = ("name", "source", "precisions", "fusion")
_CLASSES = ("clamp", "activation", "arith")
_CLASS_FIELDS = ("anchor_epilogue", "elementwise_epilogue", "pool_epilogue")
_INT_FIELDS = ("max_chain", "cascade_max_anchors", "cascade_band_rows", "cascade_min_width")
_FIELDS = {f.name: f for f in fields(FusionCaps)}


def _targets_dir() -> Path:
    return Path(str(resources.files("opfuse.targets")))


def user_targets_dir() -> Path:
    """Where user targets live (``opfuse calibrate`` writes ``host.toml`` here)."""
    explicit = os.environ.get("OPFUSE_TARGETS_DIR")
    if explicit:
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "opfuse" / "targets"


def _search_path() -> list[Path]:
    return [_targets_dir(), user_targets_dir()]


def list_targets() -> list[str]:
    names: set[str] = set()
    for folder in _search_path():
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


def _find(name: str) -> Path:
    for folder in _search_path():
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    return _targets_dir() / f"{name}.toml"


def target_file(name: str | Path) -> Path:
    """The TOML file ``load_target(name)`` reads (a name: built-ins, then the user folder)."""
    text = str(name)
    return Path(text) if text.endswith(".toml") else _find(text)


def load_target(name: str | Path) -> Target:
    """A target by name (``cortex-m7``; built-ins, then the user folder), or a file (``./my.toml``)."""
    text = str(name)
    path = Path(text) if text.endswith(".toml") else _find(text)
    if not path.is_file():
        if text.endswith(".toml"):
            raise OpfuseError(f"{path}: no such target file")
        raise OpfuseError(f"unknown target '{text}' (known: {', '.join(list_targets())})")
    return parse_target(path)


def parse_target(path: Path) -> Target:
    """Read and check one target file; every unknown key or bad value names the file and key."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise OpfuseError(f"{path}: not valid TOML: {exc}") from None
    for key in data:
        if key not in _TOP_KEYS:
            raise OpfuseError(f"{path}: unknown key '{key}' (known: {', '.join(_TOP_KEYS)})")
    for key in _REQUIRED:
        if key not in data:
            raise OpfuseError(f"{path}: missing key '{key}'")
    for key in ("name", "description", "source"):
        if not isinstance(data.get(key, ""), str):
            raise OpfuseError(f"{path}: '{key}' must be a string")
    precisions = data["precisions"]
    if (
        not isinstance(precisions, list)
        or not precisions
        or not all(isinstance(p, str) for p in precisions)
    ):
        raise OpfuseError(f"{path}: 'precisions' must be a non-empty list of strings")
    perf = parse_perf(data.get("perf"), path, tuple(precisions))
    return Target(
        name=data["name"],
        description=data.get("description", ""),
        source=data["source"],
        fusion=_caps(data["fusion"], path),
        precisions=tuple(precisions),
        perf=perf,
        board=parse_board(data.get("board"), path),
        isa=parse_isa(data.get("isa"), path),
    )


def _caps(table: object, path: Path) -> FusionCaps:
    if not isinstance(table, dict):
        raise OpfuseError(f"{path}: 'fusion' must be a table")
    values: dict[str, object] = {}
    for key, value in table.items():
        if key not in _FIELDS:
            raise OpfuseError(f"{path}: unknown key 'fusion.{key}' (known: {', '.join(_FIELDS)})")
        if key in _CLASS_FIELDS:
            if not isinstance(value, list) or any(v not in _CLASSES for v in value):
                raise OpfuseError(
                    f"{path}: 'fusion.{key}' must be a list of {', '.join(_CLASSES)}; got {value!r}"
                )
            values[key] = tuple(value)
        elif key in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OpfuseError(f"{path}: 'fusion.{key}' must be an integer >= 1; got {value!r}")
            values[key] = value
        else:
            if not isinstance(value, bool):
                raise OpfuseError(f"{path}: 'fusion.{key}' must be true or false; got {value!r}")
            if key == "recompute" and value:
                raise OpfuseError(f"{path}: 'fusion.recompute = true' is not implemented yet")
            values[key] = value
    return FusionCaps(**values)
