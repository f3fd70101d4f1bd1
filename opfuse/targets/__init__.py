"""Target profiles are data: one TOML file per target beside this module. Adding a target is adding a file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from opfuse.errors import OpfuseError


@dataclass(frozen=True)
class FusionCaps:
    """What one kernel of this target can run. Epilogue classes are those of opfuse.ops:
    "clamp" (Relu, Clip), "activation" (other unary nonlinearities), "arith" (Add/Mul/... with a
    constant or per-channel operand)."""

    anchor_epilogue: tuple[str, ...] = ()  # classes an anchor (Conv, Gemm, MatMul) may absorb
    residual_add: bool = False  # an anchor may absorb an Add of a second full-size activation
    anchor_pool: bool = False  # an anchor's kernel may end with a pool (Conv+Pool)
    elementwise_chains: bool = False  # standalone elementwise/broadcast chains merge into one kernel
    elementwise_epilogue: tuple[str, ...] = ()  # classes a standalone elementwise op may absorb
    pool_epilogue: tuple[str, ...] = ()  # classes a pool may absorb
    max_chain: int = 8  # most ops in one kernel
    recompute: bool = False  # may duplicate a cheap producer with several consumers


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    source: str  # where the capabilities come from (datasheet, public tool config)
    fusion: FusionCaps
    precisions: tuple[str, ...]
    perf: dict = field(default_factory=dict)  # filled by the cost issue: rates, memories, energy


def _targets_dir() -> Path:
    return Path(str(resources.files("opfuse.targets")))


def list_targets() -> list[str]:
    return sorted(p.stem for p in _targets_dir().glob("*.toml"))


def load_target(name: str) -> Target:
    path = _targets_dir() / f"{name}.toml"
    if not path.is_file():
        raise OpfuseError(f"unknown target '{name}' (known: {', '.join(list_targets())})")
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    fusion = data.get("fusion", {})
    caps = FusionCaps(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in fusion.items()}
    )
    return Target(
        name=data.get("name", name),
        description=data.get("description", ""),
        source=data.get("source", ""),
        fusion=caps,
        precisions=tuple(data.get("precisions", ("fp32",))),
        perf={k: v for k, v in data.items() if k not in ("name", "description", "source", "fusion", "precisions")},
    )
