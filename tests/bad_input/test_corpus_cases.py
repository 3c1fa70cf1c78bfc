"""The bad-input corpus (``cases/``, one JSON file per case; format in ``cases/README.md``):
each case is refused with exit status 2 and one ``keepersim: error:`` line that matches the
case's regex, no traceback, in under 10 s and under 1 GB of peak memory (measured on the child
that ran it), leaving behind no output it created."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus_runner import (
    MAX_PEAK_BYTES,
    MAX_SECONDS,
    MEASURED,
    Case,
    Outcome,
    get_baseline_peak,
    get_patterns,
    hold_port,
    load_cases,
    make_inputs,
    run_forked,
    run_process,
)
from replay_helpers import record_trace

CASES = load_cases()


@pytest.fixture(scope="module")
def trace_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A real trace (40 blocks, 3 participants): the base the trace cases edit."""
    path, _ = record_trace(tmp_path_factory.mktemp("trace") / "t.jsonl", blocks=40, participants=3)
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def baseline_peak() -> int:
    return get_baseline_peak()


def test_the_corpus_is_large_and_named_in_order() -> None:
    names = [c.name for c in CASES]
    assert len(names) >= 200
    assert all(re.fullmatch(r"\d{3}-[a-z0-9-]+", n) for n in names), names
    numbers = [n[:3] for n in names]
    assert len(set(numbers)) == len(numbers), "two cases share a number"


def _run(case: Case, folder: Path, port: int | None) -> Outcome:
    from corpus_runner import format_argv

    argv = format_argv(case, folder, port)
    if case.process or threading.active_count() > 1:  # forking a threaded process may deadlock
        return run_process(argv, folder, stdout=case.stdout)
    return run_forked(argv, folder, forbid_work=case.forbid_work)


@contextlib.contextmanager
def _port(case: Case) -> Iterator[int | None]:
    if not case.listen:
        yield None
        return
    for _, port in hold_port():
        yield port


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case, tmp_path: Path, trace_lines: list[str], baseline_peak: int) -> None:
    make_inputs(case, tmp_path, lambda: trace_lines)
    with _port(case) as port:
        got = _run(case, tmp_path, port)
    err = got.stderr
    assert got.status == 2, (got.status, err)
    assert "Traceback" not in err, err
    error_lines = [line for line in err.splitlines() if line.startswith("keepersim: error:")]
    assert len(error_lines) == 1 and err.startswith("keepersim: error: "), err
    assert err.endswith("\n"), err
    if case.lines is not None:  # null: a trace error's line count is the trace reader's
        assert err.count("\n") == case.lines, err
    for pattern in get_patterns(case):
        assert re.search(pattern, err), (pattern, err)
    # A forked child's resident pages include the parent's it inherited: its own use is the
    # growth above a child that does nothing; a real process measures its own (VmHWM).
    own_peak = got.peak_bytes - (baseline_peak if got.forked else 0)
    MEASURED.append((case.name, got.seconds, own_peak))
    assert got.seconds < MAX_SECONDS, got.seconds
    assert own_peak < MAX_PEAK_BYTES, (own_peak, got.peak_bytes)
    for name in case.absent:
        assert not (tmp_path / name).exists(), f"{name} left behind"
    for name in case.present:
        assert (tmp_path / name).exists(), f"{name} removed"


def test_a_closed_stdout_pipe_ends_quietly(tmp_path: Path) -> None:
    """``keepersim scenarios list | head``: the reader is gone; no ``[Errno 32] Broken pipe``
    and no traceback, exit 141 (128 + SIGPIPE) as a shell reports a Unix tool ended by it."""
    got = run_process(["scenarios", "list"], tmp_path, stdout="closed")
    assert got.stderr == "" and got.status == 141, (got.status, got.stderr)
