"""docs/supported_ops.md: per built-in target, what fuses and cascades, and per op what the C
backend writes, all read from the op registry (``opfuse.ops``), the named constraints
(``opfuse.fusion.checks``) and the target files (docs/architecture.md, "Named constraints").
Nothing here is written by hand, so the page cannot drift from the code: a test regenerates it."""

from __future__ import annotations

from pathlib import Path

import opfuse.targets
from opfuse.fusion.checks import CONSTRAINTS
from opfuse.fusion.constraints import HEAD
from opfuse.fusion.pattern_checks import PATTERNS, Pattern
from opfuse.fusion.types import REASONS
from opfuse.ops import ACTIVATION, ARITH, CLAMP, OPS, groups
from opfuse.targets import Target, parse_target

COMMAND = "python -m opfuse.docs --write docs/supported_ops.md"
_CLASSES = (CLAMP, ACTIVATION, ARITH)


def builtin_targets() -> list[Target]:
    """The target files shipped in ``opfuse/targets/`` (not a user's own)."""
    folder = Path(opfuse.targets.__file__).parent
    return [parse_target(p) for p in sorted(folder.glob("*.toml"))]


def _ops(names: frozenset[str] | set[str]) -> str:
    return ", ".join(sorted(names)) if names else "none"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _class_ops(classes: tuple[str, ...]) -> str:
    """``clamp (Clip, Relu); arith (...)`` for the epilogue classes a kernel takes."""
    if not classes:
        return "none"
    return "; ".join(f"{c} ({_ops(groups.epilogue_class(c))})" for c in _CLASSES if c in classes)


def _member(op: str, streams: frozenset[str]) -> str:
    """How cascaded C streams an op: a member reading a window of rows, or row by row."""
    if op in groups.WINDOWED:
        return "windowed"
    return "row-wise" if op in streams else "-"


def _op_table() -> list[str]:
    rows = ["| op | kind | tags | epilogue class | float32 C | int8 C | float32 cascade "
            "| int8 cascade |", "|---|---|---|---|---|---|---|---|"]
    for op in sorted(OPS):
        info = OPS[op]
        rows.append(
            f"| {op} | {info.kind.name.lower()} | {', '.join(sorted(info.tags)) or '-'} "
            f"| {info.epilogue or '-'} | {info.c or '-'}{' (+ expr)' if info.c_expr else ''} "
            f"| {info.c8 or '-'} | {_member(op, groups.C_CASCADE)} "
            f"| {_member(op, groups.C_INT8_CHAIN)} |"
        )
    return rows


def _target(t: Target) -> list[str]:
    caps = t.fusion
    anchor_epilogue = _class_ops(caps.anchor_epilogue)
    if caps.residual_add:
        anchor_epilogue += "; an arith op on a second full-size activation (a residual)"
    cascade_heads = _ops(groups.WINDOWED)
    lines = [
        f"### {t.name}",
        "",
        t.description,
        "",
        "| | |",
        "|---|---|",
        f"| precisions | {', '.join(t.precisions)} |",
        f"| anchors (each heads a kernel) | {_ops(groups.ANCHORS)} |",
        f"| epilogues an anchor takes | {anchor_epilogue} |",
        f"| pools after an anchor | {_ops(groups.ALL_POOLS) if caps.anchor_pool else 'none'} |",
        f"| epilogues a pool takes | {_class_ops(caps.pool_epilogue)} |",
        f"| standalone elementwise ops | "
        f"{'chain freely' if caps.elementwise_chains else 'take ' + _class_ops(caps.elementwise_epilogue)} |",
        f"| most ops in one kernel (max_chain) | {caps.max_chain} |",
        f"| int8 kernels requantize once (int8_requantize_once) | {_yes(caps.int8_requantize_once)} |",
        f"| cascades | {_yes(caps.cascade)} |",
    ]
    if caps.cascade:
        lines += [
            f"| cascade: most anchors, residual Add, band rows | {caps.cascade_max_anchors}, "
            f"{_yes(caps.cascade_residual)}, {caps.cascade_band_rows} |",
            f"| cascade: windowed ops | {cascade_heads} |",
            f"| cascade: row-wise ops, float32 C | {_ops(groups.C_CASCADE)} |",
            f"| cascade: row-wise ops, int8 C | {_ops(groups.C_INT8_CHAIN)} |",
        ]
    return [*lines, ""]


def _constraints() -> list[str]:
    rows = [f"Every message starts `{HEAD.strip()}` and goes on:", "",
            "| # | constraint | family | reason | message |", "|---|---|---|---|---|"]
    for i, c in enumerate(CONSTRAINTS, 1):
        message = c.message.replace("|", "\\|")
        rows.append(f"| {i} | `{c.name}` | {c.family} | `{c.reason}` | {message} |")
    return rows


def _enabled(t: Target, p: Pattern) -> str:
    return p.on if p.key is None or getattr(t.fusion, p.key) else p.off


def _patterns() -> list[str]:
    """Per target which pattern fusions are on, then each pattern's declines in run order."""
    head = " | ".join(f"{p.name} (`{p.key}`)" if p.key else p.name for p in PATTERNS)
    lines = [f"| target | {head} |", "|---" * (len(PATTERNS) + 1) + "|"]
    lines += [f"| {t.name} | " + " | ".join(_enabled(t, p) for p in PATTERNS) + " |"
              for t in builtin_targets()]
    for p in PATTERNS:
        lines += ["", f"**{p.name}**: {p.where}.", ""]
        if not p.constraints:
            lines.append("No declines of its own.")
            continue
        lines += ["| # | constraint | family | reason | message |", "|---|---|---|---|---|"]
        for i, c in enumerate(p.constraints, 1):
            message = c.template.replace("|", "\\|")
            lines.append(f"| {i} | `{c.name}` | {c.family} | `{c.reason}` | {message} |")
    return lines


def render() -> str:
    """The whole page, deterministic: sorted ops, targets by file name, constraints in run order."""
    lines = [
        "# Supported ops and fusions",
        "",
        f"Generated from the op registry, the named constraints and the target files by `{COMMAND}`;",
        "do not edit by hand (`tests/test_supported_ops.py` fails when this page is out of date).",
        "What `analyze` reports and `--emit c` builds on each target follows these rules; the C",
        "backend also refuses a kernel it cannot write (`constraint_emittable`, with its reason).",
        "",
        "## Targets",
        "",
    ]
    for t in builtin_targets():
        lines += _target(t)
    lines += ["## Ops", "",
              "An op not listed is opaque: it runs as its own kernel and blocks fusion, never an "
              "error. `float32 C` and `int8 C` name the kernel family the C backend writes it "
              "with (`-`: none, `--emit c` stops with exit 3 naming the node); the cascade columns say "
              "how cascaded C streams the op: windowed (a member reading a window of rows) or "
              "row-wise.",
              "",
              *_op_table(), "",
              "## Constraints, in the order they run", "",
              "The first refusal is the one to fix first; each returns one reason code.", "",
              *_constraints(), "",
              "## Pattern fusions", "",
              f"Pattern fusions: {', '.join(p.name for p in PATTERNS)}. Each judges a whole "
              "match rather than one edge, on the greedy partition; a declined match leaves its edges to the constraints above, and its "
              "decline is one of these messages, whole.", "",
              *_patterns(), "",
              "## Reason codes", "", "| reason | meaning |", "|---|---|",
              *(f"| `{r}` | {text} |" for r, text in REASONS.items()), ""]
    return "\n".join(lines)
