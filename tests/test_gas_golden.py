"""Gas golden (tests/golden/gas-small.json): every policy on a small fleet (outages, capacity,
short epochs) spends exactly its recorded gas, by begin block, message kind and end-block step,
and the same on LevelDB as in memory. Gas is not state: the app hash beside it is recorded to
show the run is the same one. Re-record after an intended change of what the module reads or
writes (or of the scenario generator's numpy) with ``KEEPERSIM_RECORD_GAS_GOLDEN=1``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keepersim.sim.generate import generate_scenario
from keepersim.sim.run_loop import run_scenario
from keepersim.types.policies import RUN_POLICIES

GOLDEN = Path(__file__).resolve().parent / "golden" / "gas-small.json"
RECORD = os.environ.get("KEEPERSIM_RECORD_GAS_GOLDEN") == "1"
POLICIES = RUN_POLICIES


def _scenario() -> Any:
    return generate_scenario(
        "gas-small",
        11,
        participants=20,
        blocks=400,
        epoch_length=150,
        arrivals_per_block=3.0,
        degraded_share=0.2,
        outage_share=0.1,
        capacity=3,
        latency=(1, 6),
        expiration_blocks=30,
    )


def _gas(policy: str, store: str, tmp: Path) -> dict[str, Any]:
    result = run_scenario(
        _scenario(),
        policy,
        seed=3,
        store=store,
        store_dir=tmp / store if store == "leveldb" else None,
    ).to_dict()
    return {k: result[k] for k in ("app_hash", "inferences", "gas_total", "gas_by_step")}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    if RECORD:
        return {}
    data: dict[str, Any] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    if data["numpy_version"] != np.__version__:
        pytest.skip(f"recorded with numpy {data['numpy_version']}: the fleet may differ")
    return data


@pytest.mark.parametrize("policy", POLICIES)
def test_a_policy_spends_its_recorded_gas_on_either_store(
    policy: str, golden: dict[str, Any], tmp_path: Path
) -> None:
    in_memory = _gas(policy, "memory", tmp_path)
    assert _gas(policy, "leveldb", tmp_path) == in_memory
    assert in_memory["gas_total"] == sum(in_memory["gas_by_step"].values())
    if RECORD:
        data = (
            json.loads(GOLDEN.read_text(encoding="utf-8"))
            if GOLDEN.exists()
            else {"numpy_version": np.__version__, "runs": {}}
        )
        data["runs"][policy] = in_memory
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    assert in_memory == golden["runs"][policy]


def test_every_policy_is_recorded(golden: dict[str, Any]) -> None:
    if RECORD:
        pytest.skip("recording")
    assert set(golden["runs"]) == set(POLICIES)
