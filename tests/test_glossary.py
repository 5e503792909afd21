"""docs/glossary.md: one page, each of the project's words defined once, every name of the code it cites real."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
WORDS = ["B", "spread", "low / high", "verdict", "fact", "row", "record", "plan", "view", "claim", "sample", "median",
         "ceiling", "roof", "ridge", "effective bandwidth"]
# Packages of bytesup whose modules the page may cite by their short name (`robust.Robust.low`).
PACKAGES = ["course", "host", "llama", "store", "check", "run", ""]


def defined() -> list[str]:
    return re.findall(r"^- \*\*(.+?)\*\*:", PAGE, flags=re.M)


def test_every_word_is_defined_once():
    found = defined()
    assert sorted(found) == sorted(set(found)), "a word is defined twice"
    assert [w for w in WORDS if w not in found] == []


def test_the_page_is_one_page_and_the_readme_links_it():
    assert len(PAGE.splitlines()) <= 80
    assert "](docs/glossary.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def resolve(dotted: str) -> bool:
    """Whether `dotted` names a module of bytesup, or something in one (a dataclass's field counts), by its path
    under bytesup or under one of its packages; `ctx.` is the lesson context."""
    parts = dotted.removeprefix("bytesup.").replace("ctx.", "lesson.LessonContext.", 1).split(".")
    for package in PACKAGES:
        for k in range(len(parts), 0, -1):
            try:
                target = importlib.import_module(".".join(["bytesup", *([package] if package else []), *parts[:k]]))
            except ModuleNotFoundError:
                continue
            for part in parts[k:]:
                if part in getattr(target, "__dataclass_fields__", {}):
                    target = None
                    continue
                if target is None or not hasattr(target, part):
                    return False
                target = getattr(target, part)
            return True
    return False


def test_every_name_of_the_code_it_cites_exists():
    cited = [c.split("(")[0] for c in re.findall(r"`([a-z_]+\.[A-Za-z_.]+(?:\([^`]*\))?)`", PAGE)]
    assert cited, "the page cites the code by name"
    assert [c for c in cited if not resolve(c)] == []
