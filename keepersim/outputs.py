"""Output paths: checked (and created) before the work, written atomically after it.

The rule, in one place: a command checks every output path it was given before it starts (so
a file in the path, a folder that cannot be created or written, or a name that is too long
fails at once, naming the flag, instead of after an hour's run), and writes each result file
through a temporary file in the same folder and :func:`os.replace` (a reader never sees half a
file; a crash leaves the previous file or none).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from keepersim.types.errors import KeepersimError

__all__ = [
    "OutputPathError",
    "check_output_file",
    "check_output_folder",
    "get_atomic_path",
    "is_special_file",
    "remove_stale_temporaries",
    "write_json_atomic",
    "write_text_atomic",
]

_TMP_PREFIX = ".keepersim-"


class OutputPathError(KeepersimError):
    """An output path that cannot be written; the message names the flag and the reason."""


def _get_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _fail(flag: str, path: str | os.PathLike[str], why: str) -> OutputPathError:
    return OutputPathError(f"{flag}: cannot write {os.fspath(path)!r}: {why}")


def _probe_folder(folder: Path, flag: str, shown: str | os.PathLike[str]) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".probe", dir=folder)
    except OSError as exc:
        raise _fail(flag, shown, f"the folder is not writable ({_reason(exc)})") from exc
    os.close(fd)
    os.unlink(probe)


def check_output_folder(path: str | os.PathLike[str], flag: str) -> Path:
    """Create the folder ``path`` (and its parents) and check that files can be written in it.

    Raises :class:`OutputPathError` naming ``flag``: a file in the way, a parent that is a file,
    a name too long, no permission.
    """
    folder = Path(path)
    try:
        if folder.exists() and not folder.is_dir():
            raise _fail(flag, path, "it is a file, expected a folder")
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # also a name too long (exists() raises it)
        raise _fail(flag, path, _reason(exc)) from exc
    _probe_folder(folder, flag, path)
    return folder


def check_output_file(path: str | os.PathLike[str], flag: str) -> Path:
    """Create the parent folders of the file ``path`` and check that it can be written.

    The file itself is not created (a failed run leaves nothing); an existing file is replaced
    by the run's result. Raises :class:`OutputPathError` naming ``flag``.
    """
    target = Path(path)
    parent = target.parent
    try:  # OSError: also a name too long (is_dir() and exists() raise it)
        if target.is_dir():
            raise _fail(flag, path, "it is a folder, expected a file name")
        if parent.exists() and not parent.is_dir():
            raise _fail(flag, path, f"{os.fspath(parent)!r} is a file, not a folder")
        parent.mkdir(parents=True, exist_ok=True)
        if is_special_file(target):  # a device or FIFO: written in place (get_atomic_path)
            if not os.access(target, os.W_OK):
                raise _fail(flag, path, "the file is not writable")
            return target
        if target.exists():
            if not os.access(target, os.W_OK):
                raise _fail(flag, path, "the file is not writable")
        else:  # the name itself: too long, not allowed by the file system...
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.unlink(target)
    except OSError as exc:
        raise _fail(flag, path, _reason(exc)) from exc
    _probe_folder(parent, flag, path)
    return target


def is_special_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device such as
    ``/dev/stdout`` or ``/dev/null``, a FIFO): written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def get_atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path next to ``path`` (same suffix) that becomes ``path`` when the block
    ends without an error (``os.replace``), or is removed when it raises. A special file
    (:func:`is_special_file`) is yielded itself: replacing a device would put a regular file
    in its place."""
    target = Path(path)
    if is_special_file(target):
        yield target
        return
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".tmp" + target.suffix, dir=target.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_get_umask())  # mkstemp makes 0600; a result is a normal file
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> int:
    """Remove the temporary files of :func:`get_atomic_path` that a killed process left in
    ``folder`` (a SIGKILL skips the cleanup); how many. Only for a folder no other writer uses
    at the time."""
    removed = 0
    for tmp in Path(folder).glob(_TMP_PREFIX + "*"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed


def write_text_atomic(
    path: str | os.PathLike[str], text: str, *, newline: str | None = None
) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same folder, then
    renamed over ``path`` (a crashed process leaves the old file or none, never half of one)."""
    try:
        with get_atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline=newline) as f:
            f.write(text)
    except OSError as exc:  # a full disk, a vanished folder: say which output
        raise OutputPathError(f"cannot write {os.fspath(path)!r}: {_reason(exc)}") from exc


def write_json_atomic(
    path: str | os.PathLike[str], data: Any, *, indent: int | None = 1, allow_nan: bool = False
) -> None:
    """``data`` as JSON plus a newline, written with :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=indent, allow_nan=allow_nan) + "\n")
