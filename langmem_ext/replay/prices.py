"""Model prices for the cost columns of a replay: input, cached input, cache writes and output.

The package ships list prices (``langmem_ext/_data/prices.json``, US dollars per million tokens);
:func:`load_prices` reads them and overlays a file of your own in the same shape. A model is
named ``provider:name``; a dated or suffixed name (``claude-3-5-haiku-20241022``,
``gpt-4o-mini-2024-07-18``) takes the price of the longest listed name it starts with.

Prompt caching is modelled the way the providers bill it. A request shorter than the
provider's ``min_cached_tokens`` (1,024 tokens; 2,048 for Anthropic's Haiku models) is not
cached at all: every input token at ``input``, no cache read, no cache write. From that size on,
the part of the request that repeats the prefix held in the cache is read at ``cached_input``
(when that prefix is itself at least ``min_cached_tokens`` long, counted down to a multiple of
``cache_step``) and the rest is written to the cache: at ``cache_write`` where the provider
charges a premium for writing (Anthropic, 1.25x input), at ``input`` where it does not (OpenAI's
automatic caching). The request is taken as cached up to its end (one breakpoint at the last
message). A cache entry lives ``cache_ttl`` seconds after it was last written or read (300 s:
Anthropic's default 5 minutes; OpenAI says 5 to 10 minutes of inactivity, so the lower end is
taken); :func:`~langmem_ext.replay.replay` applies it when the transcript has timestamps.

Example:
    >>> prices = load_prices()
    >>> price = prices.get("openai:gpt-4o-mini-2024-07-18")
    >>> price.model, price.input, price.cached_input
    ('openai:gpt-4o-mini', 0.15, 0.075)
    >>> round(price.cost(input_tokens=10_000, output_tokens=500), 6)
    0.0018
    >>> round(price.cost(input_tokens=10_000, output_tokens=500, cached_tokens=8_000), 6)
    0.001205
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from langmem_ext.errors import LangmemExtError
from langmem_ext.replay.transcripts.limits import (
    DEFAULT_MAX_BYTES,
    loads_bounded,
    read_text_bounded,
)

__all__ = ["ModelPrice", "PriceError", "Prices", "load_prices"]

_MILLION = 1_000_000


class PriceError(LangmemExtError, ValueError):
    """A prices file that cannot be read, or a model with no price."""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """The prices of one model, US dollars per million tokens, and its provider's cache rules."""

    model: str
    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    min_cached_tokens: int = 1024
    cache_step: int = 1
    #: seconds a cache entry lives after its last write or read (None: not known)
    cache_ttl: float | None = 300.0

    def cacheable(self, prefix_tokens: int) -> int:
        """How many of ``prefix_tokens`` repeated tokens the provider bills as cache reads."""
        if self.cached_input is None or prefix_tokens < self.min_cached_tokens:
            return 0
        return prefix_tokens - prefix_tokens % max(self.cache_step, 1)

    def cache_use(self, input_tokens: int, repeated_tokens: int) -> tuple[int, int]:
        """``(read, written)``: the input tokens of a request of ``input_tokens`` that the
        provider serves from its cache and those it writes to it, when ``repeated_tokens`` of
        its prefix are in the cache (0 when the cache is cold or expired). A request under
        ``min_cached_tokens`` neither reads nor writes: ``(0, 0)``."""
        if self.cached_input is None or input_tokens < self.min_cached_tokens:
            return 0, 0
        read = min(self.cacheable(repeated_tokens), input_tokens)
        return read, input_tokens - read

    def cost(
        self, *, input_tokens: int, output_tokens: int, cached_tokens: int | None = None
    ) -> float:
        """The dollars of one call. ``cached_tokens=None`` bills every input token at
        ``input`` (no prompt caching); otherwise ``cached_tokens`` of the prefix are in the
        cache and :meth:`cache_use` says what is read and written: reads at ``cached_input``,
        writes at ``cache_write`` where the provider charges one (else ``input``), and a
        request under the minimum at ``input`` throughout."""
        output = output_tokens * self.output
        if cached_tokens is None:
            return (input_tokens * self.input + output) / _MILLION
        read, written = self.cache_use(input_tokens, cached_tokens)
        plain = input_tokens - read - written
        read_price = self.cached_input if self.cached_input is not None else self.input
        write_price = self.cache_write if self.cache_write is not None else self.input
        return (read * read_price + written * write_price + plain * self.input + output) / _MILLION


