"""A SIGTERM whose exception is lost where it landed still stops the run at its next progress
update (keepersim.termination; the end-to-end SIGTERM test is in test_resume.py)."""

from __future__ import annotations

import contextlib
import io

import pytest

from keepersim.progress import make_progress
from keepersim.termination import Terminated, process_sigterm, reset_terminated


@pytest.mark.parametrize("enabled", [False, True])
def test_a_lost_sigterm_is_raised_at_the_next_progress_update(enabled: bool) -> None:
    bar = make_progress(10, desc="t", unit="blocks", enabled=enabled, stream=io.StringIO())
    bar.update(1)
    try:
        with contextlib.suppress(Terminated):  # lost, as in a Cython module's init
            process_sigterm(15, None)
        with pytest.raises(Terminated):
            bar.update(1)
    finally:
        reset_terminated()
    bar.update(1)  # handled: updates go on
