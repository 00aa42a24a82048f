"""Every notebook in ``notebooks/`` runs offline, top to bottom, and is committed stripped.

Each notebook is executed with nbclient in a fresh kernel of this interpreter (the venv's: the
``python3`` kernelspec's ``python`` is resolved to ``sys.executable`` by jupyter_client, and the
first cell run checks it), with every ``*_API_KEY`` removed from the kernel's environment so
that the offline path is the one tested, tiktoken pointed at the test session's seeded cache,
and matplotlib on the non-interactive Agg backend. A failing cell fails the test with nbclient's
message: the cell's source and the error.

New notebooks are picked up by the glob; ``EXPECTED`` lists the ones that must exist.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from subprocesses import run_python, without_api_keys

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
IDS = [str(path.relative_to(ROOT)) for path in NOTEBOOKS]

# All five notebooks of the series.
EXPECTED = [
    "01_quickstart_langgraph.ipynb",
    "02_compare_strategies.ipynb",
    "03_migrate_from_conversation_summary_buffer_memory.ipynb",
    "04_retrieval_memory.ipynb",
    "05_long_agent_turns.ipynb",
]

STRIP_COMMAND = "nbstripout notebooks/*.ipynb"
# Metadata a committed notebook may carry. `nbstripout` (default settings) removes outputs,
# execution counts, the notebook's `widgets` and `signature` and the cells' `collapsed`,
# `scrolled`, `execution` and `ExecuteTime`, renumbers cell ids, and keeps everything else:
# allowed here are the notebook's kernelspec and language_info, and the cell keys of the nbformat
# schema that it keeps. Other keys are editor noise (`vscode` ...) that nbstripout keeps by
# default: the failure message names the `--extra-keys` option that removes them.
NOTEBOOK_METADATA = frozenset({"kernelspec", "language_info"})
CELL_METADATA = frozenset({"tags", "jupyter", "editable", "deletable", "name", "format"})

# the first cell run in every kernel: it must be this interpreter's environment (the venv)
KERNEL_CHECK = f"""\
import sys
assert sys.prefix == {sys.prefix!r}, (
    f"the notebook kernel runs {{sys.executable}} (prefix {{sys.prefix}}), not the test "
    f"interpreter {sys.executable!r}: jupyter_client resolved another python3 kernel"
)
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def kernel_env() -> dict[str, str]:
    """The kernel's environment: no API keys (the offline path runs), tiktoken's cache seeded by
    tests/conftest.py, matplotlib's inline backend."""
    env = without_api_keys()
    env["TIKTOKEN_CACHE_DIR"] = os.environ.get("TIKTOKEN_CACHE_DIR") or str(
        ROOT / ".cache" / "tiktoken"
    )
    # ipykernel's inline backend: every figure is drawn to PNG, so a plot that fails only when
    # drawn fails the test
    env.pop("MPLBACKEND", None)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel's debugger warns about frozen modules
    return env


def test_expected_notebooks_exist() -> None:
    present = {path.name for path in NOTEBOOKS}
    missing = [name for name in EXPECTED if name not in present]
    assert not missing, f"missing from {NOTEBOOKS_DIR}: {missing}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_notebook_runs(notebook: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_CHECK))  # in memory only
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    try:
        client.execute(env=kernel_env())
    except CellExecutionError as error:
        # nbclient's message is the failing cell's source and the traceback; drop the colours
        pytest.fail(f"{notebook.name}: {ANSI.sub('', str(error))}", pytrace=False)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=IDS)
def test_notebooks_are_committed_without_outputs(notebook: Path) -> None:
    nb = nbformat.read(notebook, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            if cell.outputs:
                problems.append(f"cell {index}: {len(cell.outputs)} output(s)")
            if cell.execution_count is not None:
                problems.append(f"cell {index}: execution_count {cell.execution_count}")
        extra = sorted(set(cell.metadata) - CELL_METADATA)
        if extra:
            keys = " ".join(f"cell.metadata.{key}" for key in extra)
            problems.append(
                f"cell {index}: metadata {extra} (nbstripout --extra-keys '{keys}' removes it)"
            )
    extra = sorted(set(nb.metadata) - NOTEBOOK_METADATA)
    if extra:
        keys = " ".join(f"metadata.{key}" for key in extra)
        problems.append(f"notebook metadata {extra} (nbstripout --extra-keys '{keys}' removes it)")
    assert not problems, (
        f"{notebook.name} is not committed stripped; run `{STRIP_COMMAND}`:\n  "
        + "\n  ".join(problems)
    )
    # and nothing else that nbstripout would change: `--verify` exits non-zero then (`--dry-run`
    # only prints). Typically the random cell ids an editor writes, which nbstripout renumbers.
    done = run_python("-m", "nbstripout", "--verify", str(notebook), cwd=ROOT, timeout=60)
    if done.returncode != 0:
        pytest.fail(
            f"{notebook.name}: nbstripout would still change it (e.g. it renumbers cell ids "
            f"0, 1, 2 ...); run `{STRIP_COMMAND}`\n{done.stdout}{done.stderr}".rstrip(),
            pytrace=False,
        )
