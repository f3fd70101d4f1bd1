"""The C emitter driver: model + partition + memory plan -> model.h, model.c, weights.c, ...

The partition and the plan are ``CompileResult.schedule``'s, the very ones analyze reports: this
module never partitions or plans (docs/architecture.md, "One partition, one plan"). By default the
C streams the partition's cascades; ``cascades=False`` runs the same kernels layer by layer. The
partitioner consulted ``support.py``, so every kernel and cascade in it is one the C writes.

``fuse=False`` emits the canonicalized model with one kernel per node (the trivial partition of
``result.optimized``), not the model as imported: the same weights and the same math, only the
kernel boundaries differ, so fused vs unfused measures fusion alone (BatchNorm folding and the
other rewrites are in both). Both use the same templates; every intermediate of the unfused
version is stored in the arena.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx_ir as ir

from opfuse.backends.c.board import board_files
from opfuse.backends.c.cascade import emit_cascade
from opfuse.backends.c.cgen import CWriter, dims
from opfuse.backends.c.ctype import BOOL, FLOAT, INT8, INT32, INT64, UINT8, ctype_of
from opfuse.backends.c.fastmath import used as fast_math
from opfuse.backends.c.files import (
    MAKEFILE,
    main_c,
    model_h,
    readme,
    rebuilt_by_make,
    weights_c,
)
from opfuse.backends.c.int8.cascade import shape_twins
from opfuse.backends.c.int8.conv_mcu import matrix_core
from opfuse.backends.c.int8.mcu_tiles import RowTails
from opfuse.backends.c.int8.requant import helpers, int8_info, rounding_of
from opfuse.backends.c.isa import IsaKernels, kernels
from opfuse.backends.c.isa.portable import KERNEL_ATTRIBUTE
from opfuse.backends.c.kernel_functions import KernelFunctions
from opfuse.backends.c.kernel_records import (
    checked_stack,
    debug_entry,
    outputs_empty,
    stack_scratch_bytes,
)
from opfuse.backends.c.kernels import check_covered, emit_kernel
from opfuse.backends.c.manifest import (
    KernelRecord,
    Manifest,
    TensorRecord,
)
from opfuse.backends.c.prefix import DEFAULT as DEFAULT_PREFIX
from opfuse.backends.c.prefix import check_prefix, with_prefix
from opfuse.backends.c.tensors import MCU_WEIGHT_ALIGN, WEIGHT_ALIGN, Params, Store, WeightBlob
from opfuse.compiled import DEFAULT_PLANNER, CompileResult, Schedule
from opfuse.errors import OpfuseError
from opfuse.ir import require_static
from opfuse.memory import MemoryPlan
from opfuse.output import write_tree
from opfuse.quant import get_quant
from opfuse.safe_text import assert_inert, for_comment


@dataclass(frozen=True)
class CEmitted:
    outdir: Path
    fused: bool
    planner: str
    arena_bytes: int  # OPFUSE_ARENA_BYTES: the plan's peak
    stack_scratch_bytes: int  # OPFUSE_STACK_SCRATCH_BYTES: one kernel's largest stack scratch
    weights_bytes: int
    kernels: int
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[tuple[str, tuple[int, ...]], ...]
    plan: MemoryPlan
    cascades: tuple[str, ...] = ()  # the cascaded kernels the C streams, in schedule order


def c_schedule(result: CompileResult, fuse: bool = True, cascades: bool = True,
               planner: str = DEFAULT_PLANNER) -> Schedule:
    """The model, partition and plan the C follows: analyze's (``CompileResult.schedule``)."""
    return result.schedule(cascades=cascades, planner=planner, fuse=fuse)


def _opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 17)))


def generate(
    result: CompileResult,
    fuse: bool = True,
    planner: str = DEFAULT_PLANNER,
    cascades: bool = True,
    prefix: str = DEFAULT_PREFIX,
) -> tuple[dict[str, str], Manifest, MemoryPlan]:
    """The files' text (name -> text), the manifest and the memory plan. Where a cascade row
    would end in a narrower tile (``IsaKernels.matrix_tail``, int8/mcu_tiles.RowTails) the C is
    written twice: the first pass's deepest stack scratch bounds the wider tiles of the second,
    which is kept only where its stack is no deeper."""
    tails = RowTails()
    first = generate_pass(result, fuse, planner, cascades, prefix, tails)
    if not tails.wanted:
        return first
    cap = first[1].stack_scratch_bytes
    second = generate_pass(result, fuse, planner, cascades, prefix, RowTails(cap))
    return second if second[1].stack_scratch_bytes <= cap else first


