"""gonka issue #1726: with downtime_good_percentage = downtime_bad_percentage (0.99, mainnet at
epoch 386) the downtime SPRT can never fire: both log ratios of the chain's NewSPRT
(x/inference/calculations/sprt.go at ee730031) are ln(1) = 0. The shipped example
(examples/sprt_1726/) has a participant that misses every request; at epoch 249's thresholds
(0.98 / 0.99 / 100) the same run deactivates it, so the test can fail."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from keepersim.chain import Chain
from keepersim.keeper.sprt import compute_sprt_constants
from keepersim.sim.governance import parse_governance
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, load_scenario
from keepersim.types.messages import INACTIVE
from keepersim.types.policies import DEVSHARD_LIMITER

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sprt_1726"


def _deactivated(scenario: Scenario, policy: str, **kwargs: Any) -> dict[str, int]:
    """Each participant SPRT set INACTIVE, with the first height it was."""
    out: dict[str, int] = {}

    def on_block(chain: Chain, height: int) -> None:
        with chain.read() as k:
            for p in k.iterate_participants():
                if p.status == INACTIVE:
                    out.setdefault(p.address, height)

    run_scenario(scenario, policy, store="memory", on_block=on_block, **kwargs)
    return out


def test_the_1726_params_make_both_log_ratios_zero() -> None:
    params = build_params(load_scenario(EXAMPLE / "sprt-1726.json"), "sprt")
    constants = compute_sprt_constants(params.params.validation_params)
    assert (constants.log_fail, constants.log_pass) == (0, 0)
    assert constants.threshold > 0


def test_sprt_never_fires_when_good_equals_bad() -> None:
    scenario = load_scenario(EXAMPLE / "sprt-1726.json")
    assert scenario.devshard is not None
    assert _deactivated(scenario, "sprt") == {}


def test_at_epoch_249s_thresholds_the_same_run_deactivates_the_down_participant() -> None:
    scenario = load_scenario(EXAMPLE / "sprt-1726.json")
    assert scenario.params is not None
    params = json.loads(json.dumps(scenario.params))
    params["validation_params"]["downtime_good_percentage"] = {"value": "98", "exponent": -2}
    assert set(_deactivated(dataclasses.replace(scenario, params=params), "sprt")) == {"down"}


def test_the_live_network_shape_limiter_and_sprt_on_never_fires() -> None:
    """The devshard path with the gateway limiter, SPRT turned on by the shipped governance
    file (as on mainnet, where it is enabled with these thresholds)."""
    scenario = dataclasses.replace(load_scenario(EXAMPLE / "sprt-1726.json"), blocks=1500)
    base = build_params(scenario, DEVSHARD_LIMITER)
    schedule = parse_governance(json.loads((EXAMPLE / "sprt-on.json").read_text()), base)
    assert schedule[0][1].extension_params.sprt_enabled
    assert _deactivated(scenario, DEVSHARD_LIMITER, governance=schedule) == {}
