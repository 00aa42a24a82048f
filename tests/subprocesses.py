"""Running a fresh Python process from a test, the one way the suite does it.

Why a fresh process: the demo, the examples and the import-blocking checks must behave as a
user's new interpreter does (no fixtures, no monkeypatches, no modules already imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def without_api_keys() -> dict[str, str]:
    """This process's environment minus every ``*_API_KEY``: proves a run needs no key."""
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion with text output captured; never raises on a non-zero exit
    (the test asserts on ``returncode`` and shows ``stderr``)."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def run_python(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python <args>`` with this interpreter (the test venv's), as :func:`run_command`."""
    return run_command([sys.executable, *args], env=env, cwd=cwd, timeout=timeout)
