"""The deployment verdict in words, from ``Analysis.deployment_json()``: does the arena fit the RAM,
do the weights fit the flash, what is live at the peak, where the time goes. One wording for the
terminal, the report and the explorer (the pages show these lines as they are). Every number comes
from the JSON; nothing is estimated here."""

from __future__ import annotations

from typing import Any

from opfuse.report.units import fmt_bytes

PEAK_TENSORS = 4  # tensors named in the peak line; the rest are counted


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def ram_line(dep: dict[str, Any]) -> dict[str, Any]:
    arena, ram = dep["arena_bytes"], dep["ram_bytes"]
    if dep["fits_ram"]:
        text = (
            f"Arena {fmt_bytes(arena)} fits in {fmt_bytes(ram)} of RAM: "
            f"{fmt_bytes(dep['ram_margin_bytes'])} to spare"
        )
    else:
        text = (
            f"Arena {fmt_bytes(arena)} does not fit in {fmt_bytes(ram)} of RAM: "
            f"{fmt_bytes(-dep['ram_margin_bytes'])} over ({_ratio(arena, ram)} the RAM)"
        )
    return {"key": "ram", "ok": dep["fits_ram"], "text": text}


def flash_line(dep: dict[str, Any], target: str) -> dict[str, Any]:
    weights, flash = dep["weight_bytes"], dep["flash_bytes"]
    if flash is None:
        text = f"Weights {fmt_bytes(weights)}: flash size unknown ({target}'s target file gives none)"
    elif dep["fits_flash"]:
        text = (
            f"Weights {fmt_bytes(weights)} fit in {fmt_bytes(flash)} of flash: "
            f"{fmt_bytes(dep['flash_margin_bytes'])} to spare"
        )
    else:
        text = (
            f"Weights {fmt_bytes(weights)} do not fit in {fmt_bytes(flash)} of flash: "
            f"{fmt_bytes(-dep['flash_margin_bytes'])} over ({_ratio(weights, flash)} the flash)"
        )
    return {"key": "flash", "ok": dep["fits_flash"], "text": text}


def peak_line(dep: dict[str, Any]) -> dict[str, Any]:
    peak = dep["peak"]
    tensors = peak["tensors"]
    named = ", ".join(f"{t['name']} {fmt_bytes(t['size_bytes'])}" for t in tensors[:PEAK_TENSORS])
    more = f" and {len(tensors) - PEAK_TENSORS} more" if len(tensors) > PEAK_TENSORS else ""
    text = (
        f"Peak at step {peak['step']} ({peak['kernel']}): {fmt_bytes(peak['live_bytes'])} live in "
        f"{len(tensors)} tensor{'s' if len(tensors) != 1 else ''}: {named}{more}"
    )
    return {"key": "peak", "ok": None, "text": text, "tensors": [t["name"] for t in tensors]}


def time_line(dep: dict[str, Any], target: str) -> dict[str, Any]:
    t = dep["time"]
    n, share = t["kernels"], t["memory_bound_share"]
    if t["compute_bound_kernels"] == n:
        text = f"All {n} kernels compute-bound on {target}: fusion saves traffic and energy, not time"
    elif t["memory_bound_kernels"] == n:
        text = f"All {n} kernels memory-bound on {target}: time follows traffic, so fusion saves time"
    elif t["bound"] == "compute":
        text = (
            f"{t['compute_bound_kernels']} of {n} kernels compute-bound, {1 - share:.1%} of the time, "
            f"on {target}: fusion saves traffic and energy, little time"
        )
    else:
        text = (
            f"{t['memory_bound_kernels']} of {n} kernels memory-bound, {share:.1%} of the time, "
            f"on {target}: time follows traffic, so fusion saves time"
        )
    latency = t["compute_bound_s"] + t["memory_bound_s"]
    if latency and t["dispatch_s"] > 0.2 * latency:
        text += f"; dispatch overhead is {t['dispatch_s'] / latency:.0%} of it, so fewer kernels help"
    return {"key": "time", "ok": None, "text": text}


def verdict_lines(analysis_json: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict of ``analysis_json`` (``Analysis.to_json()``) as lines: key, ok (True, False or
    None when it is not a pass/fail statement or unknown) and text."""
    return deployment_lines(
        analysis_json["deployment"], analysis_json["target"], analysis_json.get("accounting", "")
    )


def deployment_lines(dep: dict[str, Any], target: str, accounting: str = "") -> list[dict[str, Any]]:
    lines = [ram_line(dep), flash_line(dep, target), peak_line(dep), time_line(dep, target)]
    unfused = dep.get("unfused_arena_bytes")
    if unfused and dep["arena_bytes"] > unfused:
        lines.insert(3, {"key": "fusion_peak", "ok": None, "text": (
            f"Fusion raises the peak arena from {fmt_bytes(unfused)} (one kernel per node) to "
            f"{fmt_bytes(dep['arena_bytes'])} (+{dep['arena_bytes'] / unfused - 1:.0%}), at step "
            f"{dep['peak']['step']} ({dep['peak']['kernel']}); `compile --emit c --no-fuse` builds "
            "the lower one")})
    if accounting == "activations-only":
        lines.append(
            {
                "key": "accounting",
                "ok": None,
                "text": "--activations-only: weight traffic is not counted (weights read 0 B), "
                "though the weights are still stored",
            }
        )
    return lines
