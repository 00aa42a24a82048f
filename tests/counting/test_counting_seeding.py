"""``langmem-ext seed-tiktoken`` run by several processes at once into one empty cache, as
parallel test workers or an application's workers starting together do: every one succeeds and
the cache holds exactly the files tiktoken expects, byte for byte, and nothing else."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from langmem_ext.counting.seeding import ENCODINGS, cache_name, source_of

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 6
ROUNDS = 2


def test_processes_seeding_one_empty_cache_at_once_all_succeed(tmp_path: Path) -> None:
    expected = {cache_name(url): digest for url, digest in map(source_of, ENCODINGS)}
    script = str(ROOT / "scripts" / "seed_tiktoken.py")  # the seeder alone: a light import
    for round_ in range(ROUNDS):  # each round a fresh, empty cache
        cache = tmp_path / f"cache{round_}"
        workers = [
            subprocess.Popen(
                [sys.executable, script, str(cache)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(WORKERS)
        ]
        errors = [worker.communicate(timeout=120)[1] for worker in workers]
        assert [w.returncode for w in workers] == [0] * WORKERS, "\n".join(errors)
        assert sorted(p.name for p in cache.iterdir()) == sorted(expected)  # no temporary left
        for name, digest in expected.items():
            assert hashlib.sha256((cache / name).read_bytes()).hexdigest() == digest
