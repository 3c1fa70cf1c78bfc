"""What every ``keepersim`` command shares: its options, its user errors and its JSON files.

Bad input (a missing or invalid scenario, an unknown policy, an invalid governance entry, a
missing extra...) is one line ``keepersim: error: ...`` on stderr naming the flag or file, exit
status 2, never a traceback: a handler raises :class:`UsageError` or one of
:func:`get_input_errors`, and argparse's own errors go through :class:`CommandParser`. JSON is
read with :func:`read_json` (errors name the file, line and column) and written atomically with
:func:`write_json` (``-``: stdout). Checked flag types live in :mod:`keepersim.cli.argtypes`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "EXTRAS",
    "PROGRESS_HELP",
    "CommandParser",
    "UsageError",
    "add_progress_option",
    "add_reputation_weighting_option",
    "add_resume_option",
    "check_output_args",
    "check_resume_option",
    "format_input_error",
    "format_value",
    "get_input_errors",
    "is_progress_on",
    "load_scenario_arg",
    "read_json",
    "require_extra",
    "write_json",
]

#: The help of every command's ``--progress/--no-progress`` (argparse: ``%%`` is a percent sign).
PROGRESS_HELP = (
    "progress on stderr: a bar on a terminal, else a line every 10%% (default: on; "
    "--no-progress: off)"
)

#: The optional extras of pyproject.toml a command needs: extra -> {module: distribution}.
EXTRAS: Mapping[str, Mapping[str, str]] = {
    "server": {
        "starlette": "starlette",
        "uvicorn": "uvicorn",
        "prometheus_client": "prometheus-client",
    },
    "export": {"httpx": "httpx"},
    "plots": {"matplotlib": "matplotlib"},
}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def get_input_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a handler raises for bad input (printed as one line, exit status 2)."""
    from keepersim.replay.common import ReplayError
    from keepersim.runs.sources import CompareError
    from keepersim.sim.scenario import ScenarioError
    from keepersim.trace.records import TraceError
    from keepersim.types.errors import KeepersimError

    return (
        UsageError,
        ScenarioError,
        CompareError,
        TraceError,
        ReplayError,
        KeepersimError,
        OSError,
    )


def format_input_error(exc: BaseException) -> str:
    """The one line an input error prints (after ``keepersim: error: ``): its message, or for an
    operating-system error its file and what went wrong in plain words (not ``[Errno 21] ...``).
    A multi-line message (a scenario's list of problems) keeps its lines."""
    if isinstance(exc, OSError):
        from keepersim.inputs import describe_os_error

        where = f"{exc.filename}: " if exc.filename is not None else ""
        return f"{where}{describe_os_error(exc)}"
    return str(exc).strip() or type(exc).__name__


class CommandParser(argparse.ArgumentParser):
    """argparse with the command's one-line error style: ``keepersim: error: argument --port:
    expected ...``, exit status 2 (subcommand parsers inherit the class)."""

    def error(self, message: str) -> Any:  # argparse's signature: NoReturn
        print(f"keepersim: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _is_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or sys.modules[module] = None
        return False


def require_extra(extra: str, what: str, hint: str = "") -> None:
    """Raise :class:`UsageError` unless the modules of the optional ``extra`` (:data:`EXTRAS`)
    are installed: ``{what} needs {modules}: pip install 'keepersim[{extra}]'{hint}``. Checked
    before the work, without importing them."""
    missing = [module for module in EXTRAS[extra] if not _is_installed(module)]
    if missing:
        raise UsageError(
            f"{what} needs {', '.join(missing)}: pip install 'keepersim[{extra}]'{hint}"
        )


def is_progress_on(args: argparse.Namespace) -> bool:
    """On unless ``--no-progress`` (keepersim.progress picks a bar or plain lines)."""
    return getattr(args, "progress", None) is not False


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=PROGRESS_HELP,
    )


def add_resume_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run in --store-dir from its last committed block (same inputs; "
        "an empty folder starts afresh); ends as an uninterrupted run would",
    )


def add_reputation_weighting_option(parser: Any) -> None:
    parser.add_argument(
        "--reputation-weighting",
        action="store_true",
        help="select executors by weight x reputation (the fork's PR #8) instead of by weight "
        "alone as upstream (the default)",
    )


def check_resume_option(args: argparse.Namespace) -> None:
    if args.resume and (args.store_dir is None or args.store != "leveldb"):
        raise UsageError("--resume needs --store-dir (and --store leveldb): the run to go on with")


def _is_there(path: Path) -> bool:
    """Whether ``path`` names something: any answer but "no such file" counts (a symlink loop,
    a dangling link, a file used as a folder), so that the reader names what is wrong."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def load_scenario_arg(value: str, seed: int | None) -> tuple[Any, int | None]:
    """A built-in name (built with ``seed``, default 1), a scenario file or one epoch folder of
    the chain's record (``epoch_N``, built as ``scenarios from-chain`` does). Returns the
    scenario and the run seed override (None: the scenario's own seed)."""
    from keepersim.sim.scenario import load_scenario
    from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios

    path = Path(value)
    if value in list_builtin_scenarios() and not _is_there(path):
        return get_builtin_scenario(value, 1 if seed is None else seed), seed
    if not _is_there(path):
        raise UsageError(
            f"{value!r} is neither a built-in scenario ({', '.join(list_builtin_scenarios())}) "
            "nor an existing file or epoch folder (see `keepersim scenarios list`)"
        )
    if path.is_dir():
        from keepersim.chaindata.fleet import load_epoch_scenarios

        scenarios = load_epoch_scenarios(path)
        if len(scenarios) != 1:
            raise UsageError(
                f"{value!r} holds {len(scenarios)} epochs; give one epoch_N folder "
                "(or use compare, which runs each)"
            )
        return scenarios[0], seed
    return load_scenario(path), seed


def read_json(path: str, what: str, limit: int | None = None) -> Any:
    """The JSON in the file ``path``, read within the input limits (:mod:`keepersim.inputs`:
    a regular file of at most ``limit`` bytes, default ``MAX_INPUT_BYTES``, nested at most
    ``MAX_JSON_DEPTH`` levels); the error names ``what``, the file and where."""
    from keepersim.inputs import read_json_input
    from keepersim.limits import MAX_INPUT_BYTES

    return read_json_input(path, what, limit=MAX_INPUT_BYTES if limit is None else limit)


def write_json(path: str | Path, data: Any, *, allow_nan: bool = False) -> None:
    """``data`` as JSON (indent 1) plus a newline: on stdout for ``-``, else atomically."""
    from keepersim.outputs import write_json_atomic

    if path == "-":
        sys.stdout.write(json.dumps(data, indent=1, allow_nan=allow_nan) + "\n")
    else:
        write_json_atomic(path, data, indent=1, allow_nan=allow_nan)


def check_output_args(
    args: argparse.Namespace, files: Sequence[str] = (), folders: Sequence[str] = ()
) -> None:
    """Check (and create) the output paths given by the flags ``files`` / ``folders`` (argparse
    dests) before any work; '-' (stdout) and unset flags are skipped."""
    from keepersim.outputs import check_output_file, check_output_folder

    for dest in files:
        value = getattr(args, dest, None)
        if value is not None and value != "-":
            check_output_file(value, "--" + dest.replace("_", "-"))
    for dest in folders:
        value = getattr(args, dest, None)
        if value is not None:
            check_output_folder(value, "--" + dest.replace("_", "-"))


def format_value(value: Any) -> str:
    """A table cell: floats to 6 significant digits, anything else as ``str``."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
