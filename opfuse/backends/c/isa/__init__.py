"""The ISA seam of the C backend (docs/isa.md). A target's ``[isa]`` record (opfuse/targets/isa.py)
names one module here; that module's ``KERNELS`` (isa/base.py: ``IsaKernels``) are the only
place the C backend writes feature macros, intrinsics headers or instruction-set choices. The
kernel families ask ``kernels(isa)`` for a micro-kernel and stay the same for every ISA.

Adding an ISA is its target file's ``[isa]`` table, one module here registered below (or with
``register``), and its tests."""

from __future__ import annotations

from opfuse.backends.c.isa import armv7em, portable, x86
from opfuse.backends.c.isa.base import IsaKernels
from opfuse.errors import OpfuseError
from opfuse.targets.isa import Isa

_MODULES: dict[str, IsaKernels] = {k.name: k for k in (portable.KERNELS, armv7em.KERNELS,
                                                       x86.KERNELS)}


def register(kernels: IsaKernels) -> None:
    """Make an ISA module's kernels selectable by ``[isa] name`` (a plug-in, or a test's toy)."""
    _MODULES[kernels.name] = kernels


def kernels(isa: Isa) -> IsaKernels:
    """The micro-kernels of the target's ISA; a name no module registered is one line."""
    found = _MODULES.get(isa.name)
    if found is None:
        raise OpfuseError(f"C backend: no kernels for [isa] name '{isa.name}' "
                          f"(known: {', '.join(sorted(_MODULES))})")
    return found


__all__ = ["IsaKernels", "kernels", "register"]
