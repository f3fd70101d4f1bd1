"""Names from a model made safe for where opfuse writes them (docs/architecture.md, "Names from a
model").

Node, value and graph input/output names, op types and domains, TFLite tensor names and custom
op codes, and the model's path are text someone else wrote. opfuse never builds a C identifier
from one (identifiers are indices and opfuse's own kernel names); it shows one only through this
module:

- ``for_comment``: inside a C comment, a Makefile comment or the generated README. Only printable
  ASCII that cannot end or open a comment, start a trigraph, continue a line or open markup is
  kept; every other character is written as ``<U+XXXX>`` (no backslash), so ``*/``, ``/*``,
  ``//``, ``??/``, a newline, ESC or U+202E never appear, and the text is capped in length.
- ``for_terminal``: in a table or message on a terminal: one line, every character Python does
  not call printable (C0/C1 controls, ESC, DEL, bidi and other format characters, line
  separators) written as its escape (``\\x1b``, ``\\n``, ``\\u202e``).
"""

from __future__ import annotations

import string

COMMENT_LIMIT = 64  # characters of a name kept in a comment; the rest is counted, not written

# Kept as they are in a comment: letters, digits and punctuation that is inert in C comments,
# Makefile comments and Markdown code spans. Not kept: * (ends a comment after /), ? (trigraphs),
# \ (line continuation), ` (ends a code span), $ (Make), < > & (HTML in Markdown), control chars.
_KEPT = frozenset(string.ascii_letters + string.digits + " _-.,:;=+#()[]{}@!%|^~'\"/")


def _escape(ch: str) -> str:
    return f"<U+{ord(ch):04X}>"


def for_comment(text: object, limit: int = COMMENT_LIMIT) -> str:
    """``text`` as it may appear inside a generated comment (see the module docstring). ``*`` is
    always escaped, and a ``/`` next to another ``/``, so neither ``/*``, ``*/`` nor ``//`` can
    form (the templates never put ``*`` or ``/`` right beside the text)."""
    raw = str(text)
    if not raw:
        return "<empty>"
    out: list[str] = []
    used = 0
    for i, ch in enumerate(raw):
        slash_risk = ch == "/" and "/" in raw[max(i - 1, 0) : i] + raw[i + 1 : i + 2]
        piece = ch if ch in _KEPT and not slash_risk else _escape(ch)
        if used + len(piece) > limit:
            out.append(f"...({len(raw)} chars)")
            break
        out.append(piece)
        used += len(piece)
    return "".join(out)


def for_terminal(text: object) -> str:
    """``text`` on one terminal line: non-printable characters as their Python escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def assert_inert(files: dict[str, str]) -> None:
    """A last check on generated text: no character outside printable ASCII and newline, and no
    ``??`` (a trigraph's start). A name that reached a file without ``for_comment`` is a bug in
    opfuse, so this raises AssertionError, not a user-facing error."""
    for name, text in files.items():
        bad = next((c for c in text if not (" " <= c <= "~" or c in "\n\t")), None)
        if bad is not None or "??" in text:
            what = "'??'" if bad is None else _escape(bad)
            raise AssertionError(f"generated {name} holds {what}: a name bypassed for_comment")
