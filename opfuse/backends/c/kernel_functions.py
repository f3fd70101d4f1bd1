"""The kernel functions of model.c: one C function per distinct kernel body (docs/architecture.md,
"The C backend").

Layers of one shape (kws_ref_model's four depthwise-separable blocks, a ResNet's repeated blocks)
generate the same body and signature: their weights and arena offsets are the call's arguments.
gcc's identical code folding would merge such copies, but on Arm the kernels are ``noipa``
(emit.py's note on OPFUSE_KERNEL), which turns IPA-ICF off with the rest, so each copy cost its
full size in flash (kws: 4 x 890 + 4 x 490 bytes where 1,380 do). A body written before is
called again under its first name instead; the calls are unchanged, so are the instructions.

A cascade's int8 members may be functions of their own too (``prefix`` "m",
opfuse/backends/c/int8/cascade.py): person_detect's five 128-channel depthwise and pointwise blocks
on 6 x 6 maps, whose rings differ only in rows (passed as arguments), are one function each.
"""

from __future__ import annotations

from opfuse.backends.c.cgen import CWriter, cname
from opfuse.backends.c.tensors import Params
from opfuse.safe_text import for_comment
from opfuse.schedule import Kernel


class KernelFunctions:
    """Writes each kernel's function into ``funcs`` unless an identical one exists."""

    def __init__(self, prefix: str = "k") -> None:
        self._names: dict[tuple[str, tuple[str, ...]], str] = {}
        self.prefix = prefix
        self.bodies: list[list[str]] = []  # what was defined, for the stack scratch it declares

    def define(self, funcs: CWriter, index: int, kernel: Kernel, params: Params,
               body: list[str]) -> str:
        """The name of the function that runs ``kernel`` (``k<index>_<name>``, or the first
        kernel's of the same body and parameters)."""
        ops = for_comment(" + ".join(kernel.ops), 120)
        nodes_text = ", ".join(map(for_comment, kernel.nodes))
        key = (params.signature(""), tuple(body))
        first = self._names.get(key)
        if first is not None:
            funcs(f"/* kernel {index}: {ops} ({nodes_text}): the code of {first} */")
            funcs()
            return first
        fname = f"{self.prefix}{index}_{cname(kernel.name)}"
        self._names[key] = fname
        self.bodies.append(body)
        funcs(f"/* kernel {index}: {ops} ({nodes_text}) */")
        funcs("OPFUSE_KERNEL")  # its own line: the signature still starts the next one
        funcs(params.signature(fname) + " {")
        funcs.lines.extend(body)
        funcs("}")
        funcs()
        return fname