def generate_pass(
    result: CompileResult,
    fuse: bool,
    planner: str,
    cascades: bool,
    prefix: str,
    tails: RowTails | None = None,
) -> tuple[dict[str, str], Manifest, MemoryPlan]:
    """One pass of ``generate``: ``tails`` None or without a cap writes no narrower row tails."""
    sched = c_schedule(result, fuse, cascades, planner)
    model, part, plan = sched.model, sched.partition, sched.plan
    nodes = {n.name: n for n in model.graph}
    check_covered(list(model.graph))
    require_static(model, "C backend")  # a static arena needs every size (custom ops: analyze)
    blob = WeightBlob(WEIGHT_ALIGN if result.target.board is None else MCU_WEIGHT_ALIGN)
    store = Store(plan, blob, rounding_of(model), isa=result.target.isa,
                  narrow_constants=result.target.board is not None)
    store.row_tails = tails  # the stack a cascade row's wider tiles may use
    opset = _opset(model)
    funcs = CWriter()
    calls = CWriter(1)
    scratch = 0
    defined = KernelFunctions()
    # cascade members of one shape as shared functions (int8/cascade.py)
    store.member_functions = (funcs, KernelFunctions("m"), shape_twins(part.kernels, nodes))
    if cascades and matrix_core(store.isa):  # what a cascade member's scratch may spend
        store.cascade_saving = c_schedule(result, fuse, False, planner).plan.peak_bytes \
            - plan.peak_bytes
    debug: list[KernelRecord] = []  # per kernel: its members and outputs, for validate --per-kernel
    for index, kernel in enumerate(part.kernels):
        members = [nodes[n] for n in kernel.nodes]
        aliased = any(o in plan.aliases for o in kernel.outputs)
        params = Params(store, restrict=not aliased)
        store.step = index  # the plan's step of this kernel (free arena bytes: int8/conv_mcu.py)
        calls(f"OPFUSE_PROFILE_MARK({index});")
        if outputs_empty(kernel, members):  # an empty Slice: no function, so no unused
            calls(f"/* kernel {index}: every output is empty, nothing runs */")  # parameters
            debug.append(debug_entry(index, "", kernel, members, store, calls))
            continue
        body = CWriter(1)
        if kernel.is_cascade:
            emit_cascade(body, kernel, nodes, params)
        else:
            emit_kernel(body, members, params, opset)
        scratch = max(scratch, checked_stack(body.lines, index, kernel))
        # unique by its index; kernel names are opfuse's (covered op types), never a node's
        fname = defined.define(funcs, index, kernel, params, body.lines)
        calls(params.call(fname))
        debug.append(debug_entry(index, fname, kernel, members, store, calls))
    calls(f"OPFUSE_PROFILE_MARK({len(part.kernels)});")
    scratch = max([scratch, *map(stack_scratch_bytes, store.member_functions[1].bodies)])
    where_in, where_out = [], []
    for value in model.graph.inputs:
        where_in.append(store.where(value, _Named(value.name)) if value.name in plan.offsets
                        else None)
    for value in model.graph.outputs:
        node = value.producer() or next(iter(model.graph), None)
        src = store.where(value, node, ctype_of(value)) if node is not None else None
        if src is None:
            raise OpfuseError(f"C backend: graph output '{value.name}' has no producer")
        where_out.append(src)
    info = Manifest(
        result.source, result.target.name, fuse, planner, len(part.kernels), plan.peak_bytes,
        scratch, len(blob.data()), tuple(_io(v) for v in model.graph.inputs),
        tuple(_io(v) for v in model.graph.outputs), tuple(debug),
        tuple(k.name for k in part.kernels if k.is_cascade), check_prefix(prefix),
        int8_info(model) or None,
    )
    files = {
        "model.h": model_h(info),
        "model.c": _model_c(info, funcs, calls, where_in, where_out,
                            helpers(model, isa := kernels(result.target.isa)), isa),
        "weights.c": weights_c(blob.data()),
        "main.c": main_c(info),
        "Makefile": MAKEFILE,
        "README.md": readme(info),
        "model.json": info.to_json(),
    }
    if result.target.board is not None:  # Cortex-M: startup, linker script, harness, `make run`
        extra = board_files(result.target.board, info)
        files["Makefile"] += extra.pop("Makefile+")
        files["README.md"] += extra.pop("README.md+")
        files.update(extra)
    assert_inert({k: v for k, v in files.items() if k != "model.json"})  # JSON escapes its own
    return with_prefix(files, prefix), info, plan


