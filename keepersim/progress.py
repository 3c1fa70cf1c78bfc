"""Progress of long runs on stderr: the one rule for compare, simulate, replay and export.

On a terminal a tqdm bar; on anything else (a pipe, a log file, CI) a plain line every
``step_pct`` percent of a known total, or every ``every`` units of an unknown one, e.g.
``compare: 12/48 runs (25%), 1m30s elapsed``, so a long run is never silent. Disabled
(``--no-progress``): nothing. The wall clock here is for display only, never state.
Every update also raises a SIGTERM whose first raise was lost (``keepersim.termination``).
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO, Any, Protocol

from keepersim.termination import check_terminated

__all__ = [
    "LineProgress",
    "NullProgress",
    "ProgressBar",
    "format_elapsed",
    "make_progress",
]

DEFAULT_STEP_PCT = 10
DEFAULT_EVERY = 1000


class ProgressBar(Protocol):
    """What the callers use of a tqdm bar (a tqdm bar is one)."""

    total: Any

    def update(self, n: float | None = 1) -> bool | None: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None: ...

    def refresh(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any: ...


def format_elapsed(seconds: float) -> str:
    """``42s``, ``1m30s``, ``2h05m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class _Base:
    total: Any

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def refresh(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> _Base:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class NullProgress(_Base):
    """Progress turned off: every call does nothing."""

    def __init__(self, total: float | None = None) -> None:
        self.total = total

    def update(self, n: float | None = 1) -> bool | None:
        check_terminated()
        return None


class LineProgress(_Base):
    """Plain progress lines for a non-terminal stream (see the module docstring)."""

    def __init__(
        self,
        total: float | None,
        *,
        desc: str,
        unit: str,
        stream: IO[str],
        step_pct: int = DEFAULT_STEP_PCT,
        every: int = DEFAULT_EVERY,
    ) -> None:
        if step_pct <= 0 or every <= 0:
            raise ValueError(f"step_pct and every must be > 0, got {step_pct}, {every}")
        self.total = total
        self.desc = desc
        self.unit = unit
        self.stream = stream
        self.step_pct = step_pct
        self.every = every
        self.n = 0.0
        self._started = time.monotonic()
        self._next_pct = step_pct
        self._next_count = float(every)
        self._last_printed: float | None = None
        self._closed = False

    def update(self, n: float | None = 1) -> bool | None:
        check_terminated()
        self.n += 1 if n is None else n
        total = self.total
        if total:
            pct = 100 * self.n / total
            if pct >= self._next_pct:
                while self._next_pct <= pct:
                    self._next_pct += self.step_pct
                self._print()
        elif self.n >= self._next_count:
            while self._next_count <= self.n:
                self._next_count += self.every
            self._print()
        return None

    def format_line(self) -> str:
        n = int(self.n)
        elapsed = format_elapsed(time.monotonic() - self._started)
        if self.total and self.n <= self.total:  # past an estimated total: the count alone
            pct = int(100 * self.n / self.total)
            return f"{self.desc}: {n}/{int(self.total)} {self.unit} ({pct}%), {elapsed} elapsed"
        return f"{self.desc}: {n} {self.unit}, {elapsed} elapsed"

    def _print(self) -> None:
        self._last_printed = self.n
        self.stream.write(self.format_line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        """A last line with the final count, unless it is the line just printed."""
        if self._closed:
            return
        self._closed = True
        if self.n > 0 and self._last_printed != self.n:
            self._print()


def make_progress(
    total: float | None,
    *,
    desc: str,
    unit: str,
    enabled: bool,
    stream: IO[str] | None = None,
    **bar_options: Any,
) -> ProgressBar:
    """The progress display of a run of ``total`` units (None: unknown).

    ``enabled`` False: nothing. Otherwise a tqdm bar when ``stream`` (default stderr) is a
    terminal, else :class:`LineProgress`. ``unit`` is plural (``runs``, ``blocks``): the lines
    print it as is and the bar is given it without the final ``s``. ``bar_options`` go to tqdm.
    """
    if not enabled:
        return NullProgress(total)
    out = sys.stderr if stream is None else stream
    is_tty = getattr(out, "isatty", None)
    if is_tty is not None and is_tty():
        from tqdm import tqdm

        class _Bar(tqdm):  # type: ignore[misc]  # tqdm is untyped
            def update(self, n: float | None = 1) -> bool | None:
                check_terminated()
                return bool(super().update(n))

        singular = unit[:-1] if unit.endswith("s") else unit
        bar: ProgressBar = _Bar(total=total, desc=desc, unit=singular, file=out, **bar_options)
        return bar
    return LineProgress(total, desc=desc, unit=unit, stream=out)
