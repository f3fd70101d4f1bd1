"""Group a model's nodes into kernels under a target's fusion capabilities, with a reason per refusal.

The algorithm (after TVM's fuse_ops.cc, simplified to what edge kernels can do)
-----------------------------------------------------------------------------
A kernel is an *anchor* (Conv, ConvTranspose, Gemm, MatMul), a *pool*, a standalone *elementwise*
op, or anything else (closed: injective, reductions, opaque ops), followed by the ops its output stage
absorbed. One greedy pass visits the nodes in topological order. Every node ``v`` first becomes a
candidate kernel of its own; then, for each node ``p`` producing one of v's inputs, we ask whether v
may join p's kernel: the named constraints of ``checks.py`` (docs/supported_ops.md lists them), in
this order:

1. structure, whatever the target (a Transpose a MatMul reads as a strided view joins it first,
   ``views.py``): neither op is opaque (``opaque_op``), none of p's outputs is a
   graph output (``graph_output``) or read by any node but v (``multiple_consumers``; producers are
   never recomputed, ``FusionCaps.recompute`` is not implemented), dtypes agree (``dtype_mismatch``),
   neither op only moves data (``layout_change``), shapes are static (``dynamic_shape``);
2. the target's capabilities for the kernel's stage: an anchor kernel absorbs epilogues whose class
   (clamp / activation / arith) is in ``anchor_epilogue``, a residual add (a second full activation)
   if ``residual_add``, a pool if ``anchor_pool``; a BatchNormalization or arithmetic epilogue needs
   constant operands (``non_constant_weights``); a pool kernel absorbs ``pool_epilogue`` classes; an
   elementwise kernel absorbs anything elementwise if ``elementwise_chains``, else the
   ``elementwise_epilogue`` classes; otherwise ``not_supported_by_target``;
3. int8: the kernel requantizes once, or v is its own requantization clamp; the code generator
   writes the kernel (``support.py``);
4. length: the kernel holds fewer than ``max_chain`` ops (``chain_limit``).

If several producers' kernels would take v (a residual add after two convs), v joins one: anchor
kernels first (the add post-dominates the conv it completes), then the latest; the other edges are
recorded as ``other_producer_fused``. Every producer->consumer edge left unfused gets a Decision.

Why no cycle can appear. Rule 1 lets v join p's kernel only when v is the sole reader of every output
of p, so p is the last node (the *tip*) of its kernel and, by induction, no node of a kernel but its
tip is read from outside it. So every edge between kernels leaves a tip and arrives at a member whose
index is at most the consumer kernel's tip: the source tip's index is strictly smaller than the
destination tip's. Ordering kernels by their tip's index is therefore a topological order, which is
the schedule we return, and a cycle would need a strictly decreasing loop of indices. (A diamond
``a -> {b, c} -> d`` leaves ``a`` materialized, and d joins at most one of b and c.)

Cost: each node and each edge is looked at a constant number of times; O(nodes + edges).

Attention (targets with ``[fusion] attention = true``). ``attention.py`` then makes each attention
core (MatMul, scale/mask, Softmax, MatMul) one kernel that streams query rows; its docstring
argues why the order stays topological.

Cascades (targets with ``[fusion] cascade = true``). The kernels above are the layer-by-layer
partition: each still holds one anchor. ``cascade.py`` then merges runs of neighbouring kernels
into cascaded kernels that stream bands of rows through ring buffers (``rings.py``), choosing the
cuts that minimise the peak arena and, at that peak, the fewest kernels; every cut it keeps, and
every edge it cannot stream, gets a ``cascade_*`` reason (or a structural one). Merging only
neighbours in the schedule keeps the order topological, so the no-cycle argument above still holds.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_ir as ir

from opfuse.fusion.attention_merge import fuse_attention
from opfuse.fusion.boundary import boundary
from opfuse.fusion.capability import BACKEND
from opfuse.fusion.cascade import cascade
from opfuse.fusion.checks import CONSTRAINTS, WITHOUT_CAPABILITY, first_refusal
from opfuse.fusion.constraints import Edge
from opfuse.fusion.rules import ANCHOR, Group, Refusal, initial_stage, next_stage
from opfuse.fusion.support import ANY, KernelSupport
from opfuse.fusion.transformer import bias_members, norm_with_sum, takes_bias
from opfuse.fusion.views import join_as_anchor, layout_members, reads_as_layout, reads_as_view
from opfuse.schedule import Decision, Kernel, Partition
from opfuse.targets import Target


def partition(
    model: ir.Model, target: Target, cascades: bool = True, support: KernelSupport = ANY
) -> Partition:
    """Kernels of ``model`` on ``target`` in schedule order, and a decision per unfused edge.

    With ``cascades`` (and a target whose ``[fusion] cascade`` is true) runs of these kernels are
    then merged into cascades (``cascade.py``); ``Partition.without_cascades()`` gives them back.
    ``support`` is what the code generator can write (``support.py``): a kernel or cascade it
    cannot is refused with its reason, so the partition is one the backend builds.
    """
    nodes = list(model.graph)
    index = {id(n): i for i, n in enumerate(nodes)}
    group_of: list[Group] = []
    decisions: list[Decision] = []
    for v in nodes:
        accepted: list[tuple[ir.Node, Group]] = []
        for p, x in _producers(v, index):
            group = group_of[index[id(p)]]
            if reads_as_view(p, v, x, group, support) or reads_as_layout(p, v, x, group, support):
                # a Transpose the MatMul reads strided, or the Conv reads in place as NHWC
                accepted.append((p, group))
                continue
            refusal = _check(p, v, x, group, target, support, index)
            if refusal is None:
                accepted.append((p, group))
            else:
                decisions.append(Decision(p.name, v.name, False, refusal.reason, refusal.message))
        if not accepted:
            group_of.append(Group(head=v, stage=initial_stage(v), nodes=[v]))
            continue
        # Anchor kernels first (a residual add completes the conv it post-dominates), then the latest.
        p, chosen = max(accepted, key=lambda a: (a[1].stage == ANCHOR, index[id(a[0])]))
        chosen.stage = next_stage(chosen, v)
        chosen.nodes.append(v)
        join_as_anchor(chosen, v)
        group_of.append(chosen)
        for other, group in accepted:
            if group is not chosen:
                msg = (
                    f"{v.op_type} cannot join {group.label} on {target.name}: it already joined the "
                    f"{chosen.label} kernel of another input, and a kernel has one output stage"
                )
                decisions.append(Decision(other.name, v.name, False, "other_producer_fused", msg))
    # Each group appears once per member; its position is that of its tip (last member).
    tips: dict[int, Group] = {id(g): g for g in group_of}
    ordered = sorted(tips.values(), key=lambda g: index[id(g.nodes[-1])])
    layers = Partition(target.name, _kernels(g.nodes for g in ordered), tuple(decisions))
    layers = fuse_attention(model, layers, target, support)  # one kernel per attention core
    return cascade(model, layers, target, support) if cascades else layers


def trivial_partition(model: ir.Model) -> Partition:
    """Every node its own kernel, every intermediate materialized: the model "before"."""
    return Partition("none", _kernels([n] for n in model.graph), ())


def _check(
    p: ir.Node,
    v: ir.Node,
    x: ir.Value,
    group: Group,
    target: Target,
    support: KernelSupport,
    index: dict[int, int],
) -> Refusal | None:
    # transformer fusions (``transformer.py``): Add + norm storing the sum, a Linear's bias
    with_sum = norm_with_sum(p, v, x, group, index, target)
    if with_sum is not False:
        return with_sum or first_refusal(Edge(p, v, x, group, target, support), BACKEND)
    edge = Edge(p, v, x, group, target, support,
                free=bias_members(group.nodes) + layout_members(group.nodes))
    # a Linear's bias is the anchor's own, not an epilogue the target's capabilities judge
    return first_refusal(edge, WITHOUT_CAPABILITY if takes_bias(group, v, x, target) else CONSTRAINTS)


def _producers(v: ir.Node, index: dict[int, int]) -> list[tuple[ir.Node, ir.Value]]:
    """Distinct producer nodes of v's inputs (in input order) with the first value read from each."""
    seen: set[int] = set()
    found: list[tuple[ir.Node, ir.Value]] = []
    for value in v.inputs:
        if value is None:
            continue
        p = value.producer()
        if p is None or id(p) in seen or id(p) not in index:
            continue
        seen.add(id(p))
        found.append((p, value))
    return found


def _kernels(groups: Iterable[list[ir.Node]]) -> tuple[Kernel, ...]:
    kernels: list[Kernel] = []
    taken: dict[str, int] = {}
    for members in groups:
        inputs, outputs = boundary(members)
        ops = tuple(n.op_type for n in members)
        kernels.append(
            Kernel(
                name=_unique(_base_name(ops), taken),
                nodes=tuple(n.name for n in members),
                ops=ops,
                inputs=inputs,
                outputs=outputs,
            )
        )
    return tuple(kernels)


def _base_name(ops: tuple[str, ...]) -> str:
    lowered = [op.lower() for op in ops]
    return lowered[0] if len(lowered) == 1 else "fused_" + "_".join(lowered)


def _unique(base: str, taken: dict[str, int]) -> str:
    """``base`` the first time, then ``base_2``, ``base_3``... (skipping names already taken).

    ``taken`` maps every name given out to 1 and every base to the last suffix tried, so repeated
    bases cost O(1) each.
    """
    n = taken.get("\0" + base, 0)
    name = base if n == 0 else f"{base}_{n + 1}"
    while name in taken:
        n += 1
        name = f"{base}_{n + 1}"
    taken["\0" + base] = n + 1
    taken[name] = 1
    return name
