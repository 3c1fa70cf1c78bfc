"""Input files: what a path is, checked before a byte is read; whole-JSON files read bounded.

The rule, in one place (the reading side of :mod:`keepersim.outputs`): a whole-JSON input
(scenario, governance schedule, proposal, sweep spec, genesis) is ``stat``-ed first; a folder,
FIFO, device or socket is refused by what it is (``/dev/zero`` or a pipe is never read), a file
above its size limit is refused before it is read, and its nesting depth is checked by a scan
of the bytes before the parser (which recurses per level) sees it. The limits are
:mod:`keepersim.limits`; an error names the file, what was expected and the limit, in one line,
without the operating system's raw wording (:func:`describe_os_error`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator
from typing import Any

from keepersim.limits import MAX_INPUT_BYTES, MAX_JSON_DEPTH
from keepersim.types.errors import KeepersimError

__all__ = [
    "InputError",
    "check_input_file",
    "check_stream_file",
    "compute_json_depth",
    "describe_os_error",
    "find_duplicate_keys",
    "format_json_path",
    "format_size",
    "get_json_type",
    "is_json_too_deep",
    "read_input_bytes",
    "parse_json_input",
    "read_json_input",
]


class InputError(KeepersimError):
    """An input file that cannot be used; the message names the file and what was expected."""


#: errno -> what it means for an input path, in the user's terms.
_OS_REASONS = {
    errno.ENOENT: "no such file",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "it is a folder, expected a file",
    errno.ELOOP: "a loop of symbolic links",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ENXIO: "no device behind it",
    errno.EIO: "an input/output error of the device",
}


def describe_os_error(exc: OSError) -> str:
    """What an :class:`OSError` means for a path, without Python's ``[Errno N]`` wording."""
    if exc.errno in _OS_REASONS:
        return _OS_REASONS[exc.errno]
    return (exc.strerror or type(exc).__name__).lower()


def format_size(size: int) -> str:
    """``64 MiB``, ``70.2 MiB``, ``512 bytes``."""
    if size < 2**20:
        return f"{size:,} bytes"
    mib = size / 2**20
    return f"{mib:.0f} MiB" if mib.is_integer() else f"{mib:.1f} MiB"


def get_json_type(value: object) -> str:
    """How an error names a JSON value's kind ("an integer", "a list", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _kind(mode: int) -> str | None:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None if stat.S_ISREG(mode) else "not a regular file"


def _stat_input(path: str | os.PathLike[str], what: str, *, fifo: bool) -> os.stat_result:
    """``stat`` of an input ``path``; :class:`InputError` naming ``what`` when it is missing or
    unreadable, or not a regular file (a FIFO passes when ``fifo``)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        shown = os.fspath(path)
        raise InputError(f"{shown}: cannot read the {what}: {describe_os_error(exc)}") from exc
    kind = _kind(st.st_mode)
    if kind is not None and not (fifo and stat.S_ISFIFO(st.st_mode)):
        raise InputError(
            f"{os.fspath(path)}: cannot read the {what}: it is {kind}, expected a file"
        )
    return st


def check_input_file(path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES) -> int:
    """The size of the regular file ``path``; :class:`InputError` naming ``what`` when it is
    missing, unreadable, not a regular file, or above ``limit`` bytes. Reads nothing."""
    shown = os.fspath(path)
    st = _stat_input(path, what, fifo=False)
    if st.st_size > limit:
        raise InputError(
            f"{shown}: the {what} is {format_size(st.st_size)}, above the limit of "
            f"{format_size(limit)} for an input file"
        )
    return st.st_size


def check_stream_file(path: str | os.PathLike[str], what: str) -> None:
    """A file read as a stream of lines (a trace): a regular file or a FIFO (``<(zcat ...)``);
    :class:`InputError` for a folder, a device (``/dev/zero``: no end and no newline) or a
    socket, from ``stat``, before it is opened. No size limit: it is never held whole."""
    _stat_input(path, what, fifo=True)


