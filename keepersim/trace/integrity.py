"""A trace's integrity: its closing record, so that a cut trace is never taken for a whole one.

A version-3 trace (``docs/trace-format.md``) ends with ``{"type": "end", "lines": N, "sha256":
D}``: the number of lines before it (the header included) and the SHA-256 of their exact bytes.
Writers write it only when the whole trace is written (:meth:`TraceWriter.close
<keepersim.trace.writer.TraceWriter.close>`), so a run that was killed or failed, or a copy that
stopped short, leaves a trace without one.

:func:`check_trace_end` looks at the file before a single record is read (one streaming pass:
the digest of everything before the last line) and says where the records end:

* ``closed``: the closing record matches; the records end where it starts;
* ``cut``: no closing record (the last line is another record, or is cut short): refused,
  naming the last whole line and its height, unless ``allow_partial``; then the records end
  after the last whole line;
* a closing record whose count or digest does not match (the trace changed after it was
  written) is refused, ``allow_partial`` or not;
* ``legacy``: a version-2 trace, from before the closing record: read whole, with a one-line
  warning on stderr that a cut cannot be told;
* ``unchecked``: no readable header; the reader says what is wrong with line 1.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, Literal

from keepersim.limits import MAX_TRACE_LINE_BYTES
from keepersim.trace.format import (
    TRACE_VERSION,
    UNCLOSED_VERSION,
    build_end_line,
    decode_line,
    encode_line,
)
from keepersim.trace.records import TraceError
from keepersim.trace.validate import check_line

if TYPE_CHECKING:
    from hashlib import _Hash

__all__ = [
    "TraceEnd",
    "append_closing_record",
    "check_trace_end",
    "compute_trace_end",
    "get_line_height",
    "read_line_digest",
]

TraceState = Literal["closed", "cut", "legacy", "unchecked"]

_BLOCK: Final = 1 << 20
# Lines looked at, from the end back, for the height of the last whole one.
_MAX_LOOK_BACK: Final = 16
_warned: set[str] = set()


@dataclass(frozen=True, slots=True)
class TraceEnd:
    """Where a trace's records end (see the module docstring for the states)."""

    state: TraceState
    #: Bytes of the record lines (the closing record and a cut-short line excluded); None: read
    #: to the end of the file.
    records_end: int | None = None
    #: Whole record lines before ``records_end`` (closed and cut traces).
    lines: int = 0
    #: The height of the last whole record line (None: no line with a height).
    last_height: int | None = None
    #: The header's first height (closed and cut traces).
    first_height: int | None = None
    #: A cut trace's last line is cut short (no newline).
    cut_inside_line: bool = False


def get_line_height(data: Any) -> int | None:
    """The height that orders a record line (an inference's start height); None for the header
    and anything else."""
    if not isinstance(data, dict):
        return None
    value = data.get("start_block_height" if data.get("type") == "inference" else "height")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def read_line_digest(handle: IO[bytes], end: int) -> tuple[_Hash, int]:
    """The SHA-256 of bytes ``[0, end)`` of ``handle`` and their number of newlines (lines)."""
    digest = hashlib.sha256()
    lines = 0
    handle.seek(0)
    left = end
    while left > 0:
        block = handle.read(min(_BLOCK, left))
        if not block:
            break
        digest.update(block)
        lines += block.count(b"\n")
        left -= len(block)
    return digest, lines


class LineTooLongError(ValueError):
    """A trace line above :data:`~keepersim.limits.MAX_TRACE_LINE_BYTES`, ending at ``end``."""

    def __init__(self, end: int) -> None:
        super().__init__(end)
        self.end = end


def _iter_lines_backwards(handle: IO[bytes], end: int) -> Iterator[tuple[int, bytes]]:
    """(start offset, bytes) of the whole lines before ``end`` (which follows a newline), the
    last one first, each without its newline. A long line is read in blocks, joined once;
    one above the line limit raises :class:`LineTooLongError`."""
    pos = end - 1  # the newline of the last line; bytes before ``pos`` are still unread
    line_end = pos
    pieces: list[bytes] = []  # the current line's blocks read so far, the last first
    while pos > 0:
        if line_end - pos > MAX_TRACE_LINE_BYTES:
            raise LineTooLongError(line_end)
        start = max(0, pos - 65536)
        handle.seek(start)
        block = handle.read(pos - start)
        pos = start
        while (i := block.rfind(b"\n")) >= 0:
            pieces.append(block[i + 1 :])
            yield start + i + 1, b"".join(reversed(pieces))
            pieces = []
            line_end = start + i
            block = block[:i]
        pieces.append(block)
    if line_end > MAX_TRACE_LINE_BYTES:
        raise LineTooLongError(line_end)
    yield 0, b"".join(reversed(pieces))


def _find_last_height(handle: IO[bytes], end: int) -> int | None:
    for n, (_, raw) in enumerate(_iter_lines_backwards(handle, end)):
        if n >= _MAX_LOOK_BACK:
            break
        try:
            data = decode_line(raw)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "header":
            return None
        height = get_line_height(data)
        if height is not None:
            return height
    return None


def _describe_line(line: int, height: int | None) -> str:
    return f"line {line}" + ("" if height is None else f" (height {height})")


def _read_header(first: bytes) -> tuple[int, int] | None:
    """(version, first height) of a header line; None when it is not one (the reader says
    why)."""
    try:
        data = decode_line(first)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != "header":
        return None
    version, first_height = data.get("version"), data.get("first_height")
    if type(version) is not int or not (isinstance(first_height, str) and first_height.isdigit()):
        return None
    return version, int(first_height)


