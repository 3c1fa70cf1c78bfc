"""Kill an export process from outside once it has done enough (the resume tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def run_export_until_killed(argv: list[str], is_far_enough: Callable[[], bool]) -> None:
    """``keepersim export ARGV`` in a process, killed with SIGKILL as soon as ``is_far_enough()``
    (errors reading a half-written file count as not yet); fails if it finished first."""
    cmd = [sys.executable, "-m", "keepersim.cli", "export", *argv, "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if is_far_enough():
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        assert proc.poll() is None, "the export finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
