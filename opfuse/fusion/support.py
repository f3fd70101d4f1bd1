"""What a code generator can write, as the partitioner consults it (docs/architecture.md, "One
partition, one plan").

A backend exports a ``KernelSupport``: two pure predicates over IR nodes that say, in one phrase,
why it cannot write a kernel of these nodes (layer by layer) or stream this member in a cascade
(None: it can). The partitioner refuses such a fusion there, with ``not_supported_by_target`` and
that phrase, so the partition analyze reports is one the backend builds. The interface lives here
and the predicates in the backend (``opfuse/backends/c/support.py``), so fusion never imports a
backend; the driver passes them in, as torch.fx's ``OperatorSupport`` is passed to its partitioner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx_ir as ir

WhyNot = Callable[[Sequence[ir.Node]], "str | None"]


def _anything(nodes: Sequence[ir.Node]) -> str | None:
    return None


@dataclass(frozen=True)
class KernelSupport:
    backend: str  # as messages name it: "the C backend"
    why_not_kernel: WhyNot = _anything  # members of one layer-by-layer kernel, in order
    why_not_stream: WhyNot = _anything  # members of one cascade member kernel, in order


ANY = KernelSupport("any backend")  # no constraint beyond the target file's