def _source_file(result: CompileResult) -> Path | None:
    """The input model's file (a built-in model's name is no file): never written over."""
    path = Path(result.source)
    return path if path.is_file() else None


def _io(value: ir.Value) -> TensorRecord:
    ct = ctype_of(value)
    if ct not in (FLOAT, INT8, UINT8, INT32, INT64, BOOL):  # bool: a uint8_t of 0 or 1
        raise OpfuseError(
            f"C backend: graph input/output '{value.name}' is {value.dtype.name}; "
            "the C backend takes and returns float32, int8, uint8, int32, int64 or bool tensors only"
        )
    shape = dims(value, value.producer() or _Named(value.name))
    q = get_quant(value)
    one = q is not None and q.scale.size == 1
    return TensorRecord(value.name, shape, math.prod(shape), ct.name,
                        float(q.scale[0]) if one else None, int(q.zero_point[0]) if one else None)


class _Named:
    """Stands in for a node in error messages about graph inputs."""

    def __init__(self, name: str) -> None:
        self.op_type = "input"
        self.name = name


def _pointers(kind: str, where: list[str | None], items: tuple[TensorRecord, ...]) -> list[str]:
    """``opfuse_model_<kind>(i)``: a switch over the arena pointers (an input the schedule never
    reads gets a small static buffer of its own, so the caller can still write it)."""
    lines, spare = [], []
    ret = common_ctype(items)
    for k, (src, item) in enumerate(zip(where, items, strict=True)):
        if src is None:
            spare.append(f"static {item.ctype} opfuse_unused_{kind}{k}"
                         f"[{max(item.size, 1)}];")
            src = f"opfuse_unused_{kind}{k}"
        lines.append(f"    case {k}: return ({ret} *)({src});")
    return [*spare, f"{ret} *opfuse_model_{kind}(int i) {{", "    switch (i) {", *lines,
            "    default: return 0;", "    }", "}", ""]


def common_ctype(items: tuple[TensorRecord, ...]) -> str:
    """The pointer type of opfuse_model_input/output: the items' C type, or void if they mix."""
    kinds = {x.ctype for x in items}
    return kinds.pop() if len(kinds) == 1 else ("float" if not kinds else "void")


