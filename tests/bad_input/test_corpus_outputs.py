"""Output paths that cannot be written fail before the work, naming the flag; results are
written atomically."""

from __future__ import annotations

import json
import os
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

LONG = "n" * 300  # longer than any file system's NAME_MAX (255): ENAMETOOLONG


def _no_work(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the work started before the output paths were checked")


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any run, compare, replay or export fails the test: the check must come first."""
    import keepersim.export.exporter
    import keepersim.replay.as_recorded
    import keepersim.runs.compare
    import keepersim.sim.driver

    monkeypatch.setattr(keepersim.sim.driver, "run_scenario", _no_work)
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


EXPORT = ["export", "--node", "http://127.0.0.1:9", "--epochs", "1-2"]

# argv (placeholders: {scenario} {trace} {file} {folder} {tmp}) -> the flag named
CASES: list[tuple[list[str], str]] = [
    (["simulate", "{scenario}", "--out", "{file}/sub/result.json"], "--out"),
    (["simulate", "{scenario}", "--out", "{folder}"], "--out"),
    (["simulate", "{scenario}", "--out", "{tmp}/" + LONG], "--out"),
    (["simulate", "{scenario}", "--trace-out", "{file}/trace.jsonl"], "--trace-out"),
    (["simulate", "{scenario}", "--trace-out", "{tmp}/" + LONG + ".jsonl"], "--trace-out"),
    (["simulate", "{scenario}", "--store-dir", "{file}/chain"], "--store-dir"),
    (["simulate", "{scenario}", "--store-dir", "{file}"], "--store-dir"),
    (["simulate", "{scenario}", "--store-dir", "{tmp}/" + LONG], "--store-dir"),
    (["compare", "{scenario}", "--out", "{file}/report"], "--out"),
    (["compare", "{scenario}", "--out", "{file}"], "--out"),
    (["compare", "{scenario}", "--out", "{tmp}/" + LONG], "--out"),
    (["scenarios", "generate", "--out", "{file}/s.json"], "--out"),
    (["scenarios", "generate", "--out", "{tmp}/" + LONG], "--out"),
    (["scenarios", "generate", "--builtin", "sparse", "--out", "{folder}"], "--out"),
    (["replay", "{trace}", "--out", "{file}/out"], "--out"),
    (["replay", "{trace}", "--out", "{tmp}/" + LONG], "--out"),
    (["replay", "{trace}", "--store", "leveldb", "--store-dir", "{file}/s"], "--store-dir"),
    (["serve", "--scenario", "{scenario}", "--chain", "{file}/db"], "--chain"),
    (["serve", "--scenario", "{scenario}", "--chain", "{file}"], "--chain"),
    ([*EXPORT, "--out", "{file}/t.jsonl"], "--out"),
    ([*EXPORT, "--out", "{tmp}/" + LONG], "--out"),
    ([*EXPORT, "--out", "{tmp}/t.jsonl", "--result", "{file}/r.json"], "--result"),
]


@pytest.mark.usefixtures("no_work")
@pytest.mark.parametrize(
    ("argv", "flag"), CASES, ids=[f"{a[0]} {f} {a[-1][-12:]}" for a, f in CASES]
)
def test_unwritable_output_fails_before_the_work(
    argv: list[str], flag: str, paths: dict[str, Path]
) -> None:
    status, err = run_main([a.format(**paths) for a in argv])
    assert_refused(status, err, flag, "cannot write")


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
