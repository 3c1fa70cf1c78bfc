"""The ``mainnet`` preset's chain Params: the live network's own, then the upgrades since.

``data/mainnet_params_epoch_252.json`` is the body of a mainnet node's REST
``/productscience/inference/inference/params`` at epoch 252, copied unchanged from
shared/data/gonka-mainnet (epochs 247-252 answer byte-identical bodies; docs/design/mainnet-preset.md).
That node ran v0.2.12: its approved devshard binary is release v0.2.12's, MiniMax (added by
v0.2.13) is not among the PoC models, and the 13 fields v0.2.13 and v0.2.14 added are absent.

The preset is what that state becomes at v0.2.14: read with the fields absent as zero (as the new
binary decodes them), then the v0.2.13 and v0.2.14 upgrade handlers' writes to Params
(:func:`keepersim.types.chain_upgrades.process_upgrades`), assuming no governance vote since.
So the live data decides every value a vote can have changed (epoch length, confirmations per
epoch, the address lists...), and the handlers the values they wrote.
"""

from __future__ import annotations

import json
from importlib import resources

from keepersim.types.chain_params_json import parse_chain_params
from keepersim.types.chain_upgrades import process_upgrades
from keepersim.types.messages import Params

__all__ = ["LIVE_PARAMS_RESOURCE", "get_live_mainnet_json", "get_mainnet_chain_params"]

LIVE_PARAMS_RESOURCE = ("keepersim.types", "data/mainnet_params_epoch_252.json")


def get_live_mainnet_json() -> dict[str, object]:
    """The live node's Params JSON (the inner ``params`` of its answer), as it printed it."""
    package, name = LIVE_PARAMS_RESOURCE
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    data = json.loads(text)["params"]
    assert isinstance(data, dict)
    return data


def get_mainnet_chain_params() -> Params:
    """The live v0.2.12 params after the v0.2.13 and v0.2.14 upgrades (module docstring)."""
    params = parse_chain_params(get_live_mainnet_json(), where="mainnet preset", fill_absent=False)
    process_upgrades(params)
    return params
