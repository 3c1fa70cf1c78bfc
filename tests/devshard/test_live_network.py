"""The ``mainnet`` run preset (issue 33 item 6, ``keepersim.sim.live_network``): the devshard
path, the gateway's limiter, the chain's downtime SPRT on at the live values (epoch 249's
0.98 / 0.99 / 100, gonka issue #1726 for the later 0.99 / 0.99)."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal as PyDecimal
from pathlib import Path
from typing import Any

import pytest

from keepersim import cli
from keepersim.chain import Chain
from keepersim.sim.devshard_spec import DevshardSpec
from keepersim.sim.live_network import (
    LIVE_POLICY,
    compute_live_params,
    compute_live_scenario,
)
from keepersim.sim.run_genesis import build_params
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario, format_scenario_json, load_scenario
from keepersim.sim.suite import get_builtin_scenario
from keepersim.types.messages import INACTIVE
from keepersim.types.params import get_decimal_value, get_mainnet_params
from keepersim.types.policies import DEVSHARD_LIMITER

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sprt_1726" / "sprt-1726.json"


def _sprt_values(params: Any) -> tuple[object, ...]:
    v = params.params.validation_params
    return tuple(
        get_decimal_value(getattr(v, name))
        for name in ("downtime_good_percentage", "downtime_bad_percentage", "downtime_h_threshold")
    )


def test_the_live_scenario_takes_the_devshard_path_and_the_live_sprt() -> None:
    plain = get_builtin_scenario("sparse")
    assert plain.devshard is None
    live = compute_live_scenario(plain)
    assert live.devshard == DevshardSpec(share=1.0)
    assert (live.participants, live.blocks, live.expiration_blocks) == (
        plain.participants,
        plain.blocks,
        plain.expiration_blocks,
    )
    params = compute_live_params(build_params(live, LIVE_POLICY))
    assert params.extension_params.sprt_enabled
    assert _sprt_values(params) == _sprt_values(get_mainnet_params())
    assert _sprt_values(params) == (PyDecimal("0.98"), PyDecimal("0.99"), PyDecimal(100))


def test_a_scenarios_own_devshard_key_and_sprt_values_are_kept() -> None:
    own = load_scenario(EXAMPLE)
    live = compute_live_scenario(own)
    assert live.devshard == own.devshard
    params = build_params(live, LIVE_POLICY)
    assert _sprt_values(params) == (PyDecimal("0.99"), PyDecimal("0.99"), PyDecimal(100))


def _deactivated(scenario: Scenario, policy: str, **kwargs: Any) -> set[str]:
    out: set[str] = set()

    def on_block(chain: Chain, height: int) -> None:
        with chain.read() as k:
            out.update(p.address for p in k.iterate_participants() if p.status == INACTIVE)

    run_scenario(scenario, policy, store="memory", on_block=on_block, **kwargs)
    return out


def _live(scenario: Scenario, policy: str) -> set[str]:
    live = compute_live_scenario(scenario)
    return _deactivated(live, policy, params=compute_live_params(build_params(live, policy)))


def test_the_preset_runs_the_sprt_at_the_live_values() -> None:
    """#1726's fleet without its 0.99 / 0.99 patch, 4,000 blocks. Under the preset the live
    0.98 / 0.99 / 100 SPRT deactivates the participant that misses everything when nothing else
    stops its traffic (``none``: about 12k misses, at block ~3,250); behind the gateway's
    limiter it gets ~940 requests (probe quarantine after each miss) and the SPRT never
    gathers enough evidence. Without the preset (SPRT off) and at #1726's values nobody is
    deactivated."""
    fleet = dataclasses.replace(load_scenario(EXAMPLE), params=None)
    assert _live(fleet, "none") == {"down"}
    assert _live(fleet, LIVE_POLICY) == set()
    assert _deactivated(fleet, "none") == set()
    assert _live(load_scenario(EXAMPLE), "none") == set()


def test_simulate_preset_mainnet_is_the_live_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = dataclasses.replace(get_builtin_scenario("sparse"), blocks=300)
    path = tmp_path / "s.json"
    path.write_text(format_scenario_json(scenario), encoding="utf-8")
    out = tmp_path / "out.json"
    argv = ["simulate", str(path), "--preset", "mainnet", "--store", "memory", "--no-progress"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["policy"] == DEVSHARD_LIMITER
    assert record["devshard_requests"] == record["requests"] > 0
    live = compute_live_scenario(scenario)
    expected = run_scenario(
        live,
        LIVE_POLICY,
        store="memory",
        params=compute_live_params(build_params(live, LIVE_POLICY)),
    )
    assert record["app_hash"] == expected.app_hash
    plain = run_scenario(scenario, "gonka", store="memory")
    assert record["app_hash"] != plain.app_hash
    # another policy under the preset: the path and the SPRT stay
    assert cli.main([*argv, "--policy", "windowed", "--out", str(out)]) == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["policy"] == "windowed" and record["devshard_requests"] == record["requests"]
    capsys.readouterr()


def test_compare_preset_mainnet_runs_what_simulate_preset_mainnet_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """compare applies the same preset to every scenario and policy: each of its runs has the
    app hash of ``simulate --preset mainnet`` with that policy; without the preset it differs."""
    scenario = dataclasses.replace(get_builtin_scenario("sparse"), blocks=300)
    path = tmp_path / "s.json"
    path.write_text(format_scenario_json(scenario), encoding="utf-8")
    common = ["--seeds", "1", "--jobs", "1", "--store", "memory", "--no-plots", "--no-progress"]
    argv = ["compare", str(path), "--policies", LIVE_POLICY, *common]
    assert cli.main([*argv, "--preset", "mainnet", "--out", str(tmp_path / "live")]) == 0
    assert cli.main([*argv, "--out", str(tmp_path / "plain")]) == 0
    live = json.loads((tmp_path / "live" / "report.json").read_text(encoding="utf-8"))
    plain = json.loads((tmp_path / "plain" / "report.json").read_text(encoding="utf-8"))
    hashes = {r["policy"]: r["app_hash"] for r in live["runs"]}
    assert set(hashes) == {"none", LIVE_POLICY, "oracle"}
    for policy in ("none", LIVE_POLICY):
        out = tmp_path / f"{policy}.json"
        simulate = ["simulate", str(path), "--preset", "mainnet", "--policy", policy]
        assert cli.main([*simulate, "--store", "memory", "--no-progress", "--out", str(out)]) == 0
        assert hashes[policy] == json.loads(out.read_text(encoding="utf-8"))["app_hash"]
    assert hashes["none"] != {r["policy"]: r["app_hash"] for r in plain["runs"]}["none"]
    assert "mainnet preset" in json.dumps(live["config"])
    capsys.readouterr()
