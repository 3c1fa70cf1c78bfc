"""The ``keepersim`` command.

Subcommands are a registry: each command is a module of this package with one
``add_<name>_command(subparsers)`` function that adds its parser and sets ``handler`` (a function
``(argparse.Namespace) -> int``) with ``set_defaults``. To add a command, write such a function
(import heavy modules inside the handler, so ``keepersim --help`` stays fast) and append it to
:data:`COMMANDS`, or decorate it with :func:`register_command`.

Errors from bad input print ``keepersim: error: ...`` on stderr, without a traceback, and exit
with status 2 (as argparse does for bad arguments): see :mod:`keepersim.cli.common`. Only this
package imports ``keepersim.cli``; the library never does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from keepersim.cli.common import (
    CommandParser,
    UsageError,
    format_input_error,
    get_input_errors,
)
from keepersim.cli.compare import add_compare_command
from keepersim.cli.export import add_export_command
from keepersim.cli.fidelity import add_fidelity_command
from keepersim.cli.params import add_params_command
from keepersim.cli.proposal import add_proposal_command
from keepersim.cli.replay import add_replay_command
from keepersim.cli.scenarios import add_scenarios_command
from keepersim.cli.serve import add_serve_command
from keepersim.cli.simulate import add_simulate_command
from keepersim.cli.sweep import add_sweep_command
from keepersim.outputs import track_outputs
from keepersim.termination import Terminated, process_sigterm, reset_terminated

__all__ = [
    "COMMANDS",
    "UsageError",
    "add_compare_command",
    "add_scenarios_command",
    "add_simulate_command",
    "build_parser",
    "main",
    "register_command",
]

CommandAdder = Callable[[Any], object]

#: Every subcommand, in help order. Append an ``add_<name>_command`` function to add one.
COMMANDS: list[CommandAdder] = [
    add_simulate_command,
    add_compare_command,
    add_sweep_command,
    add_proposal_command,
    add_scenarios_command,
    add_params_command,
    add_replay_command,
    add_serve_command,
    add_export_command,
    add_fidelity_command,
]


def register_command(adder: CommandAdder) -> CommandAdder:
    """Decorator: add a subcommand (``adder(subparsers)``) to the registry."""
    if adder not in COMMANDS:
        COMMANDS.append(adder)
    return adder


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="keepersim",
        description="Deterministic simulator of the Gonka chain's inference module.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for adder in COMMANDS:
        adder(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input, 130 interrupted,
    143 terminated by SIGTERM)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    reset_terminated()
    previous = signal.signal(signal.SIGTERM, process_sigterm)
    try:
        return _main(argv)
    except Terminated:  # arrived outside the handler's own try (e.g. while parsing)
        print("keepersim: terminated", file=sys.stderr)
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)
        reset_terminated()


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    import os

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing to flush into a closed pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with track_outputs():
            status = handler(args)
    except BrokenPipeError:  # `keepersim ... | head`: the reader is gone; end quietly
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a Unix tool ended by it
    except get_input_errors() as exc:
        print(f"keepersim: error: {format_input_error(exc)}", file=sys.stderr)
        return 2
    except Terminated:
        print("keepersim: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("keepersim: interrupted", file=sys.stderr)
        return 130
    return int(status)
