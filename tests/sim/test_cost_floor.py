"""scripts/cost_floor.py: its floor policy does what the docs say it measures (one entry per
participant with outcomes, each outcome pushed once), its variants turn off what they name,
the script prints every run, and a bad --blocks is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from file_modules import load_file_module

from keepersim.keeper.policies.windowed import WindowedBreaker
from keepersim.store.kv import prefix_end
from keepersim.types import keys

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cost_floor.py"

script = load_file_module(SCRIPT, "cost_floor_script")
bench = sys.modules["bench"]  # loaded by the script, from scripts/


def test_the_floor_pushes_each_outcome_once(tmp_path: Path) -> None:
    chain = script.open_chain(tmp_path / "floor", "floor")
    try:
        load = bench.SyntheticLoad(5)
        load.process_blocks(chain, 30)
        finished = load.req - load.req // load.miss_every - sum(map(len, load.pending.values()))
        prefix = keys.POLICY_STATE + script.FloorPolicy.prefix
        with chain.read() as keeper:
            entries = [
                WindowedBreaker.get_entry(raw, "")
                for _, raw in keeper.store.iterate(prefix, prefix_end(prefix))
            ]
    finally:
        chain.close()
    assert finished > 100  # 30 blocks of 5, one in 31 never finished, 2 blocks late
    assert sum(entry.outcome_seq for entry in entries) == finished  # no miss expired yet
    assert all(entry.failure_bits == 0 for entry in entries)
    assert len(entries) == len({entry.address for entry in entries}) > 1


def test_the_script_prints_every_run() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--blocks", "20", "--rules"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    runs = {"none", "floor", "windowed", *script.RULES_OFF}
    assert runs <= set(out)
    assert out["none"]["cpu_ratio_to_none"] == 1.0
    assert all(out[run]["cpu_per_inference"] > 0 for run in runs)


def test_a_rule_off_is_off(tmp_path: Path) -> None:
    """Each variant's chain runs windowed with exactly its rules' params changed: suspicion off
    is a zero prior, overdue off a first look at the chain's own expiration_blocks."""
    for name, rules in script.RULES_OFF.items():
        chain = script.open_chain(tmp_path / name, name)
        try:
            with chain.read() as keeper:
                ext = keeper.get_extension_params()
                expiration = keeper.get_params().validation_params.expiration_blocks
        finally:
            chain.close()
        assert ext.health_params.policy == "windowed"
        windowed = ext.health_params.windowed
        changes = {
            **({"suspicion_prior_pct": 0} if "suspicion" in rules else {}),
            **({"overdue_min_blocks": expiration} if "overdue" in rules else {}),
        }
        default = script.make_genesis(
            bench.MODULE_PARTICIPANTS, "windowed"
        ).keepersim.extension_params
        for field in type(windowed).DESCRIPTOR.fields_by_name:
            expected = changes.get(field, getattr(default.health_params.windowed, field))
            assert getattr(windowed, field) == expected, (name, field)


def test_too_few_blocks_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--blocks", "5"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "--blocks must be at least 20" in done.stderr
    assert "Traceback" not in done.stderr
