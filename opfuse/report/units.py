"""How the terminal and the pages write numbers: sizes in binary units (KiB, MiB: 1024), counts in
decimal ones (k, M, G), bandwidth in decimal GB/s. The pages' JS (assets/common.js) follows the same
rules, so a figure reads the same everywhere."""

from __future__ import annotations


def fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{int(n)}"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{int(n):,} B"


def fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:,.2f} {unit}"
    return f"{s / 1e-9:,.1f} ns"


def fmt_energy(j: float) -> str:
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6)):
        if j >= scale:
            return f"{j / scale:,.2f} {unit}"
    return f"{j / 1e-9:,.1f} nJ"
