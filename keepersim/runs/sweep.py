"""``keepersim sweep``: a spec's tasks on an engine, streamed to ``DIR/runs.csv``, then
``DIR/summary.csv``, plots and a table (docs/sweeps.md).

``DIR/sweep.json`` holds the spec and its fingerprint (the spec's JSON and every scenario it
names, files' contents included). ``resume`` skips the tasks with an ``ok`` row in runs.csv and
refuses a folder holding another spec's sweep; without it, a folder that holds a sweep is an
error (nothing is overwritten).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from keepersim.chain import StoreKind
from keepersim.outputs import check_output_folder, write_json_atomic, write_text_atomic
from keepersim.report.csv_rows import format_csv
from keepersim.report.sweep_summary import compute_sweep_summary, format_sweep_table
from keepersim.runs.engines import EngineName, TaskOutcome, run_tasks
from keepersim.runs.plan import PlannedTask, format_cell, plan_tasks
from keepersim.runs.results import RunsLog, read_runs
from keepersim.runs.spec import SpecError, SweepSpec, load_spec
from keepersim.store.checkpoint import compute_fingerprint

__all__ = ["SWEEP_VERSION", "SweepError", "SweepResult", "compute_spec_fingerprint", "run_sweep"]

SWEEP_VERSION = 1
META_FILE = "sweep.json"
RUNS_FILE = "runs.csv"
SUMMARY_FILE = "summary.csv"


class SweepError(SpecError):
    """A sweep that cannot start (output folder in use, another spec's sweep to resume)."""


@dataclass
class SweepResult:
    """What a sweep did: tasks planned, skipped (resumed), run, failed; its summary."""

    planned: int
    skipped: int
    executed: int
    failed: int
    summary: list[dict[str, Any]] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


def compute_spec_fingerprint(spec: SweepSpec, store: StoreKind) -> str:
    """Hex SHA-256 of what decides the sweep's rows."""
    return compute_fingerprint(
        {
            "version": SWEEP_VERSION,
            "spec": spec.data,
            "scenarios": [[s.label, s.source] for s in spec.scenarios],
            "store": store,
        }
    ).hex()


def _check_folder(folder: Path, fingerprint: str, resume: bool, shown: str) -> None:
    meta = folder / META_FILE
    holds = meta.exists() or (folder / RUNS_FILE).exists()
    if not resume:
        if holds:
            raise SweepError(
                f"--out: {shown} already holds a sweep ({RUNS_FILE}); --resume goes on with it, "
                "or choose another folder"
            )
        return
    if not meta.exists():
        if (folder / RUNS_FILE).exists():
            raise SweepError(f"--resume: {shown} has {RUNS_FILE} but no {META_FILE}")
        return
    try:
        recorded = json.loads(meta.read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError) as exc:
        raise SweepError(f"--resume: cannot read {meta}: {exc}") from exc
    if recorded != fingerprint:
        raise SweepError(
            f"--resume: {shown} holds the sweep of another spec (fingerprint {str(recorded)[:12]}"
            f", this spec's {fingerprint[:12]}); use the same spec or another --out"
        )


def _sort_summary(summary: list[dict[str, Any]], spec: SweepSpec) -> list[dict[str, Any]]:
    """Spec order: scenario, policy (baselines first and last), then each path's values (a
    baseline's shared empty cell first)."""
    scenarios = [s.label for s in spec.scenarios]
    cells = {p: [format_cell(v) for v in values] for p, values in spec.grid.items()}

    def key(row: dict[str, Any]) -> tuple[int, ...]:
        grid = [cells[p].index(row[p]) if row.get(p) in cells[p] else -1 for p in spec.grid_paths]
        return (scenarios.index(row["scenario"]), spec.policies.index(row["policy"]), *grid)

    return sorted(summary, key=key)


def run_sweep(
    spec_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    engine: EngineName = "process",
    jobs: int | None = None,
    address: str | None = None,
    resume: bool = False,
    store: StoreKind = "memory",
    progress: bool = True,
    plots: bool = True,
    stream: IO[str] | None = None,
) -> SweepResult:
    """Validate the spec, run the tasks not yet in runs.csv, write the summary, plots, table."""
    spec = load_spec(spec_path)
    folder = check_output_folder(out_dir, "--out")
    shown = os.fspath(out_dir)
    fingerprint = compute_spec_fingerprint(spec, store)
    _check_folder(folder, fingerprint, resume, shown)
    paths = spec.grid_paths
    planned = plan_tasks(spec, store)
    log = RunsLog(folder / RUNS_FILE, paths)
    if resume:
        log.open_resumed()
    write_json_atomic(
        folder / META_FILE,
        {"version": SWEEP_VERSION, "fingerprint": fingerprint, "spec": spec.data},
    )
    todo: list[PlannedTask] = [p for p in planned if p.key not in log.done]
    failed = 0

    def on_outcome(outcome: TaskOutcome) -> None:
        nonlocal failed
        failed += 0 if outcome.ok else 1
        log.write(todo[outcome.index], outcome)

    started = time.perf_counter()
    try:
        run_tasks(
            [p.task for p in todo],
            engine=engine,
            jobs=jobs,
            address=address,
            progress=progress,
            desc="sweep",
            on_outcome=on_outcome,
        )
    finally:
        log.close()
    wall = time.perf_counter() - started
    header, rows = read_runs(folder / RUNS_FILE)
    summary = _sort_summary(compute_sweep_summary(header, rows, paths), spec)
    write_text_atomic(folder / SUMMARY_FILE, format_csv(summary), newline="")
    table = format_sweep_table(summary, paths)
    write_text_atomic(folder / "table.txt", table + "\n")
    written: list[str] = []
    if plots:
        from keepersim.report.sweep_plots import write_sweep_plots

        labels = [s.label for s in spec.scenarios]
        made = write_sweep_plots(summary, folder, labels, list(spec.policies), paths)
        written = [p.name for p in made]
    out = sys.stdout if stream is None else stream
    out.write(table + "\n")
    return SweepResult(
        planned=len(planned),
        skipped=len(planned) - len(todo),
        executed=len(todo),
        failed=failed,
        summary=summary,
        plots=written,
        wall_seconds=wall,
    )
