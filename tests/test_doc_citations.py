"""Every docstring or comment that cites docs/architecture.md names a heading that exists there
(a clone has no ../shared, so the project's own map is the only document code may cite)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITE = re.compile(r'docs/architecture\.md[\s,(]*"([^"]+)"')


def _headings() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return [m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", text, re.M)]


def test_every_citation_names_a_heading() -> None:
    heads = _headings()
    missing = []
    for path in sorted((ROOT / "opfuse").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")):
        for name in CITE.findall(path.read_text()):
            name = " ".join(name.replace("#", " ").split())  # a comment wrapped mid-name
            if not any(h == name or h.startswith(name + ":") or h.startswith(name + " ")
                       for h in heads):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_no_code_cites_a_file_a_clone_lacks() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "opfuse").rglob("*")
                 if p.suffix in (".py", ".toml") and "DESIGN.md" in p.read_text()]
    assert not offenders, offenders
