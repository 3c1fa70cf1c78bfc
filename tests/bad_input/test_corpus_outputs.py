"""Outputs beyond the corpus cases (``cases/``): a read-only folder fails before the work,
missing folders are created, results are written atomically, a failed command removes the
folders it created, and a killed run's temporary folder is removed by the next run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from corpus_helpers import assert_refused, get_scenario, run_main, write_json
from replay_helpers import record_trace

from keepersim.outputs import (
    OutputPathError,
    check_output_file,
    check_output_folder,
    write_json_atomic,
    write_text_atomic,
)


def _no_work(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the work started before the output paths were checked")


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any run, compare, replay or export fails the test: the check must come first."""
    import keepersim.export.exporter
    import keepersim.replay.as_recorded
    import keepersim.runs.compare
    import keepersim.sim.run_loop

    monkeypatch.setattr(keepersim.sim.run_loop, "run_scenario", _no_work)
    monkeypatch.setattr(keepersim.runs.compare, "compare", _no_work)
    monkeypatch.setattr(keepersim.replay.as_recorded, "replay_as_recorded", _no_work)
    monkeypatch.setattr(keepersim.export.exporter, "export_trace", _no_work)


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    trace, _ = record_trace(tmp_path / "t.jsonl", blocks=40, participants=3)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    return {
        "scenario": write_json(tmp_path / "scenario.json", get_scenario()),
        "trace": trace,
        "file": blocker,
        "folder": folder,
        "tmp": tmp_path,
    }


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
@pytest.mark.usefixtures("no_work")
def test_read_only_folder_fails_before_the_work(paths: dict[str, Path]) -> None:
    folder = paths["folder"]
    folder.chmod(0o500)
    try:
        argv = ["simulate", str(paths["scenario"]), "--out", str(folder / "r.json")]
        assert_refused(*run_main(argv), "--out", "not writable")
    finally:
        folder.chmod(0o700)


def test_missing_output_folders_are_created_before_the_run(paths: dict[str, Path]) -> None:
    out = paths["tmp"] / "new" / "deeper" / "result.json"
    trace = paths["tmp"] / "traces" / "run.jsonl"
    status, err = run_main(
        [
            "simulate",
            str(paths["scenario"]),
            "--store",
            "memory",
            "--out",
            str(out),
            "--trace-out",
            str(trace),
        ]
    )
    assert status == 0, err
    assert json.loads(out.read_text())["blocks"] == get_scenario()["blocks"]
    assert json.loads(trace.read_text().splitlines()[0])["type"] == "header"
    assert not [p for p in out.parent.iterdir() if p.name != "result.json"]  # no temporaries


def test_check_output_file_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "x" / "out.json"
    assert check_output_file(target, "--out") == target
    assert target.parent.is_dir() and list(target.parent.iterdir()) == []
    with pytest.raises(OutputPathError, match="--out"):
        check_output_file(tmp_path / ("y" * 300), "--out")
    assert check_output_folder(tmp_path / "f" / "g", "--store-dir").is_dir()
    assert list((tmp_path / "f" / "g").iterdir()) == []


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"a": float("nan")})  # not JSON: nothing replaced
    assert json.loads(target.read_text()) == {"a": 1}
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_special_output_file_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    """A FIFO (like /dev/stdout or a device) given as an output is written to, and stays what
    it is: an atomic rename over it would put a regular file in its place."""
    import stat
    import threading

    from keepersim.outputs import check_output_file, is_special_file, write_text_atomic

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text("utf-8")), daemon=True)
    reader.start()
    assert is_special_file(fifo) and check_output_file(fifo, "--out") == fifo
    write_text_atomic(fifo, "result\n")
    reader.join(timeout=10)
    assert got == ["result\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left


def test_a_failed_command_removes_only_the_folders_it_created(tmp_path: Path) -> None:
    from keepersim.outputs import track_outputs

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("mine\n")
    with pytest.raises(ValueError), track_outputs():
        check_output_folder(kept / "report", "--out")  # inside a folder that was there
        check_output_file(tmp_path / "new" / "deeper" / "r.json", "--out")
        (kept / "report" / "partial.csv").write_text("x\n")
        raise ValueError("the command failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    assert sorted(p.name for p in kept.iterdir()) == ["mine.txt"]
    with track_outputs():  # a command that succeeds keeps its outputs
        check_output_folder(tmp_path / "done", "--out")
    assert (tmp_path / "done").is_dir()


def test_an_interrupted_command_keeps_its_folders(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM: --resume goes on from what the run wrote."""
    from keepersim.outputs import track_outputs

    with pytest.raises(KeyboardInterrupt), track_outputs():
        check_output_folder(tmp_path / "sweep", "--out")
        raise KeyboardInterrupt
    assert (tmp_path / "sweep").is_dir()


def _dead_pid() -> int:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_a_killed_runs_folder_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """``kill -9`` leaves a run's keepersim-run-* folder; the next run removes it when its
    owner is dead, and never a live run's (this process's), nor another prefix's."""
    from keepersim.outputs import (
        RUN_FOLDER_PREFIX,
        is_process_alive,
        make_run_folder,
        remove_stale_run_folders,
    )

    live = make_run_folder(tmp_path)  # this process's run
    dead = tmp_path / (RUN_FOLDER_PREFIX + "dead")
    (dead / "chain").mkdir(parents=True)
    (dead / "owner.pid").write_text(f"{_dead_pid()} 1\n")
    reused = tmp_path / (RUN_FOLDER_PREFIX + "reused")  # this pid, but another start time
    reused.mkdir()
    (reused / "owner.pid").write_text(f"{os.getpid()} 1\n")
    fresh = tmp_path / (RUN_FOLDER_PREFIX + "fresh")  # no owner file yet: left for a day
    fresh.mkdir()
    other = tmp_path / "keepersim-bench-x"
    other.mkdir()
    assert is_process_alive(os.getpid()) and not is_process_alive(_dead_pid())
    removed = remove_stale_run_folders(tmp_path)
    expected = {dead} | ({reused} if Path("/proc/self/stat").exists() else set())
    assert set(removed) == expected
    assert live.is_dir() and fresh.is_dir() and other.is_dir()
    old = time.time() - 2 * 24 * 3600
    os.utime(fresh, (old, old))
    assert remove_stale_run_folders(tmp_path) == [fresh]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_simulate_on_leveldb_removes_its_run_folder_and_a_dead_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from keepersim.outputs import RUN_FOLDER_PREFIX

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / (RUN_FOLDER_PREFIX + "killed")
    (dead / "chain").mkdir(parents=True)
    (dead / "owner.pid").write_text(f"{_dead_pid()}\n")
    scenario = write_json(tmp_path / "scenario.json", get_scenario())
    status, err = run_main(["simulate", str(scenario), "--store", "leveldb"])
    assert status == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["scenario.json"]
