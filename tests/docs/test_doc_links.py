"""Every relative link of README.md and docs/*.md points at a file that exists, and a link with a
``#fragment`` into a Markdown file at one of its headings (GitHub's anchors).

Links inside fenced code blocks and inline code spans are not links; ``http(s):`` and
``mailto:`` links are not checked (no network in the tests).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from doc_examples import DOCS, README, ROOT

#: ``[text](target)`` and ``![alt](target)``, with an optional ``"title"``
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCED = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", flags=re.S)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", flags=re.M)


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (line breaks kept)."""
    text = _FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, inline markup and punctuation dropped (letters,
    digits, ``_`` and ``-`` kept), spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a Markdown file's headings (a repeated one gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    text = _FENCED.sub("", path.read_text(encoding="utf-8"))
    for heading in _HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path``'s prose."""
    text = prose(path.read_text(encoding="utf-8"))
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1)) for match in _LINK.finditer(text)
    ]


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def broken(path: Path) -> list[str]:
    """``file:line: target (why)`` for every relative link of ``path`` that points nowhere."""
    found = []
    for line, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        where = f"{_shown(path)}:{line}: {target}"
        if not resolved.exists():
            found.append(f"{where} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            found.append(f"{where} (no heading with that anchor in {resolved.name})")
    return found


FILES = [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_every_relative_link_points_at_an_existing_file_and_heading(path: Path) -> None:
    assert broken(path) == []


def test_the_readme_links_into_the_docs() -> None:
    targets = [target for _, target in links(README)]
    assert sum(target.startswith("docs/") for target in targets) >= 10


def test_slug_is_githubs_anchor() -> None:
    assert slug("Quickstart: `create_agent` + `MemoryMiddleware`") == (
        "quickstart-create_agent--memorymiddleware"
    )
    assert slug("7. Retrieval on PostgreSQL + pgvector at scale") == (
        "7-retrieval-on-postgresql--pgvector-at-scale"
    )
    assert slug("Which strategy?") == "which-strategy"


def test_a_broken_link_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    """The checker itself: a link in code is no link, a web link is not checked."""
    fake = tmp_path / "page.md"
    fake.write_text(
        "# Title\n\nSee [there](missing.md), [here](#title), [nowhere](#no-such-heading),\n"
        "`[in code](missing.md)` and [the web](https://example.com/x).\n",
        encoding="utf-8",
    )
    assert links(fake) == [
        (3, "missing.md"),
        (3, "#title"),
        (3, "#no-such-heading"),
        (4, "https://example.com/x"),
    ]
    assert broken(fake) == [
        f"{fake}:3: missing.md (no such file)",
        f"{fake}:3: #no-such-heading (no heading with that anchor in page.md)",
    ]
