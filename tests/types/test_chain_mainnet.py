"""The mainnet preset against the live network's params (epochs 247-252), field by field: every
difference is an upgrade handler's write since the node's v0.2.12, listed with its reason
(docs/design/mainnet-preset.md); a new, unexplained difference fails."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mainnet_data import EPOCHS, load_live_params, require_shared

from keepersim.types.chain_defaults import get_chain_mainnet_params
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.chain_mainnet import LIVE_PARAMS_RESOURCE, get_live_mainnet_json
from keepersim.types.chain_params import validate_chain_params
from keepersim.types.chain_upgrades import UPGRADE_FIELD_SOURCES
from keepersim.types.params import get_mainnet_params, validate_params

_V13 = "app/upgrades/v0_2_13/upgrades.go"
_V14 = "app/upgrades/v0_2_14/upgrades.go"
#: Preset vs live: each difference and why (gonka ee730031).
EXPLAINED: dict[str, str] = {
    **{
        path: f"absent on the v0.2.12 node; {src or 'no handler: 0'}"
        for path, src in UPGRADE_FIELD_SOURCES.items()
    },
    "devshard_escrow_params.max_escrows_per_epoch": f"{_V13} setDevshardEscrowParams: 500000",
    "devshard_escrow_params.allowed_creator_addresses": (
        f"{_V13} and {_V14} setDevshardAllowedCreatorAddresses append 4 + 1"
    ),
    "devshard_escrow_params.approved_versions[0].binary": f"{_V13} setDevshardApprovedVersions",
    "devshard_escrow_params.approved_versions[0].sha256": f"{_V13} setDevshardApprovedVersions",
    "poc_params.models[1].weight_scale_factor": f"{_V13} updateModelParams: Kimi 0.78",
    "poc_params.models[2]": f"{_V13} updateModelParams: MiniMax added (upsertPoCModelConfig)",
}


def get_differences(preset: Any, live: Any, path: str = "") -> set[str]:
    """Paths where ``preset`` and ``live`` (gateway JSON) differ: a key live lacks is one
    difference; lists of objects compare element by element, other lists whole."""
    if isinstance(preset, dict) and isinstance(live, dict):
        out: set[str] = set()
        for key in preset.keys() | live.keys():
            sub = f"{path}.{key}" if path else key
            if key not in live or key not in preset:
                out.add(sub)
            else:
                out |= get_differences(preset[key], live[key], sub)
        return out
    if (
        isinstance(preset, list)
        and isinstance(live, list)
        and any(isinstance(x, dict) for x in preset + live)
    ):
        out = set()
        for i in range(max(len(preset), len(live))):
            sub = f"{path}[{i}]"
            if i >= len(preset) or i >= len(live):
                out.add(sub)
            else:
                out |= get_differences(preset[i], live[i], sub)
        return out
    if isinstance(preset, dict) != isinstance(live, dict) or preset != live:
        return {path}
    return set()


def collapse(paths: set[str]) -> set[str]:
    """A Decimal's value/exponent as the Decimal."""
    return {p.rsplit(".", 1)[0] if p.endswith((".value", ".exponent")) else p for p in paths}


@pytest.mark.parametrize("epoch", EPOCHS)
def test_preset_differs_from_the_live_params_only_where_explained(epoch: int) -> None:
    preset = compute_chain_json(get_chain_mainnet_params())
    differences = collapse(get_differences(preset, load_live_params(epoch)))
    assert differences == set(EXPLAINED)


def test_packaged_copy_is_the_live_answer() -> None:
    require_shared()
    _, name = LIVE_PARAMS_RESOURCE
    for epoch in EPOCHS:
        assert get_live_mainnet_json() == load_live_params(epoch), epoch
    assert name.endswith("epoch_252.json")


def test_preset_values_from_the_live_data_and_the_handlers() -> None:
    p = get_chain_mainnet_params()
    validate_chain_params(p)
    validate_params(get_mainnet_params())
    live = get_live_mainnet_json()
    # live: governance-decided values the genesis reconstruction could not know
    assert p.epoch_params.epoch_length == int(live["epoch_params"]["epoch_length"]) == 15391  # type: ignore[index]
    assert p.confirmation_poc_params.expected_confirmations_per_epoch == 4
    assert p.poc_params.models[1].penalty_start_epoch == 251
    # handlers: v0.2.13 and v0.2.14
    ds = p.devshard_escrow_params
    assert (ds.max_escrows_per_epoch, ds.max_nonce) == (500_000, 1_000_000)
    assert ds.allowed_creator_addresses[-1] == "gonka1t9akhsrqjkavh68c7cannlfdj58y25vsewfflt"
    assert len(set(ds.allowed_creator_addresses)) == len(ds.allowed_creator_addresses) == 18
    assert [m.model_id for m in p.poc_params.models][-1] == "MiniMaxAI/MiniMax-M2.7"
    assert p.poc_params.validation_vote_threshold_bps == 5000
    assert json.dumps(EXPLAINED)  # the reasons are text
