"""scripts/hook_costs.py: it times the hooks the policy has, leaves the policy classes as it
found them, and rejects an unknown policy in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from file_modules import load_file_module

from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.policies.windowed import WindowedBreaker
from keepersim.store.committed import CommitStore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "hook_costs.py"

script = load_file_module(SCRIPT, "hook_costs_script")


def test_the_hooks_are_timed_and_restored() -> None:
    before = (WindowedBreaker.process_outcome, ChainPolicyStore.flush, CommitStore.commit)
    costs = script.compute_hook_costs("windowed", 40)
    assert (WindowedBreaker.process_outcome, ChainPolicyStore.flush, CommitStore.commit) == before
    for part in ("process_start", "process_outcome", "process_end_block", "flush", "commit"):
        assert 0 < costs[part] < costs["cpu_per_inference"] * 2, part
    # `none` defines no hooks of its own: only the chain's parts are timed.
    assert set(script.compute_hook_costs("none", 20)) == {"cpu_per_inference", "commit", "flush"}


def test_an_unknown_policy_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "nosuch", "--blocks", "5"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "unknown health policy 'nosuch'" in done.stderr
    assert "Traceback" not in done.stderr
