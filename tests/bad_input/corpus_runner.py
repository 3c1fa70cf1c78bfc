"""The bad-input corpus runner: each case of ``cases/`` (one JSON file, format in
``cases/README.md``) becomes its input files in a fresh folder, runs ``keepersim`` on them and
must be refused as a user error.

Most cases run in a forked child of the test process (the imports are already paid for, so a
case costs milliseconds, not a Python start-up): its own stdout and stderr files, its own
working folder, an address-space limit as a guard, and its wall time and peak resident memory
measured by the parent (``os.wait4``'s rusage). Cases that need a real process (the console
entry point, a closed stdout pipe) set ``"process": true`` and run as ``python -m
keepersim.cli`` under the same limits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpus_helpers import get_scenario

from keepersim.trace.format import build_end_line, encode_line

CASES_DIR = Path(__file__).resolve().parent / "cases"
ROOT = Path(__file__).resolve().parents[2]

#: What every case must stay under.
MAX_SECONDS = 10.0
MAX_PEAK_BYTES = 2**30
#: ru_maxrss is in KiB on Linux, in bytes on macOS.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024
#: The address space a case may add before it is stopped (a guard: the peak is what is checked).
_AS_HEADROOM = 3 * 2**30

_CASE_KEYS = {
    "about",
    "argv",
    "files",
    "error",
    "lines",
    "process",
    "stdout",
    "listen",
    "absent",
    "present",
    "forbid_work",
}


#: (case, seconds, own peak bytes) of every case run: the summary line (conftest.py).
MEASURED: list[tuple[str, float, int]] = []


@dataclass(frozen=True)
class Case:
    """One case file of ``cases/``."""

    name: str
    argv: list[str]
    error: str | list[str]
    files: dict[str, Any] = field(default_factory=dict)
    lines: int | None = 1
    process: bool = False
    stdout: str = "capture"
    listen: bool = False
    absent: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    forbid_work: bool = False
    about: str = ""


def load_cases() -> list[Case]:
    """Every case of ``cases/``, in file name order (a malformed case file fails loudly)."""
    cases = []
    for path in sorted(CASES_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        unknown = set(data) - _CASE_KEYS
        assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
        cases.append(Case(name=path.stem, **data))
    return cases


def get_patterns(case: Case) -> list[str]:
    """The case's error regexes (each must match the error)."""
    return [case.error] if isinstance(case.error, str) else list(case.error)


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str
    seconds: float
    peak_bytes: int
    #: Run in a fork of the test process (its peak includes the pages it inherited).
    forked: bool = False


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _set_path(obj: Any, path: list[Any], value: Any) -> None:
    node = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _scenario_text(spec: dict[str, Any]) -> str:
    obj = get_scenario()
    for path, value in spec.get("set", []):
        _set_path(obj, path, value)
    for path in spec.get("drop", []):
        node = obj
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
    for key, count in spec.get("clone_participants", {}).items():
        base = obj["participants"][0]
        obj["participants"] = [dict(base, address=f"{key}{i}") for i in range(count)]
    text = json.dumps(obj, allow_nan=True)
    for old, new in spec.get("replace", []):
        assert old in text, (old, text)
        text = text.replace(old, new, 1)
    return text


def _line_index(lines: list[str], selector: Any) -> int:
    if selector == "first_record":
        return next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "inference")
    return int(selector)


