"""Why not fused, ranked: the refused edges grouped by (producer op -> consumer op), each group with
its count, its reasons and the activation bytes fusing it would save (``opfuse.cost.summary``), the
groups worth acting on first. Refusals the target's design makes certain (its kernels hold one
anchor: a Conv never joins another Conv's kernel) are set apart as expected, so they do not bury the
rest."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from opfuse.cost.summary import refused_edge_savings

if TYPE_CHECKING:
    from opfuse.compiled import CompileResult
    from opfuse.schedule import Partition

ONE_ANCHOR = "holds one anchor"  # opfuse.fusion.rules' message for the one-anchor rule


def is_expected(reason: str, message: str) -> bool:
    """A refusal by the target's one-anchor rule: no target setting or model change lifts it."""
    return reason == "not_supported_by_target" and ONE_ANCHOR in message


def ranked_refusals(
    result: CompileResult, precision: str, part: Partition | None = None
) -> dict[str, Any]:
    """{"actionable": groups, "expected": groups} of ``part``'s refused edges (default: the
    compiled partition); groups by bytes saved, then edges, then name."""
    part = result.partition if part is None else part
    saved = refused_edge_savings(result.optimized, part, precision)
    op_of = {n.name: n.op_type for n in result.optimized.graph}
    groups: dict[tuple[bool, str, str], dict[str, Any]] = {}
    for d in part.decisions:
        if d.fused:
            continue
        expected = is_expected(d.reason, d.message)
        pair = (op_of.get(d.producer, "?"), op_of.get(d.consumer, "?"))
        g = groups.setdefault(
            (expected, *pair),
            {"producer_op": pair[0], "consumer_op": pair[1], "count": 0, "saved_bytes": 0,
             "reasons": Counter(), "edges": []},
        )
        bytes_saved = saved.get((d.producer, d.consumer), 0)
        g["count"] += 1
        g["saved_bytes"] += bytes_saved
        g["reasons"][d.reason] += 1
        g["edges"].append(
            {"producer": d.producer, "consumer": d.consumer, "reason": d.reason,
             "message": d.message, "saved_bytes": bytes_saved}
        )

    def done(expected: bool) -> list[dict[str, Any]]:
        out = []
        for (exp, *_), g in groups.items():
            if exp != expected:
                continue
            g = dict(g, reasons=dict(g["reasons"].most_common()))
            g["edges"] = sorted(g["edges"], key=lambda e: (-e["saved_bytes"], e["producer"]))
            out.append(g)
        return sorted(
            out, key=lambda g: (-g["saved_bytes"], -g["count"], g["producer_op"], g["consumer_op"])
        )

    return {"actionable": done(False), "expected": done(True)}
