"""``compile --emit c --prefix NAME``: every exported symbol and macro of the generated C under
its own name, so two models link into one firmware (docs/architecture.md, the backends row).

The generated files spell every identifier of their own with ``opfuse_`` (functions, the arena,
the weight blob, helpers) or ``OPFUSE_`` (macros, the include guard); the prefix rewrites both
at word starts: ``opfuse_model_invoke`` -> ``NAME_model_invoke``, ``OPFUSE_ARENA_BYTES`` ->
``NAME_ARENA_BYTES`` (upper case). Static kernel functions (``k3_...``) need no prefix.
"""

from __future__ import annotations

import re

from opfuse.errors import OpfuseError

DEFAULT = "opfuse"
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_KERNEL = re.compile(r"[kK][0-9]+")
_LOWER = re.compile(r"\bopfuse_")
_UPPER = re.compile(r"(?:\b|(?<=-D))OPFUSE_")  # -DOPFUSE_PROFILE in comments too
_KEEP = ("model.json",)  # the manifest names the prefix itself


def check_prefix(prefix: str) -> str:
    if not _IDENT.fullmatch(prefix):
        raise OpfuseError(
            f"--prefix '{prefix}': must be a C identifier (a letter, then letters, digits or _)"
        )
    if _KERNEL.fullmatch(prefix):  # k3_copy could be kernel 3's function as well as a helper
        raise OpfuseError(f"--prefix '{prefix}': k<digits> names the kernel functions; choose "
                          "another")
    return prefix


def with_prefix(files: dict[str, str], prefix: str) -> dict[str, str]:
    """``files`` with opfuse_/OPFUSE_ identifiers renamed to ``prefix``_ / ``PREFIX``_."""
    check_prefix(prefix)
    if prefix == DEFAULT:
        return files
    lower, upper = prefix + "_", prefix.upper() + "_"
    out = {}
    for name, text in files.items():
        if name not in _KEEP:
            text = _UPPER.sub(upper, _LOWER.sub(lower, text))
        out[name] = text
    return out