def _trace_text(base: list[str], edits: list[dict[str, Any]], close: str) -> str:
    """The base trace's records with ``edits`` applied, then its closing record: ``fresh`` (the
    default: one that matches, so the case tests what its edits break, not the digest),
    ``stale`` (the recorded one, now over other lines) or ``none`` (a cut trace)."""
    lines = list(base)
    closing = lines.pop() if lines and json.loads(lines[-1])["type"] == "end" else None
    for edit in edits:
        op = edit["op"]
        if op == "empty":
            lines = []
            continue
        if op == "drop_lines":
            del lines[edit["from"] : edit["to"]]
            continue
        i = _line_index(lines, edit["line"])
        if op == "replace":
            lines[i] = edit["text"]
        elif op == "cut":
            lines[i] = lines[i][: len(lines[i]) // 2]
        elif op in ("set", "drop_field"):
            record = json.loads(lines[i])
            if op == "set":
                record[edit["field"]] = edit["value"]
            else:
                del record[edit["field"]]
            lines[i] = json.dumps(record)
        else:
            raise AssertionError(f"unknown trace edit {op!r}")
    text = "".join(line + "\n" for line in lines)
    if close == "none" or not lines:
        return text
    if close == "stale":
        assert closing is not None
        return text + closing + "\n"
    assert close == "fresh", close
    digest = hashlib.sha256(text.encode()).hexdigest()
    return text + encode_line(build_end_line(len(lines), digest)) + "\n"


def make_inputs(case: Case, folder: Path, trace_lines: Callable[[], list[str]]) -> None:
    """Create the case's files in ``folder`` (``{dir}`` in its strings)."""
    for name, spec in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if "json" in spec:
            text = json.dumps(spec["json"], allow_nan=True)
            path.write_text(text.replace("{dir}", str(folder)), encoding="utf-8")
        elif "text" in spec:
            path.write_text(spec["text"].replace("{dir}", str(folder)), encoding="utf-8")
        elif "base64" in spec:
            path.write_bytes(base64.b64decode(spec["base64"]))
        elif "repeat" in spec:
            with open(path, "w", encoding="utf-8") as f:
                for text, count in spec["repeat"]:
                    f.write(text * count)
        elif "scenario" in spec:
            path.write_text(_scenario_text(spec["scenario"]), encoding="utf-8")
        elif "trace" in spec:
            text = _trace_text(trace_lines(), spec["trace"], spec.get("close", "fresh"))
            path.write_text(text[: len(text) - spec.get("cut_bytes", 0)], encoding="utf-8")
        elif "sparse" in spec:
            with open(path, "wb") as f:
                f.truncate(spec["sparse"])
        elif spec.get("folder"):
            path.mkdir()
        elif spec.get("fifo"):
            os.mkfifo(path)
        elif "symlink" in spec:
            path.symlink_to(spec["symlink"])
        else:
            raise AssertionError(f"{case.name}: unknown file spec for {name}: {spec}")


def get_free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def format_argv(case: Case, folder: Path, port: int | None) -> list[str]:
    """The case's argv with ``{dir}``, ``{port}`` (in use) and ``{free_port}`` filled in."""
    names = {"dir": str(folder), "port": str(port)}
    if any("{free_port}" in a for a in case.argv):
        names["free_port"] = str(get_free_port())
    pattern = r"\{(dir|port|free_port)\}"
    return [re.sub(pattern, lambda m: names[m.group(1)], a) for a in case.argv]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def _get_vm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _forbid_work() -> None:
    """Any run, compare, replay or export fails the case: output checks must come first."""
    import keepersim.export.exporter
    import keepersim.replay.as_recorded
    import keepersim.runs.compare
    import keepersim.sim.run_loop

    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the work started before the inputs and outputs were checked")

    keepersim.sim.run_loop.run_scenario = no_work  # type: ignore[assignment]
    keepersim.runs.compare.compare = no_work  # type: ignore[assignment]
    keepersim.replay.as_recorded.replay_as_recorded = no_work  # type: ignore[assignment]
    keepersim.export.exporter.export_trace = no_work  # type: ignore[assignment]


def _wait(pid: int, deadline: float) -> tuple[int, int]:
    """(exit status, peak RSS in bytes) of child ``pid``; killed at ``deadline``."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return code, usage.ru_maxrss * _RSS_UNIT
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return -9, usage.ru_maxrss * _RSS_UNIT
        time.sleep(0.002)


def run_forked(argv: list[str], folder: Path, *, forbid_work: bool = False) -> Outcome:
    """``keepersim.cli.main(argv)`` in a forked child working in ``folder``."""
    out_path, err_path = folder / ".case-stdout", folder / ".case-stderr"
    limit = _get_vm_bytes() + _AS_HEADROOM
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 70
        try:
            os.chdir(folder)
            out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            if limit > _AS_HEADROOM:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            if forbid_work:
                _forbid_work()
            from keepersim import cli

            status = cli.main(argv)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status & 0xFF)
    code, peak = _wait(pid, started + MAX_SECONDS * 3)
    seconds = time.monotonic() - started
    return Outcome(
        code,
        out_path.read_text(encoding="utf-8", errors="replace"),
        err_path.read_text(encoding="utf-8", errors="replace"),
        seconds,
        peak,
        forked=True,
    )


#: The real process: the address-space guard, the command, then its own peak (VmHWM: after
#: exec the process's memory is its own) into the file named by KEEPERSIM_CASE_PEAK.
_ENTRY = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from keepersim.cli import main
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as f:
        peak = next((l.split()[1] for l in f if l.startswith("VmHWM:")), "0")
    with open(os.environ["KEEPERSIM_CASE_PEAK"], "w") as f:
        f.write(peak)
sys.exit(code)
"""


def run_process(argv: list[str], folder: Path, *, stdout: str = "capture") -> Outcome:
    """``keepersim.cli.main(argv)`` in a new Python process working in ``folder``;
    ``stdout="closed"``: a pipe whose reader is gone at once (``keepersim ... | head -0``)."""
    peak_path, err_path = folder / ".case-peak", folder / ".case-stderr"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        OPENBLAS_NUM_THREADS="1",
        KEEPERSIM_CASE_PEAK=str(peak_path),
    )
    read, write = os.pipe()
    if stdout != "closed":
        os.close(read)
        os.close(write)
        read, write = -1, os.open(os.devnull, os.O_WRONLY)
    started = time.monotonic()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, *argv], stdout=write, stderr=err, cwd=folder, env=env
        )
        os.close(write)
        if read >= 0:
            os.close(read)
        code, _ = _wait(proc.pid, started + MAX_SECONDS * 3)
        proc.returncode = code
    seconds = time.monotonic() - started
    try:
        peak = int(peak_path.read_text() or 0) * 1024
    except (OSError, ValueError):
        peak = 0
    return Outcome(code, "", err_path.read_text(encoding="utf-8", errors="replace"), seconds, peak)


def get_baseline_peak() -> int:
    """The peak RSS of a forked child that does nothing: what every forked case starts from
    (the parent's pages), so that a case's own peak is measured above it."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return _wait(pid, time.monotonic() + 10)[1]


def hold_port() -> Iterator[tuple[socket.socket, int]]:
    """A listening socket on a free port of 127.0.0.1 (a port in use)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock, sock.getsockname()[1]
    finally:
        sock.close()