@dataclass(frozen=True)
class Prices:
    """Prices by ``provider:model``; :meth:`get` resolves the names people write."""

    models: Mapping[str, ModelPrice]
    source: str = "built-in"

    def get(self, model: str) -> ModelPrice:
        """The price of ``model`` (``"openai:gpt-4o"``, ``"gpt-4o"``, a dated name); raises
        :class:`PriceError` listing the known models when there is none."""
        name = model.strip()
        if ":" not in name:  # a bare name: the provider whose list has it
            candidates = [key for key in self.models if key.split(":", 1)[1] == name]
            if not candidates:
                candidates = [key for key in self.models if name.startswith(key.split(":", 1)[1])]
        else:
            candidates = [key for key in self.models if name == key or name.startswith(key)]
        if not candidates:
            known = ", ".join(sorted(self.models))
            raise PriceError(
                f"no price for model {model!r} ({self.source}); known: {known}. "
                "Pass a prices file with --prices (see langmem_ext/_data/prices.json)"
            )
        return self.models[max(candidates, key=len)]


def _rule(name: str, entry: Mapping[str, Any], rules: Mapping[str, Any], source: str) -> Any:
    """A cache rule of a model: its own entry's, else its provider's (None: not given)."""
    value = entry.get(name, rules.get(name))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise PriceError(f"{source}: {name!r} must be a number >= 0, got {value!r}")
    return value


def _price(model: str, entry: Any, rules: Mapping[str, Any], source: str) -> ModelPrice:
    if not isinstance(entry, Mapping):
        raise PriceError(f"{source}: model {model!r}: expected an object, got {entry!r}")
    try:
        values = {
            name: float(entry[name]) if entry.get(name) is not None else None
            for name in ("input", "output", "cached_input", "cache_write")
        }
        base_input, base_output = values.pop("input"), values.pop("output")
    except KeyError as missing:
        raise PriceError(f"{source}: model {model!r} has no {missing} price") from None
    except (TypeError, ValueError) as exc:
        raise PriceError(f"{source}: model {model!r}: prices must be numbers ({exc})") from None
    if base_input is None or base_output is None:
        raise PriceError(f"{source}: model {model!r} needs 'input' and 'output' prices")
    if any(v is not None and v < 0 for v in (base_input, base_output, *values.values())):
        raise PriceError(f"{source}: model {model!r}: prices must be >= 0")
    minimum = _rule("min_cached_tokens", entry, rules, source)
    step = _rule("cache_step", entry, rules, source)
    ttl = _rule("cache_ttl", entry, rules, source)
    return ModelPrice(
        model=model,
        input=base_input,
        output=base_output,
        cached_input=values["cached_input"],
        cache_write=values["cache_write"],
        min_cached_tokens=1024 if minimum is None else int(minimum),
        cache_step=1 if step is None else int(step),
        cache_ttl=None if ttl is None else float(ttl),
    )


def _read(data: Any, source: str, base: Mapping[str, Any] | None = None) -> dict[str, ModelPrice]:
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), Mapping):
        raise PriceError(f"{source}: expected an object with 'models' (see the built-in file)")
    providers = dict(base or {})
    providers.update(data.get("providers") or {})
    prices = {}
    for model, entry in data["models"].items():
        if ":" not in model:
            raise PriceError(f"{source}: model {model!r} must be named provider:name")
        rules = providers.get(model.split(":", 1)[0], {})
        prices[model] = _price(model, entry, rules, source)
    return prices


def load_prices(
    path: str | os.PathLike[str] | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Prices:
    """The built-in prices, with the models of the JSON file at ``path`` (if given) added or
    replacing the built-in ones. The file is read as transcripts are (a regular file of at most
    ``max_bytes``, JSON nested at most ``MAX_JSON_DEPTH`` deep): anything else is a
    :class:`PriceError` naming the file."""
    builtin = json.loads(
        resources.files("langmem_ext").joinpath("_data/prices.json").read_text(encoding="utf-8")
    )
    models = _read(builtin, "built-in prices")
    if path is None:
        return Prices(models)
    source = os.fspath(path)
    text = read_text_bounded(source, max_bytes, lambda problem: PriceError(f"{source}: {problem}"))

    def fail(problem: str, line: int | None) -> PriceError:
        return PriceError(f"{source}{'' if line is None else f' line {line}'}: {problem}")

    try:
        data = loads_bounded(text, fail)
    except json.JSONDecodeError as exc:
        raise PriceError(f"{source} line {exc.lineno}: not valid JSON ({exc.msg})") from None
    models.update(_read(data, source, builtin.get("providers")))
    return Prices(models, source=f"built-in prices + {source}")
