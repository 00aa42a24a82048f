"""What :func:`~langmem_ext.replay.compare` shows while it runs: one status line on a terminal
naming the strategy being replayed (``[2/5] summary_buffer:8000``), its calls done, the time
spent and an estimate of the time left for the whole comparison. Nothing is written when the
stream is not a terminal (a pipe, a file, a test's captured output) unless asked.

The estimate takes the strategy being replayed at its own pace so far (a summarizing strategy
is slower than a trimming one) and the strategies still to come at the mean pace of every call
replayed so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["CompareProgress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``0:42``, ``12:05``, ``1:02:03``."""
    whole = max(int(seconds + 0.5), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


@dataclass
class CompareProgress:
    """The status line of one comparison of ``names`` over ``calls`` model calls each.

    ``enabled=None`` writes only when ``stream`` (default: stderr) is a terminal. Call
    :meth:`start` before each strategy, :meth:`update` after each of its calls and
    :meth:`close` at the end (the line is cleared).
    """

    names: Sequence[str]
    calls: int
    enabled: bool | None = None
    stream: TextIO | None = None
    clock: Callable[[], float] = time.monotonic
    #: seconds between two redraws
    every: float = 0.1
    _index: int = field(default=-1, init=False)
    _done: int = field(default=0, init=False)
    _done_all: int = field(default=0, init=False)
    _began: float = field(default=0.0, init=False)
    _strategy_began: float = field(default=0.0, init=False)
    _drawn: float | None = field(default=None, init=False)
    _width: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.out: TextIO = sys.stderr if self.stream is None else self.stream
        self.on = _is_terminal(self.out) if self.enabled is None else self.enabled
        self._began = self.clock()

    def start(self, index: int) -> None:
        """Strategy ``index`` (from 0) starts."""
        self._index = index
        self._done = 0
        self._strategy_began = self.clock()
        self._draw(force=True)

    def update(self) -> None:
        """One more call of the current strategy replayed."""
        self._done += 1
        self._done_all += 1
        self._draw(force=self._done == self.calls)

    def eta(self) -> float | None:
        """Seconds left for the whole comparison (None: nothing replayed yet to go by)."""
        now = self.clock()
        if self._done_all == 0:
            return None
        mean = (now - self._began) / self._done_all
        pace = (now - self._strategy_began) / self._done if self._done else mean
        later = len(self.names) - self._index - 1
        return (self.calls - self._done) * pace + later * self.calls * mean

    def line(self) -> str:
        """The status line as it is now."""
        n = len(self.names)
        name = self.names[self._index] if 0 <= self._index < n else ""
        eta = self.eta()
        left = "ETA --:--" if eta is None else f"ETA {format_duration(eta)}"
        spent = format_duration(self.clock() - self._began)
        return (
            f"[{self._index + 1}/{n}] {name}: call {self._done:,}/{self.calls:,}, "
            f"{spent} so far, {left}"
        )

    def _draw(self, *, force: bool = False) -> None:
        if not self.on:
            return
        now = self.clock()
        if not force and self._drawn is not None and now - self._drawn < self.every:
            return
        self._drawn = now
        text = self.line()
        self.out.write("\r" + text.ljust(self._width))
        self.out.flush()
        self._width = len(text)

    def close(self) -> None:
        """Clear the line (the table follows on a clean line)."""
        if self.on and self._width:
            self.out.write("\r" + " " * self._width + "\r")
            self.out.flush()
            self._width = 0