def _model_c(info: Manifest, funcs: CWriter, calls: CWriter, where_in: list, where_out: list,
             extra: str = "", isa: IsaKernels | None = None):
    n_in, n_out = len(info.inputs), len(info.outputs)
    ins, outs = run_args(info)
    ti, to = common_ctype(info.inputs), common_ctype(info.outputs)
    in_names = [a.split("*")[1] for a in ins]
    out_names = [a.split("*")[1] for a in outs]
    # the file's name only, not the directory it was read from: the same model gives the same C
    # on every machine (a reproducible build, as gcc's -ffile-prefix-map gives for its own paths)
    source, target = for_comment(Path(info.source).name, 120), for_comment(info.target)
    head = f"""/* Generated by opfuse from {source} for {target}. Do not edit. */
#include <math.h>
#include <string.h>
#include "model.h"

{isa.prelude if isa else ""}
{KERNEL_ATTRIBUTE}#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \\
    __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weights.c holds little-endian float32 data"
#endif

/* The one activation arena: tensor offsets below are the memory plan's ({info.planner}). */
/* Exactly OPFUSE_ARENA_BYTES (the ELF's opfuse_arena symbol; one float for an empty arena). */
static float opfuse_arena[OPFUSE_ARENA_BYTES > 0 ? (OPFUSE_ARENA_BYTES + 3) / 4 : 1] OPFUSE_ALIGNED;
#define A opfuse_arena
#define W opfuse_weights.f
#define AB ((unsigned char *)opfuse_arena)
#define WB opfuse_weights.bytes

/* Per-kernel counts in the emulator harness only (opfuse/backends/c/board): built with
   -DOPFUSE_PROFILE, the schedule marks the start of each kernel; otherwise the marks are empty. */
#ifdef OPFUSE_PROFILE
void opfuse_profile_mark(int kernel);
#define OPFUSE_PROFILE_MARK(k) opfuse_profile_mark(k)
#else
#define OPFUSE_PROFILE_MARK(k) ((void)0)
#endif

/* Debug builds only (validate --per-kernel): built with -DOPFUSE_DEBUG_DUMP, the schedule hands
   every kernel output to opfuse_debug_hook right after the kernel; otherwise nothing is added. */
#ifdef OPFUSE_DEBUG_DUMP
void (*opfuse_debug_hook)(int kernel, int output, const void *data) = 0;
#define OPFUSE_DEBUG_OUT(k, j, p) \
    do {{ if (opfuse_debug_hook) opfuse_debug_hook(k, j, (const void *)(p)); }} while (0)
#else
#define OPFUSE_DEBUG_OUT(k, j, p) ((void)0)
#endif

/* What opfuse_model_invoke returns: 0, or an OPFUSE_ERROR_* a kernel found at run time (model.h;
   opfuse/backends/c/gather.py). */
static int opfuse_status;

"""
    size = {"float": 4, "int8_t": 1, "uint8_t": 1, "int32_t": 4, "int64_t": 8}
    copy_in = [f"    opfuse_copy(opfuse_model_input({k}), inputs[{k}], "
               f"{x.size * size[x.ctype]}u);" for k, x in enumerate(info.inputs)]
    copy_out = [f"    opfuse_copy(outputs[{k}], opfuse_model_output({k}), "
                f"{x.size * size[x.ctype]}u);" for k, x in enumerate(info.outputs)]
    tail = [
        *_pointers("input", where_in, info.inputs),
        *_pointers("output", where_out, info.outputs),
        "int opfuse_model_invoke(void) {",
        "    opfuse_status = 0;",
        *calls.lines,
        "    return opfuse_status;",
        "}",
        "",
        "static void opfuse_copy(void *dst, const void *src, unsigned nbytes) {",
        "    if (dst != src) memmove(dst, src, (size_t)nbytes);",
        "}",
        "",
        f"int opfuse_model_run_v(const {ti} *const *inputs, {to} *const *outputs) {{",
        *copy_in,
        "    const int status = opfuse_model_invoke();",
        *copy_out,
        "    (void)inputs;",
        "    (void)outputs;",
        "    return status;",
        "}",
        "",
        f"int opfuse_model_run({', '.join(ins + outs)}) {{",
        f"    const {ti} *inputs[{max(n_in, 1)}] = {{{', '.join(in_names) or '0'}}};",
        f"    {to} *outputs[{max(n_out, 1)}] = {{{', '.join(out_names) or '0'}}};",
        "    return opfuse_model_run_v(inputs, outputs);",
        "}",
    ]
    # the ISA's helper functions, when its kernels call them
    helpers = isa.helpers(funcs.text()) if isa is not None and isa.helpers else ""
    return head + extra + fast_math(funcs.text()) + helpers + funcs.text() + "\n".join(tail) + "\n"


def run_args(info: Manifest) -> tuple[list[str], list[str]]:
    """The parameters of opfuse_model_run: inputs then outputs, each in its own C type."""
    ins, outs = info.inputs, info.outputs
    a = [f"const {x.ctype} *input" + ("" if len(ins) == 1 else str(i))
         for i, x in enumerate(ins)]
    b = [f"{x.ctype} *output" + ("" if len(outs) == 1 else str(i))
         for i, x in enumerate(outs)]
    return a, b


def emit_c(
    result: CompileResult,
    outdir: Path | str,
    fuse: bool = True,
    planner: str = DEFAULT_PLANNER,
    cascades: bool = True,
    prefix: str = DEFAULT_PREFIX,
    force: bool = False,
    extra_files: Mapping[str, bytes] | None = None,
) -> CEmitted:
    """Write the C project for ``result`` into ``outdir`` and describe it (``cascades`` false:
    the same kernels layer by layer, see ``c_schedule``; ``prefix`` names its symbols,
    opfuse/backends/c/prefix.py; ``extra_files``: more files written with it, the QDQ model of
    ``compile --precision int8``). The folder is written whole or not at all, and a folder holding
    files opfuse did not write is refused unless ``force`` (opfuse/output/tree.py)."""
    files, info, plan = generate(result, fuse, planner, cascades, prefix)
    clash = set(files) & set(extra_files or {})
    if clash:
        raise OpfuseError(f"C backend: {sorted(clash)[0]} is a file of the C project")
    write_tree(Path(outdir), {**files, **(extra_files or {})}, manifest="model.json", rebuilt=rebuilt_by_make(prefix),
               protect=(_source_file(result),), force=force)
    return CEmitted(
        outdir=Path(outdir),
        fused=fuse,
        planner=planner,
        arena_bytes=info.arena_bytes,
        stack_scratch_bytes=info.stack_scratch_bytes,
        weights_bytes=info.weights_bytes,
        kernels=info.kernels,
        inputs=tuple((x.name, x.shape) for x in info.inputs),
        outputs=tuple((x.name, x.shape) for x in info.outputs),
        plan=plan,
        cascades=info.cascades,
    )
