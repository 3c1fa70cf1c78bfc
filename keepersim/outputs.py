"""Output paths: checked (and created) before the work, written atomically after it.

The rule, in one place: a command checks every output path it was given before it starts (so
a file in the path, a folder that cannot be created or written, or a name that is too long
fails at once, naming the flag, instead of after an hour's run), and writes each result file
through a temporary file in the same folder and :func:`os.replace` (a reader never sees half a
file; a crash leaves the previous file or none).

Nothing is left behind: within :func:`track_outputs` (``keepersim.cli.main`` wraps every
command in it) the folders the checks create are recorded, and removed again when the command
fails with an error; a folder that existed before is left as it was. An interrupted run
(Ctrl-C, SIGTERM) keeps them: ``--resume`` goes on from what it wrote. A run's temporary
folder (``keepersim-run-*`` in the temporary directory, :func:`make_run_folder`) holds its
owner's process id; a run killed with ``kill -9`` cannot remove its own, so every new one
first removes those whose owner is dead (:func:`remove_stale_run_folders`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from keepersim.types.errors import KeepersimError

__all__ = [
    "RUN_FOLDER_PREFIX",
    "OutputPathError",
    "check_output_file",
    "check_output_folder",
    "get_atomic_path",
    "is_process_alive",
    "is_special_file",
    "make_run_folder",
    "remove_stale_run_folders",
    "remove_stale_temporaries",
    "track_outputs",
    "write_json_atomic",
    "write_text_atomic",
]

_TMP_PREFIX = ".keepersim-"
#: A run's temporary folder (a LevelDB chain without ``--store-dir``), in the temporary directory.
RUN_FOLDER_PREFIX: Final = "keepersim-run-"
#: In a run folder: its owner's process id and start time (``pid start``).
_OWNER_FILE: Final = "owner.pid"
#: A run folder without an owner file (made by keepersim before it wrote one) is stale after this.
_OWNERLESS_STALE_SECONDS: Final = 24 * 3600

#: The folders created by the output checks of the command being run (None: not tracked).
_created: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar(
    "keepersim_created_outputs", default=None
)


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


@contextlib.contextmanager
def track_outputs() -> Iterator[None]:
    """Record the folders :func:`check_output_folder` and :func:`check_output_file` create in
    the block, and remove them when it raises an error (not an interruption: a resumable run
    goes on from them; nor a closed stdout pipe: the results are written). Folders that
    existed before are never touched."""
    created: list[Path] = []
    token = _created.set(created)
    try:
        yield
    except BrokenPipeError:  # the reader of stdout went away; what was written stays
        raise
    except Exception:
        for folder in reversed(created):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        _created.reset(token)


def _make_folders(folder: Path) -> None:
    """``folder.mkdir(parents=True, exist_ok=True)``, recording the topmost folder it creates."""
    top: Path | None = None
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        top = candidate
    folder.mkdir(parents=True, exist_ok=True)
    created = _created.get()
    if top is not None and created is not None:
        created.append(top)


def check_output_folder(path: str | os.PathLike[str], flag: str) -> Path:
    """Create the folder ``path`` (and its parents) and check that files can be written in it.

    Raises :class:`OutputPathError` naming ``flag``: a file in the way, a parent that is a file,
    a name too long, no permission.
    """
    folder = Path(path)
    try:
        if folder.exists() and not folder.is_dir():
            raise _fail(flag, path, "it is a file, expected a folder")
        _make_folders(folder)
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
        _make_folders(parent)
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


def _get_start_time(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``; empty
    elsewhere): with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def is_process_alive(pid: int, start_time: str = "") -> bool:
    """Whether process ``pid`` runs (and, given ``start_time``, is the one that started then).
    A process of another user counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    now = _get_start_time(pid)
    return not (start_time and now and now != start_time)


def _is_stale(folder: Path) -> bool:
    try:
        fields = (folder / _OWNER_FILE).read_text(encoding="ascii").split()
    except FileNotFoundError:
        try:
            age = time.time() - folder.stat().st_mtime
        except OSError:
            return False
        return age > _OWNERLESS_STALE_SECONDS
    except (OSError, UnicodeDecodeError):
        return False
    try:
        pid = int(fields[0])
    except (IndexError, ValueError):
        return False
    return not is_process_alive(pid, fields[1] if len(fields) > 1 else "")


def remove_stale_run_folders(parent: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the run folders (``keepersim-run-*``) in ``parent`` (default: the temporary
    directory) whose owner process is dead, e.g. killed with ``kill -9``; a live run's folder
    is never touched. Returns the folders removed."""
    base = Path(tempfile.gettempdir() if parent is None else parent)
    removed: list[Path] = []
    try:
        candidates = [p for p in base.glob(RUN_FOLDER_PREFIX + "*") if p.is_dir()]
    except OSError:
        return removed
    for folder in candidates:
        if folder.is_symlink() or not _is_stale(folder):
            continue
        try:
            if folder.stat().st_uid != os.getuid():
                continue  # another user's: theirs to remove
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


def make_run_folder(parent: str | os.PathLike[str] | None = None) -> Path:
    """A new run folder ``keepersim-run-*`` in ``parent`` (default: the temporary directory),
    holding this process's id (:func:`remove_stale_run_folders` runs first). The caller
    removes it when the run ends."""
    remove_stale_run_folders(parent)
    folder = Path(tempfile.mkdtemp(prefix=RUN_FOLDER_PREFIX, dir=parent))
    pid = os.getpid()
    (folder / _OWNER_FILE).write_text(f"{pid} {_get_start_time(pid)}\n", encoding="ascii")
    return folder
