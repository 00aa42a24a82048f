"""Timing helpers: wall-clock per call, garbage collector paused while a call is timed."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Timing", "auto_reps", "gc_paused", "time_calls"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collect, then pause the cyclic garbage collector (as ``timeit`` does) for a timed block."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class Timing:
    """Seconds per repetition; ``median`` is what the tables show."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def reps(self) -> int:
        return len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {"median_s": self.median, "min_s": self.min, "reps": self.reps}


def auto_reps(estimate_s: float, budget_s: float, lo: int, hi: int) -> int:
    """How many repetitions fit in ``budget_s`` at ``estimate_s`` each, kept in [lo, hi]."""
    reps = int(budget_s / estimate_s) if estimate_s > 0 else hi
    return max(lo, min(hi, reps))


def time_calls(
    call: Callable[[Any], object],
    reps: int,
    setup: Callable[[], Any] = lambda: None,
) -> Timing:
    """Time ``call(setup())`` ``reps`` times; ``setup`` runs outside the timed region."""
    samples: list[float] = []
    with gc_paused():
        for _ in range(reps):
            arg = setup()
            start = time.perf_counter()
            call(arg)
            samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))
