"""The pages of docs/, by topic, for `capgeo docs` and the messages that cite them.

Help texts and messages cite a page as ``capgeo docs TOPIC`` rather than ``docs/TOPIC.md``: an
installed wheel has no docs/ folder beside it, so the pages travel inside the package (setup.py
copies docs/*.md to capgeo/docs/ when the wheel is built). A checkout or an editable install reads
the repository's docs/ folder itself, so a page edited there is what the command shows.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from capgeo.errors import CapgeoError


def _folders() -> list:
    """Where pages may lie: the package's own copy (a wheel), then the checkout's docs/ folder."""
    folders = []
    packaged = resources.files("capgeo").joinpath("docs")
    if packaged.is_dir():
        folders.append(packaged)
    root = Path(__file__).resolve().parent.parent
    # site-packages may hold some other distribution's docs/ folder: only a checkout's counts
    if (root / "pyproject.toml").is_file() and (root / "docs").is_dir():
        folders.append(root / "docs")
    return folders


def topics() -> dict[str, str]:
    """Each topic (a page's name without ``.md``) and the page's title, in name order."""
    found: dict[str, str] = {}
    for folder in _folders():
        for entry in folder.iterdir():
            if entry.name.endswith(".md") and entry.name[:-3] not in found:
                found[entry.name[:-3]] = _title(entry.read_text(encoding="utf-8"))
    return dict(sorted(found.items()))


def page(topic: str) -> str:
    """The text of one page. ``topic`` may be written ``gamma``, ``gamma.md`` or ``docs/gamma.md``."""
    name = topic.strip()
    name = name.removeprefix("docs/").removesuffix(".md")
    for folder in _folders():
        entry = folder.joinpath(f"{name}.md")
        if name and "/" not in name and entry.is_file():
            return entry.read_text(encoding="utf-8")
    known = ", ".join(topics()) or "none (this installation carries no pages)"
    raise CapgeoError(f"no documentation page {topic!r}; the pages are: {known}")


def _title(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return ""
