"""Seed tiktoken's cache for offline use: ``python scripts/seed_tiktoken.py [CACHE_DIR]``.

The command lives in ``langmem_ext/counting/seeding.py`` (``langmem-ext seed-tiktoken`` once the
package is installed); this wrapper loads that file by path, so it works from a checkout without
installing the package. ``seed`` is re-exported for the tests and benchmarks of this repository.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_FILE = Path(__file__).resolve().parent.parent / "langmem_ext" / "counting" / "seeding.py"
_spec = importlib.util.spec_from_file_location("langmem_ext_tiktoken_seed", _FILE)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

seed = _module.seed
main = _module.main

if __name__ == "__main__":
    sys.exit(main())
