"""The chain's params as shipped: upstream ``DefaultParams()`` and mainnet's params at gonka v0.2.14
(commit ee730031decedd2428aa56c65084ae5ab33d9192), and the model ids the upgrade handlers name.

- ``get_chain_default_params``: upstream ``DefaultParams()`` (params.go:167), loaded from
  ``keepersim/types/data/chain_default_params.json``. That file is the inner ``params`` object of
  ``{"params": DefaultParams()}`` as the REST gateway prints it (docs/design/chain-types-v0.2.14.md
  Appendix C), checked value by value against ``DefaultParams`` and every ``Default*Params`` in
  params.go at ee730031 (they agree). ``fee_params`` is null: ``DefaultParams`` leaves it nil.
- ``get_chain_mainnet_params``: the live mainnet params (epochs 247-252, a v0.2.12 node) with the
  v0.2.13 and v0.2.14 upgrade handlers applied (:mod:`keepersim.types.chain_mainnet`,
  docs/design/mainnet-preset.md). Until issue 31 it was reconstructed from genesis and the
  handlers v0.2.4-v0.2.14; the differences from the live params are explained there.
"""

from __future__ import annotations

import json
from importlib import resources

from google.protobuf import json_format

from keepersim.types.pb.inference.inference.params_pb2 import Params

__all__ = [
    "KIMI_MODEL_ID",
    "MINIMAX_MODEL_ID",
    "QWEN_MODEL_ID",
    "get_chain_default_params",
    "get_chain_mainnet_params",
]

QWEN_MODEL_ID = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"  # app/upgrades/v0_2_8, v0_2_13
KIMI_MODEL_ID = "moonshotai/Kimi-K2.6"  # app/upgrades/v0_2_12/upgrades.go:37
MINIMAX_MODEL_ID = "MiniMaxAI/MiniMax-M2.7"  # app/upgrades/v0_2_13/upgrades.go:101

_DEFAULT_PARAMS_RESOURCE = ("keepersim.types", "data/chain_default_params.json")


def get_chain_default_params() -> Params:
    """Upstream ``DefaultParams()``: inference-chain/x/inference/types/params.go, function
    ``DefaultParams`` (line 167), at gonka commit ee730031decedd2428aa56c65084ae5ab33d9192."""
    package, name = _DEFAULT_PARAMS_RESOURCE
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return json_format.ParseDict(json.loads(text), Params())


def get_chain_mainnet_params() -> Params:
    """Mainnet's Params at v0.2.14: the live params (a v0.2.12 node, epochs 247-252) after the
    v0.2.13 and v0.2.14 upgrade handlers (:mod:`keepersim.types.chain_mainnet`)."""
    from keepersim.types.chain_mainnet import get_mainnet_chain_params  # it imports this module

    return get_mainnet_chain_params()
