"""Assembling a self-contained HTML page: inline CSS and JS from ``assets/``, data as embedded JSON.

Nothing on a page is fetched: no CDN, no fonts, no images; the data sits in a
``<script type="application/json">`` block, with ``<`` escaped so no string in it can end the block.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def asset(name: str) -> str:
    """The text of ``opfuse/report/assets/NAME``."""
    return (resources.files("opfuse.report.assets") / name).read_text(encoding="utf-8")


def embed_json(element_id: str, data: Any) -> str:
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def page(title: str, css: list[str], body: str, data_id: str, data: Any, js: list[str]) -> str:
    """One HTML document: ``css`` and ``js`` name asset files, inlined in order."""
    styles = "\n".join(asset(name) for name in css)
    scripts = "\n".join(f"<script>\n{asset(name)}\n</script>" for name in js)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{styles}\n</style>\n</head>\n<body>\n"
        f"{body}\n{embed_json(data_id, data)}\n{scripts}\n</body>\n</html>\n"
    )


def esc(text: object) -> str:
    return html.escape(str(text))
