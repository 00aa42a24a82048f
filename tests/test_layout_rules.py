"""The package's layout rules hold: declared layers, no private imports across packages, no
import cycles, files and functions of a readable size, and every name imported from the module
that defines it.

The checkers and the exact rules are in ``tests/layout_checks.py`` (they read source, never
import it). Each rule is proved twice: once on langmem_ext itself (no finding), and once on a
tiny package written under ``tmp_path`` with one deliberate violation, where the checker must
report exactly that violation, by file and line.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from layout_checks import (
    DECLARE_AT,
    LAYERS,
    MAX_FILE_LINES,
    MAX_FUNCTION_LINES,
    Finding,
    cycle_findings,
    layer_findings,
    private_findings,
    reexport_findings,
    size_findings,
)
from source_trees import write_package

import langmem_ext

PACKAGE = Path(langmem_ext.__file__).parent


def _report(findings: list[Finding]) -> str:
    return "\n".join(map(str, findings))


def _where(findings: list[Finding]) -> list[tuple[str, int]]:
    return [(f.path, f.line) for f in findings]


# --------------------------------------------------------------------------------------------
# the rules on langmem_ext


def test_every_subpackage_is_a_declared_layer_and_imports_only_what_its_row_allows() -> None:
    assert not layer_findings(PACKAGE), _report(layer_findings(PACKAGE))


def test_replay_may_import_every_layer_below_it() -> None:
    assert LAYERS["replay"] >= {*LAYERS} - {"replay"}


def test_no_module_imports_a_private_module_or_name_of_another_package() -> None:
    assert not private_findings(PACKAGE), _report(private_findings(PACKAGE))


def test_no_import_cycles_between_modules() -> None:
    assert not cycle_findings(PACKAGE), _report(cycle_findings(PACKAGE))


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    assert not reexport_findings(PACKAGE), _report(reexport_findings(PACKAGE))


def test_no_file_and_no_function_over_the_size_limits() -> None:
    assert not size_findings(PACKAGE), _report(size_findings(PACKAGE))


# --------------------------------------------------------------------------------------------
# rule 1: every package is a declared layer, imports point down


LAYERS_OF_PKG = {"core": frozenset({"core", "errors"}), "top": frozenset({"core", "top"})}
ENTRY = frozenset({"__init__", "errors", "testing"})


def test_an_undeclared_subpackage_is_reported_with_where_to_declare_it(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {"core/a.py": "X = 1\n", "top/b.py": "", "extra/__init__.py": "", "extra/c.py": ""},
    )
    found = layer_findings(root, LAYERS_OF_PKG, ENTRY)
    assert _where(found) == [("pkg/extra/__init__.py", 1)]
    assert "'extra'" in found[0].message and DECLARE_AT in found[0].message


def test_a_top_level_module_that_is_not_an_entry_point_is_reported(tmp_path: Path) -> None:
    root = write_package(tmp_path, {"core/a.py": "", "helpers.py": "", "errors.py": ""})
    assert _where(layer_findings(root, LAYERS_OF_PKG, ENTRY)) == [("pkg/helpers.py", 1)]


def test_an_upward_import_is_reported_at_its_line(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/a.py": """
                from pkg.errors import Oops
                from pkg.core import b

                from pkg.top.c import C
            """,
            "core/b.py": "",
            "top/c.py": "from pkg.core.a import Oops\nC = 1\n",
            "errors.py": "class Oops(Exception): ...\n",
        },
    )
    found = layer_findings(root, LAYERS_OF_PKG, ENTRY)
    assert _where(found) == [("pkg/core/a.py", 4)]
    assert "pkg.top.c" in found[0].message


def test_a_layer_importing_an_entry_point_or_the_public_api_is_reported(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/a.py": "def f():\n    from pkg.testing import fake\n",
            "top/b.py": "from pkg import Thing\n",
            "testing.py": "",
        },
    )
    found = layer_findings(root, LAYERS_OF_PKG, ENTRY)
    assert _where(found) == [("pkg/core/a.py", 2), ("pkg/top/b.py", 1)]


# --------------------------------------------------------------------------------------------
# rule 2: no private module or name of another package


def test_a_private_module_of_another_package_is_reported(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "integrations/_store.py": "class Flow: ...\n",
            "integrations/history.py": "from pkg.integrations._store import Flow\n",
            "replay/run.py": "import json\n\nfrom pkg.integrations._store import Flow\n",
        },
    )
    found = private_findings(root)
    assert _where(found) == [("pkg/replay/run.py", 3)]
    assert "pkg.integrations._store" in found[0].message


def test_a_private_name_from_another_package_is_reported(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/tokens.py": "class _CountCache: ...\nclass Counter: ...\n",
            "core/plan.py": "class _Walk: ...\n",
            "core/fold.py": "from pkg.core.plan import _Walk\n",
            "counting/providers.py": """
                from pkg.core.tokens import (
                    Counter,
                    _CountCache,
                )
                from pkg.core.tokens import __doc__
            """,
        },
    )
    found = private_findings(root)
    assert _where(found) == [("pkg/counting/providers.py", 1)]
    assert "_CountCache" in found[0].message


def test_a_relative_import_of_a_private_module_is_resolved(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/_shared.py": "",
            "core/a.py": "from . import _shared\n",
            "top/b.py": "from ..core import _shared\n",
        },
    )
    assert _where(private_findings(root)) == [("pkg/top/b.py", 1)]


# --------------------------------------------------------------------------------------------
# rule 3: no import cycles


def test_a_cycle_through_a_function_level_import_is_reported(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "replay/engine.py": "import os\nfrom pkg.replay.plots import plot\n",
            "replay/plots.py": "def plot():\n    from pkg.replay.engine import run\n",
        },
    )
    found = cycle_findings(root)
    assert _where(found) == [("pkg/replay/engine.py", 2)]
    assert "pkg.replay.engine (line 2) -> pkg.replay.plots (line 2)" in found[0].message


def test_a_longer_cycle_is_reported_once(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "a.py": "from pkg import b\n",
            "b.py": "import os\n\nfrom . import c\n",
            "c.py": "import pkg.a\n",
        },
    )
    found = cycle_findings(root)
    assert _where(found) == [("pkg/a.py", 1)]
    assert found[0].message.endswith("pkg.a (line 1) -> pkg.b (line 3) -> pkg.c (line 1) -> pkg.a")


def test_imports_under_type_checking_do_not_make_a_cycle(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "engine.py": "from pkg.results import Replay\n",
            "results.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.engine import run
            """,
        },
    )
    assert cycle_findings(root) == []


