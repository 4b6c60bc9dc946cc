"""The documentation's links lead somewhere: every relative link of README, ARCHITECTURE and
docs/ names a file of the repository, and every ``#anchor`` one of the target's headings,
as GitHub derives them (so a renamed heading cannot leave its links dangling)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of ``page``'s headings: lowercased, punctuation but ``-`` and
    ``_`` dropped, spaces as ``-``; a repeated one numbered ``-1``, ``-2``, ..."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+?)\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, repeat = slug, 0
        while anchor in anchors:
            repeat += 1
            anchor = f"{slug}-{repeat}"
        anchors.add(anchor)
    return anchors


def _links() -> list[tuple[str, str, str]]:
    """(page, target, anchor) of every link that is not to another site."""
    found = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target, anchor in _LINK.findall(text):
            if not re.match(r"[a-z]+:", target):
                found.append((str(page.relative_to(ROOT)), target, anchor))
    return found


@pytest.mark.parametrize(("page", "target", "anchor"), _links(), ids=lambda v: str(v))
def test_every_link_leads_somewhere(page: str, target: str, anchor: str) -> None:
    destination = (ROOT / page).parent / target if target else ROOT / page
    assert destination.exists(), f"{page} links to {target}, which does not exist"
    if anchor and destination.suffix == ".md":
        assert anchor in _anchors(destination), (
            f"{page}: no heading of {target or page} is #{anchor}"
        )
