"""Target-independent canonicalization: algebraic rewrites that preserve the model's outputs.

``canonicalize(model)`` rewrites in place and returns ``{pass name: times fired}`` with every pass
in ``PASS_NAMES`` present (0 when it did not fire), in that order. Passes, one module each, with
their algebra in the module docstring:

==============================  =====================================================================
remove_identity                 Identity nodes of the imported model (``noop``)
remove_dropout                  inference Dropout (``noop``)
remove_noop_reshape             Reshape to the same shape (``noop``)
remove_noop_transpose           Transpose with the identity permutation (``noop``, onnxscript)
merge_transposes                Transpose∘Transpose composed, removed when the identity (``transpose_merge``)
dedupe_transposes               two equal Transposes of one value -> one (``transpose_dedupe``)
remove_noop_cast                Cast to the dtype it already has (``noop``, onnxscript)
fuse_hardswish                  x * clip(x + 3, 0, 6) / 6 and friends -> HardSwish (``hardswish``)
fuse_hardsigmoid                clip(x + 3, 0, 6) / 6 or * 1/6 -> HardSigmoid (``hardswish``)
fuse_gelu                       0.5 x (1 + erf(x / sqrt 2)) and the tanh form -> Gelu (``gelu``)
fuse_swish                      x * sigmoid(x) and x * sigmoid(alpha x) -> Swish (``swish``)
fuse_rmsnorm                    x / sqrt(mean(x^2) + eps) * w -> RMSNormalization (``rmsnorm``)
push_transpose_unary            f(T(x)) -> T(f(x)) for activations (``transpose_unary``)
push_transpose_affine           Mul/Add(T(x), c) -> T(Mul/Add(x, c permuted)) (``transpose_affine``)
push_transpose_elementwise      Add(T(a), T(b)) -> T(Add(a, b)) (``transpose_elementwise``)
push_transpose_pad              Pad(T(x)) -> T(Pad(x)), pads permuted (``transpose_pad``)
push_transpose_concat           Concat(T(a), T(b)) -> T(Concat(a, b)), axis remapped (``transpose_concat``)
push_transpose_reduce           Reduce(T(x)) -> T(Reduce(x)), axes remapped (``transpose_reduce``)
normalize_conv_auto_pad         Conv auto_pad spelled out as pads (``pad``, onnxscript)
fuse_bn_into_conv               BatchNorm folded into Conv weights (``batchnorm``, onnxscript)
fuse_bn_into_conv_transpose     ... into ConvTranspose (``batchnorm``, onnxscript)
fuse_bn_into_gemm               ... into Gemm (``batchnorm``, onnxscript)
fuse_bn_into_matmul             ... into MatMul with a 2-D output, giving Gemm (``batchnorm``)
fold_affine_into_linear         per-channel Mul/Add/Sub/Div folded into the producer (``affine``)
fuse_pad_into_conv              zero Pad -> Conv pads (``pad``, onnxscript)
fuse_pad_into_avgpool           zero Pad -> AveragePool pads, count_include_pad=1 (``pad``)
fuse_pad_into_maxpool           -inf (or provably small) Pad -> MaxPool pads (``pad``)
batchnorm_to_mul_add            a BatchNorm no linear op absorbed -> Mul + Add (``batchnorm_affine``)
transpose_to_reshape            a Transpose moving only size-1 axes -> Reshape (``transpose_reshape``)
fold_constants                  nodes whose inputs all became constants (``folding``)
==============================  =====================================================================

The driver runs rounds until nothing fires (at most ``MAX_ROUNDS``). A round is three linear sweeps
over the graph, then Identity forwarding and constant folding:

1. cleanup and recognition: no-ops, Transpose pairs, hard-sigmoid/hard-swish, then layout
   canonicalization (Transposes moved towards the outputs, past elementwise ops, activations, Pad,
   Concat and reductions, where they cancel), auto_pad. First, so that a later fold cannot absorb
   the ``+ 3`` of a hard-swish into a Conv bias, and so that an exporter's NHWC BatchNorm (Mul/Add
   between Transpose pairs) sits right after its Conv when the folds run.
2. folds into producers: BatchNorm, then per-channel affine, Pad into Conv/pools.
3. leftover BatchNorms become Mul + Add (only after every linear op had its chance to absorb them).

In a round where none of these fired, a Transpose still moving only size-1 axes becomes a Reshape.

The layout passes move Transposes only downstream and never add one on a side input, so they
terminate; when one reused a Transpose that sits later in the graph the nodes are re-sorted.

No whole-graph shape inference runs inside: rewrites copy the static shape of the value they
replace and set the shapes of the intermediate values they create. At the end NameFixPass gives
every node a unique non-empty name; graph outputs keep their names.
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import NameFixPass

from opfuse.passes._driver import RulePass, sweep
from opfuse.passes.affine import affine_pass
from opfuse.passes.batchnorm import batchnorm_pass
from opfuse.passes.batchnorm_affine import batchnorm_affine_pass
from opfuse.passes.folding import fold_constants
from opfuse.passes.gelu import gelu_pass
from opfuse.passes.hardswish import hardswish_passes
from opfuse.passes.noop import forward_sweep, noop_passes
from opfuse.passes.pad import pad_passes
from opfuse.passes.rmsnorm import rmsnorm_pass
from opfuse.passes.swish import swish_pass
from opfuse.passes.transpose_affine import affine_push_pass
from opfuse.passes.transpose_concat import concat_push_pass
from opfuse.passes.transpose_elementwise import elementwise_pass
from opfuse.passes.transpose_pad import pad_push_pass
from opfuse.passes.transpose_reduce import reduce_push_pass
from opfuse.passes.transpose_reshape import reshape_pass
from opfuse.passes.transpose_unary import unary_pass

MAX_ROUNDS = 8


def _phases() -> list[list[RulePass]]:
    pads = pad_passes()
    return [
        [*noop_passes(), *hardswish_passes(), gelu_pass(), swish_pass(), rmsnorm_pass(),
         *layout_passes(), pads[0]],
        [*batchnorm_pass(), affine_pass(), *pads[1:]],
        [batchnorm_affine_pass()],
    ]


# Only once the rounds above change nothing: a Transpose that might still cancel with another one
# is worth more as a Transpose than as a Reshape.
LATE = [reshape_pass()]


def layout_passes() -> list[RulePass]:
    return [
        unary_pass(),
        affine_push_pass(),
        elementwise_pass(),
        pad_push_pass(),
        concat_push_pass(),
        reduce_push_pass(),
    ]


PHASES = _phases()
LAYOUT_NAMES = frozenset(
    {"merge_transposes", "dedupe_transposes", "transpose_to_reshape"}
    | {p.name for p in layout_passes()}
)
PASS_NAMES: tuple[str, ...] = (
    "remove_identity",
    "remove_dropout",
    *(p.name for phase in PHASES for p in phase),
    *(p.name for p in LATE),
    "fold_constants",
)


def canonicalize(model: ir.Model) -> dict[str, int]:
    """Rewrite ``model`` in place; return how often each pass fired (all of ``PASS_NAMES``)."""
    counts = dict.fromkeys(PASS_NAMES, 0)
    graph = model.graph
    original = {n for n in graph if n.op_type in ("Identity", "Dropout")}
    onnxscript.optimizer.basic_constant_propagation(graph)
    only: set[ir.Node] | None = None  # None: every node; later rounds revisit what changed
    for _ in range(MAX_ROUNDS):
        fired = forwarded = 0
        touched: set[ir.Node] = set()
        moved = sum(counts[name] for name in LAYOUT_NAMES)
        for phase in PHASES:
            fired += sweep(model, phase, counts, only=only, touched=touched)
            forwarded += forward_sweep(graph, original, counts)
        if not fired and not forwarded:
            fired += sweep(model, LATE, counts, touched=touched)
        if sum(counts[name] for name in LAYOUT_NAMES) != moved:
            graph.sort()  # a reused or kept Transpose may sit after a reader of it
        if fired or forwarded:  # drop what the rewrites left dead (a Pad folded away, old weights)
            onnxscript.optimizer.remove_unused_nodes(model)
        folded = fold_constants(model)
        counts["fold_constants"] += folded
        if not fired and not forwarded and not folded:
            break
        # Identity forwarding and constant folding rewire edges the sweep did not see: full round.
        only = None if (forwarded or folded) else touched
    NameFixPass()(model)
    return counts


__all__ = ["MAX_ROUNDS", "PASS_NAMES", "canonicalize"]
