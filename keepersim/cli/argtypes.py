"""Checked values of command-line flags: argparse ``type=`` callables with one-line errors.

argparse prefixes a :class:`argparse.ArgumentTypeError` with the flag (``argument --port:
expected an integer in [1, 65535], got '99999'``) and exits with status 2, so every flag that
takes a number, a port or a list of names says what it expected without a traceback. The rules
live here once; every command of :mod:`keepersim.cli` uses them.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "MAX_PORT",
    "get_float_type",
    "get_int_type",
    "parse_name_list",
    "parse_port",
    "parse_seed",
]

MAX_PORT = 65535


def _show(value: float) -> str:
    """A bound as written: integers exactly (2^63-1 is not 9.22337e+18), floats shortest."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range_text(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        left = "(" if lo_open else "["
        return f" in {left}{_show(lo)}, {_show(hi)}]"
    if lo is not None:
        return f" > {_show(lo)}" if lo_open else f" >= {_show(lo)}"
    if hi is not None:
        return f" <= {_show(hi)}"
    return ""


def get_int_type(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A flag type: a decimal integer in ``[lo, hi]`` (either end open when None)."""
    expected = "an integer" + _range_text(lo, hi)

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def get_float_type(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False
) -> Callable[[str], float]:
    """A flag type: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    expected = "a finite number" + _range_text(lo, hi, lo_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if (
            not math.isfinite(value)
            or (lo is not None and (value <= lo if lo_open else value < lo))
            or (hi is not None and value > hi)
        ):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def parse_port(text: str) -> int:
    """A flag type: a TCP port in [1, 65535]."""
    return get_int_type(1, MAX_PORT)(text)


def parse_seed(text: str) -> int:
    """A flag type: a run seed, an integer in [0, 2^63-1] (the scenario format's seed range)."""
    from keepersim.sim.scenario import MAX_SEED

    return get_int_type(0, MAX_SEED)(text)


def parse_name_list(text: str) -> list[str]:
    """A flag type: comma-separated names, none empty (``a,,b`` is an error, not ``a,b``)."""
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names with none empty, got {text!r}"
        )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(
            f"expected distinct names, got {text!r} ({', '.join(duplicates)} repeated)"
        )
    return names