def test_a_function_level_import_of_a_lazy_extra_does_not_make_a_cycle(tmp_path: Path) -> None:
    files = {
        "__init__.py": "def __getattr__(name):\n    from pkg.extra import Model\n",
        "extra.py": "from pkg import helpers\n",
        "helpers.py": "import pkg\n",
    }
    root = write_package(tmp_path, files)
    assert _where(cycle_findings(root, frozenset({"pkg.extra"}))) == []
    # the same import of a module that is not a lazy extra counts
    assert _where(cycle_findings(root, frozenset())) == [("pkg/__init__.py", 2)]


# --------------------------------------------------------------------------------------------
# rule 4: sizes


def _function(lines: int, name: str = "f") -> str:
    """A function of exactly ``lines`` lines."""
    return f"def {name}():\n" + "    x = 1\n" * (lines - 1)


def test_a_file_over_the_limit_is_reported_at_its_first_line_too_many(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {"big.py": "x = 1\n" * (MAX_FILE_LINES + 1), "fits.py": "x = 1\n" * MAX_FILE_LINES},
    )
    found = size_findings(root)
    assert _where(found) == [("pkg/big.py", MAX_FILE_LINES + 1)]


def test_a_function_over_the_limit_is_reported_at_its_def(tmp_path: Path) -> None:
    source = (
        "import os\n\n\n"
        + _function(MAX_FUNCTION_LINES, "fits")
        + "\n\nclass C:\n    @property\n"
        + textwrap.indent(_function(MAX_FUNCTION_LINES + 1, "method"), "    ")
    )
    root = write_package(tmp_path, {"mod.py": source})
    found = size_findings(root)
    def_line = source.splitlines().index("    def method():") + 1
    assert _where(found) == [("pkg/mod.py", def_line)]
    assert "method" in found[0].message