def compute_trace_end(path: str | os.PathLike[str]) -> TraceEnd:
    """Where the records of the trace at ``path`` end. Raises :class:`TraceError` when its
    closing record is malformed or does not match the lines before it."""
    name = os.fspath(path)
    try:
        return _compute_trace_end(name)
    except LineTooLongError as exc:
        with open(name, "rb") as handle:
            _, before = read_line_digest(handle, exc.end)
        raise TraceError(
            name,
            before + 1,
            "line",
            f"longer than the limit of {MAX_TRACE_LINE_BYTES:,} bytes for a trace line "
            "(keepersim/limits.py): not a trace, or a line without its end",
        ) from None


def _compute_trace_end(name: str) -> TraceEnd:
    with open(name, "rb") as handle:
        header = _read_header(handle.readline(MAX_TRACE_LINE_BYTES + 1))
        if header is None:
            return TraceEnd("unchecked")
        version, first_height = header
        if version == UNCLOSED_VERSION:
            return TraceEnd("legacy")
        if version != TRACE_VERSION:
            return TraceEnd("unchecked")
        size = handle.seek(0, os.SEEK_END)
        handle.seek(size - 1)
        if handle.read(1) != b"\n":
            # The last line is cut short: the records end after the last newline.
            records_end = 0
            for start, _ in _iter_lines_backwards(handle, size + 1):
                records_end = start
                break
            _, lines = read_line_digest(handle, records_end)
            return TraceEnd(
                "cut",
                records_end,
                lines,
                _find_last_height(handle, records_end) if records_end else None,
                first_height,
                cut_inside_line=True,
            )
        last_start, last_raw = next(_iter_lines_backwards(handle, size))
        digest, lines = read_line_digest(handle, last_start)
        try:
            data = decode_line(last_raw)
        except ValueError:
            data = None
        if not (isinstance(data, dict) and data.get("type") == "end"):
            return TraceEnd("cut", size, lines + 1, _find_last_height(handle, size), first_height)
        where = lines + 1
        problem = check_line("end", data)
        if problem is not None:
            raise TraceError(name, where, *problem)
        last_height = _find_last_height(handle, last_start)
        last = _describe_line(lines, last_height)
        if data["lines"] != lines:
            raise TraceError(
                name,
                where,
                "end.lines",
                f"the closing record counts {data['lines']} lines before it, the trace has "
                f"{lines}: lines were added or removed after it was written; its last record "
                f"is {last}",
            )
        if data["sha256"] != digest.hexdigest():
            raise TraceError(
                name,
                where,
                "end.sha256",
                f"lines 1-{lines} hash to {digest.hexdigest()[:16]}..., the closing record says "
                f"{data['sha256'][:16]}...: the trace was changed after it was written; its "
                f"last record is {last}",
            )
        return TraceEnd("closed", last_start, lines, last_height, first_height)


def _describe_cut(name: str, end: TraceEnd) -> TraceError:
    n = end.lines
    if n == 0:
        return TraceError(
            name,
            1,
            "end",
            "missing: the trace ends inside its first line, without its closing record: it "
            "was cut, or the run writing it did not finish",
        )
    short = f" (line {n + 1} is cut short)" if end.cut_inside_line else ""
    return TraceError(
        name,
        n,
        "end",
        f"missing: the trace ends after {_describe_line(n, end.last_height)} without its "
        f"closing record{short}: it was cut, "
        f"or the run writing it did not finish; --allow-partial replays lines 1-{n}",
    )


def check_trace_end(path: str | os.PathLike[str], *, allow_partial: bool = False) -> TraceEnd:
    """:func:`compute_trace_end`, refusing a cut trace unless ``allow_partial`` (and then one
    cut before its first block), and warning once per file about a version-2 trace."""
    name = os.fspath(path)
    end = compute_trace_end(name)
    if end.state == "legacy" and name not in _warned:
        _warned.add(name)
        print(
            f"keepersim: warning: {name}: trace format version {UNCLOSED_VERSION} has no "
            "closing record, so a cut trace cannot be told from a whole one; re-create it "
            "(`keepersim simulate ... --trace-out`, `keepersim export`) for the check",
            file=sys.stderr,
        )
    if end.state != "cut":
        return end
    if not allow_partial:
        raise _describe_cut(name, end)
    first = end.first_height
    if end.last_height is None or first is None or end.last_height < first:
        if end.lines == 0:
            raise _describe_cut(name, end)
        raise TraceError(
            name,
            end.lines,
            "end",
            f"missing: the trace ends after {_describe_line(end.lines, end.last_height)} "
            f"without its closing record, before its first block {first}: nothing to replay",
        )
    return end


def append_closing_record(path: str | os.PathLike[str]) -> None:
    """Close a trace written line by line (the whole of it): append its closing record."""
    with open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        digest, lines = read_line_digest(handle, size)
        if size == 0 or _last_byte(handle, size) != b"\n":
            raise ValueError(f"{os.fspath(path)}: empty, or the last line has no newline")
        handle.seek(size)
        handle.write((encode_line(build_end_line(lines, digest.hexdigest())) + "\n").encode())


def _last_byte(handle: IO[bytes], size: int) -> bytes:
    handle.seek(size - 1)
    return handle.read(1)
