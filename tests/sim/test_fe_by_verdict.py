"""scripts/fe_by_verdict.py: its splits add up to the run's own metrics (looking at every
block), and bad arguments end in one line naming the argument."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from file_modules import load_file_module

from keepersim.sim.suite import get_builtin_scenario

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fe_by_verdict.py"


script = load_file_module(SCRIPT, "fe_by_verdict_script")


@pytest.mark.parametrize(
    ("policy", "split"),
    [("gonka", "false_exclusion_by_verdict"), ("windowed", "withheld_by_verdict")],
)
def test_the_splits_add_up_to_the_runs_metrics(policy: str, split: str) -> None:
    """gonka keeps healthy weight out on sparse (an open breaker); windowed draws it below its
    weight (suspicion): each split is non-empty and sums to the metric it explains."""
    report = script.compute_breakdown("sparse", policy, 1, {}, 1)
    one_block = 1 / get_builtin_scenario("sparse", 1).blocks  # the first is not looked at
    fe = report["false_exclusion_weight_share"]
    assert sum(report["false_exclusion_by_verdict"].values()) == pytest.approx(fe, abs=one_block)
    assert sum(report["false_exclusion_by_onset"].values()) == pytest.approx(fe, abs=one_block)
    reduced = sum(report["withheld_by_verdict"].values())
    assert fe + reduced == pytest.approx(report["withheld_weight_share"], abs=one_block)
    assert report[split], f"{policy} on sparse should have some {split}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "windowed"], "scenario: unknown 'nope'"),
        (["sparse", "nope"], "policy: unknown policy 'nope'"),
        (["sparse", "windowed", "--every", "0"], "--every: expected a positive integer"),
        (["sparse", "windowed", "--set", "window"], "--set: expected PATH=VALUE"),
        (["sparse", "windowed", "--set", "x=1"], "--set: ModuleParams has no field 'x'"),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith(message), done.stderr
    assert "Traceback" not in done.stderr
