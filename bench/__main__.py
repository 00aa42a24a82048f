"""``python -m bench``: run the benchmark and write the results."""

from __future__ import annotations

from bench.run import main

raise SystemExit(main())