def read_input_bytes(
    path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of the regular file ``path`` (:func:`check_input_file` first); never more than
    ``limit`` (a file that grows, or a ``/proc`` file whose size says 0, is cut off and
    refused)."""
    shown = os.fspath(path)
    check_input_file(path, what, limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{shown}: cannot read the {what}: {describe_os_error(exc)}") from exc
    if len(data) > limit:
        raise InputError(
            f"{shown}: the {what} is above the limit of {format_size(limit)} for an input file"
        )
    return data


# A JSON string (escapes included), dropped before the brackets are counted.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 1 << 20


def compute_json_depth(data: bytes, stop: int | None = None) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data``, counted over its
    bytes without parsing (C speed: a regex drops the strings, numpy sums the brackets; 64 MiB
    of brackets in about a second). With ``stop``, counting ends once the depth passes it."""
    import numpy as np

    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = peak = 0
    for start in range(0, len(brackets), _CHUNK):
        chunk = np.frombuffer(brackets[start : start + _CHUNK], dtype=np.uint8)
        steps = np.where((chunk == ord("[")) | (chunk == ord("{")), 1, -1).astype(np.int32)
        levels = np.cumsum(steps, dtype=np.int64) + depth
        peak = max(peak, int(levels.max()))
        depth = int(levels[-1])
        if stop is not None and peak > stop:
            break
    return peak


def is_json_too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``data`` nests deeper than ``limit`` (:func:`compute_json_depth`; a text with no
    more than ``limit`` opening brackets is not counted)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    return compute_json_depth(data, stop=limit) > limit


class _JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers the keys which appeared more than once."""

    duplicates: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _JsonObject:
    obj = _JsonObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dups: list[str] = []
        for key, _ in pairs:
            if key in seen and key not in dups:
                dups.append(key)
            seen.add(key)
        obj.duplicates = tuple(dups)
    return obj


def find_duplicate_keys(
    value: object, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """``(path of the object, key)`` of every key that appeared twice in an object of a value
    read by :func:`read_json_input` (JSON itself allows it; the last would silently win)."""
    if isinstance(value, _JsonObject):
        for key in value.duplicates:
            yield path, key
    if isinstance(value, dict):
        for key, child in value.items():
            yield from find_duplicate_keys(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from find_duplicate_keys(child, (*path, i))


def format_json_path(path: Iterable[str | int]) -> str:
    """``participants[3].miss[1]``; ``top level`` for the value itself."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "top level"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _parse_finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range (expected a finite number)")
    return value


def read_json_input(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int = MAX_INPUT_BYTES,
    allow_nan: bool = False,
    allow_duplicates: bool = False,
) -> Any:
    """The JSON value in the file ``path`` (UTF-8, a BOM allowed), read within the size limit
    and checked for depth (:data:`~keepersim.limits.MAX_JSON_DEPTH`) before it is parsed.

    :class:`InputError` names the file and ``what``: not readable, not a file, too large, not
    UTF-8, too deep, not valid JSON (with line and column), a key twice in an object (unless
    ``allow_duplicates``: a caller that lists them itself, :func:`find_duplicate_keys`).
    ``NaN``, ``Infinity`` and numbers beyond a float (``1e400``) are refused unless
    ``allow_nan`` (a caller that names the field itself).
    """
    raw = read_input_bytes(path, what, limit)
    return parse_json_input(
        raw, os.fspath(path), what, allow_nan=allow_nan, allow_duplicates=allow_duplicates
    )


def parse_json_input(
    raw: bytes,
    shown: str,
    what: str,
    *,
    allow_nan: bool = False,
    allow_duplicates: bool = False,
) -> Any:
    """The JSON value of an input file's bytes ``raw`` (already read within its size limit:
    :func:`read_input_bytes`), with :func:`read_json_input`'s checks; ``shown`` names the
    file in errors. For a caller that needs the bytes too (a digest of the file)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{shown}: the {what} is not UTF-8 text (invalid byte at offset {exc.start})"
        ) from exc
    if is_json_too_deep(raw):
        raise InputError(
            f"{shown}: the {what} nests lists and objects more than {MAX_JSON_DEPTH} levels "
            f"deep, the limit for an input file"
        )
    try:
        if allow_nan:
            value = json.loads(text, object_pairs_hook=_object_pairs)
        else:
            value = json.loads(
                text,
                object_pairs_hook=_object_pairs,
                parse_constant=_refuse_constant,
                parse_float=_parse_finite_float,
            )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{shown}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except ValueError as exc:  # parse_constant
        raise InputError(f"{shown}: invalid JSON: {exc}") from exc
    except RecursionError as exc:  # pragma: no cover - the depth check comes first
        raise InputError(f"{shown}: the {what} nests too deep") from exc
    if not allow_duplicates:
        for where, key in find_duplicate_keys(value):
            raise InputError(
                f"{shown}: {format_json_path(where)}: duplicate key {key!r} (each key may "
                "appear once)"
            )
    return value
