"""The ISA seam of the C backend (docs/isa.md). A target's ``[isa]`` record (opfuse/targets/isa.py)
names one module of this package; that module's ``KERNELS`` (isa/base.py: ``IsaKernels``) are the
only place the C backend writes feature macros, intrinsics headers or instruction-set choices.
The kernel families ask ``kernels(isa)`` for a micro-kernel and stay the same for every ISA.

Adding an ISA is three files: its target file's ``[isa]`` table, a module here named as the
table's ``name`` (found by that name, nothing to register), and its tests. ``register`` adds
kernels from elsewhere (a plug-in, a test's toy ISA)."""

from __future__ import annotations

import importlib

from opfuse.backends.c.isa.base import IsaKernels
from opfuse.errors import OpfuseError
from opfuse.targets.isa import NAME, Isa

_REGISTERED: dict[str, IsaKernels] = {}


def register(kernels: IsaKernels) -> None:
    """Make kernels selectable by ``[isa] name`` without a module of this package."""
    _REGISTERED[kernels.name] = kernels


def kernels(isa: Isa) -> IsaKernels:
    """The micro-kernels of the target's ISA: a registered set, else module ``isa.name`` of this
    package; a name with neither is one line."""
    found = _REGISTERED.get(isa.name)
    if found is None and NAME.fullmatch(isa.name) and isa.name != "base":
        try:
            module = importlib.import_module(f"{__name__}.{isa.name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{isa.name}":  # the module is there, something it needs not
                raise
            module = None
        found = getattr(module, "KERNELS", None)
    if not isinstance(found, IsaKernels) or found.name != isa.name:
        raise OpfuseError(f"C backend: no kernels for [isa] name '{isa.name}' (an ISA is a "
                          f"module of opfuse/backends/c/isa with KERNELS; docs/isa.md)")
    return found


__all__ = ["IsaKernels", "kernels", "register"]