def test_a_long_comment_with_a_reason_lets_a_function_be_longer(tmp_path: Path) -> None:
    long_body = _function(MAX_FUNCTION_LINES + 1)
    root = write_package(
        tmp_path,
        {
            "above_def.py": "# long: one table of cases, read top to bottom\n" + long_body,
            "above_decorators.py": (
                "import functools\n\n"
                "# long: the docstring is the reference of every check\n"
                "# (the body is short)\n@functools.cache\n" + long_body
            ),
            "no_reason.py": "# long:\n" + long_body,
            "not_directly_above.py": "# long: a reason\n\n" + long_body,
        },
    )
    assert _where(size_findings(root)) == [
        ("pkg/no_reason.py", 2),
        ("pkg/not_directly_above.py", 3),
    ]


# --------------------------------------------------------------------------------------------
# rule 5: every name imported from the module that defines it


def test_a_name_imported_from_a_module_that_only_re_exports_it_is_reported(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/limits.py": "LIMIT = 1\n\n\ndef require_int(): ...\n",
            "core/plan.py": "from pkg.core.limits import LIMIT, require_int\n\n\nclass Plan: ...\n",
            "core/fold.py": "from .plan import Plan\nfrom .plan import require_int\n",
            "strategies/presets.py": """
                import os

                from pkg.core.limits import require_int
                from pkg.core.plan import (
                    Plan,
                    LIMIT,
                )


                def build():
                    from pkg.core.plan import require_int
            """,
        },
    )
    found = reexport_findings(root)
    assert _where(found) == [
        ("pkg/core/fold.py", 2),
        ("pkg/strategies/presets.py", 4),
        ("pkg/strategies/presets.py", 11),
    ]
    assert "LIMIT from pkg.core.plan" in found[1].message
    assert "pkg.core.limits" in found[1].message


def test_a_package_init_re_exporting_counts_and_the_public_faces_may_re_export(
    tmp_path: Path,
) -> None:
    root = write_package(
        tmp_path,
        {
            "__init__.py": "from pkg.core import Key\n",
            "compat.py": "from pkg.core import Key\nfrom pkg.core.plan import Key as K\n",
            "core/__init__.py": "from pkg.core.keys import Key\n",
            "core/keys.py": "class Key: ...\n",
            "core/plan.py": "from pkg.core.keys import Key\n",
            "top/a.py": "from pkg.core import Key\n",
        },
    )
    assert _where(reexport_findings(root)) == [("pkg/top/a.py", 1)]
    # compat is a public face only when named as one
    assert _where(reexport_findings(root, frozenset())) == [
        ("pkg/compat.py", 1),
        ("pkg/compat.py", 2),
        ("pkg/top/a.py", 1),
    ]


def test_a_name_defined_besides_its_import_is_not_a_re_export(tmp_path: Path) -> None:
    root = write_package(
        tmp_path,
        {
            "core/fast.py": "def speed(): ...\n",
            "core/plan.py": """
                try:
                    from pkg.core.fast import speed
                except ImportError:
                    def speed(): ...
                from pkg.core.fast import speed as _speed
                LIMIT = _speed
            """,
            "top/a.py": "from pkg.core.plan import LIMIT, speed\n",
        },
    )
    assert reexport_findings(root) == []
