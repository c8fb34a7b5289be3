"""MkDocs hook: fills each `<!-- cited-by P8 -->` marker of partitioning.md with the modules
whose comments cite that behaviour (`[P8]`, `P8.`, `(P8)`), read from src/ and sparkjobs/ when
the site is built, so the list follows the code instead of going stale."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- cited-by (P\d+) -->")


def _citations() -> dict[str, list[str]]:
    found: dict[str, set[str]] = {}
    for tree in ("src/sbemu", "sparkjobs"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for number in set(re.findall(r"\bP(1[0-9]|[1-9])\b", text)):
                found.setdefault(f"P{number}", set()).add(str(path.relative_to(ROOT)))
    return {p: sorted(mods) for p, mods in found.items()}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if not MARKER.search(markdown):
        return markdown
    cites = _citations()

    def fill(match: re.Match[str]) -> str:
        modules = cites.get(match.group(1), [])
        if not modules:
            return "*Cited by:* no module names it yet (the behaviour follows from the others)."
        return "*Cited by:* " + ", ".join(f"`{m}`" for m in modules)

    return MARKER.sub(fill, markdown)
