"""``docs/architecture.md`` is the map of the package: the tree it draws names every module that
exists and no module that does not, and every file path its tables name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "langmem_ext"

#: a folder line of the tree: two spaces, ``name/``, then what it is
FOLDER = re.compile(r"^  (\w+)/\s")
#: a nested folder line (``transcripts/`` inside ``replay/``)
SUBFOLDER = re.compile(r"^    (\w+)/\s")
MODULE = re.compile(r"\b(\w+)\.py\b")


def tree_modules(page: str) -> set[str]:
    """The modules the tree names, as paths relative to the package (``core/plan.py``). A line
    indented by four spaces starts an entry of the current folder; a deeper line continues the
    entry above it (a subfolder's continuation lines name the subfolder's modules)."""
    block = page.split("```", 2)[1]
    named: set[str] = set()
    folder = current = ""
    for line in block.splitlines()[1:]:
        if m := FOLDER.match(line):
            folder = current = m.group(1) + "/"
            named.add(folder + "__init__.py")
            continue
        if (m := SUBFOLDER.match(line)) and folder:
            current = folder + m.group(1) + "/"
            named.add(current + "__init__.py")
            line = line[m.end() :]
        elif line.startswith("    ") and not line.startswith("     "):
            current = folder
        prefix = current if line.startswith(" ") or current != folder else ""
        if not folder:
            prefix = ""
        named.update(prefix + name + ".py" for name in MODULE.findall(line))
    return named


def package_modules() -> set[str]:
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    return modules - {"__main__.py"}


def test_the_tree_names_every_module_of_the_package() -> None:
    missing = package_modules() - tree_modules(PAGE.read_text(encoding="utf-8"))
    assert not missing, f"docs/architecture.md's tree does not name: {sorted(missing)}"


def test_the_tree_names_no_module_that_does_not_exist() -> None:
    stale = tree_modules(PAGE.read_text(encoding="utf-8")) - package_modules()
    assert not stale, (
        f"docs/architecture.md's tree names modules that do not exist: {sorted(stale)}"
    )


def test_every_path_the_page_names_exists() -> None:
    page = PAGE.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:tests|bench|docs|langmem_ext)?/?[\w/]+/\w+\.py)", page))
    package_paths = set(re.findall(r"`(\w+/[\w/]*\w+\.py)", page))
    missing = [
        p
        for p in sorted(paths | package_paths)
        if not (ROOT / p).is_file() and not (PACKAGE / p).is_file()
    ]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_tree_parser_sees_a_missing_and_a_stale_module() -> None:
    page = (
        "x\n```\nlangmem_ext/\n  a.py · b.py   top\n\n  core/   pure\n"
        "    plan.py   cut · walk.py  the walk\n"
        "    sub/      x.py · y.py  two\n               z.py  three\n"
        "    fold.py   fold\n                 fold_view.py\n```\n"
    )
    assert tree_modules(page) == {
        "a.py",
        "b.py",
        "core/__init__.py",
        "core/plan.py",
        "core/walk.py",
        "core/sub/__init__.py",
        "core/sub/x.py",
        "core/sub/y.py",
        "core/sub/z.py",
        "core/fold.py",
        "core/fold_view.py",
    }
