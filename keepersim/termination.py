"""SIGTERM for the command line: it unwinds like Ctrl-C (temporary stores removed) and exits 143.

Python runs a signal handler wherever the main thread is. When that is inside code that drops
exceptions (a Cython module's init during an import, a weakref callback), the
:class:`Terminated` the handler raises is lost and the run would go on. The handler therefore
also records the request, and every long run's progress display (``keepersim.progress``, which
each long loop updates, shown or not) raises it again at its next update.
"""

from __future__ import annotations

__all__ = ["Terminated", "check_terminated", "process_sigterm", "reset_terminated"]

_requested = False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that it unwinds exactly like Ctrl-C does;
    ``keepersim.cli.main`` exits 143 for it."""


def process_sigterm(signum: int, frame: object) -> None:
    """The SIGTERM handler: record the request and unwind."""
    global _requested
    _requested = True
    raise Terminated()


def check_terminated() -> None:
    """Raise :class:`Terminated` if a SIGTERM arrived (its first raise may have been lost)."""
    if _requested:
        raise Terminated()


def reset_terminated() -> None:
    """Forget a handled request (the command line is done with it)."""
    global _requested
    _requested = False
