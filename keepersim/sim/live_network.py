"""The ``mainnet`` run preset: a run as the live network at v0.2.14 handles it (issue 33, item 6).

``keepersim params --preset mainnet`` is the live chain's params. A run needs more than params
to follow the live network, because two of its choices are not chain params:

* the selection path: since epoch 251 mainnet's traffic goes through devshard escrows (252:
  99.5% of the recorded requests, ../shared/data/gonka-mainnet/README.md), so every request
  takes the devshard path unless the scenario has its own ``devshard`` key (its share, knobs);
* the health mechanism that runs there: the gateway's participant limiter, the
  ``devshard-limiter`` run policy (the chain's ``GetRandomExecutor`` has no health filter at
  ee730031), the default policy of such a run;

and one that is a keepersim switch over chain params: the chain's downtime SPRT runs
(``sprt_enabled``) with the live values, epoch 249's ``downtime_good_percentage`` 0.98,
``downtime_bad_percentage`` 0.99, ``downtime_h_threshold`` 100 (the preset's, from
:func:`keepersim.types.params.get_mainnet_params`), unless the scenario's ``params`` patch sets
them (``examples/sprt_1726`` sets issue #1726's 0.99 / 0.99).

The scenario keeps its fleet and shape (participants, epoch length, expiry, traffic): the preset
says how the network treats the traffic, not which traffic. ``simulate --preset mainnet`` and
``compare --preset mainnet`` apply it (docs/design/devshard.md, "The mainnet preset").
"""

from __future__ import annotations

import dataclasses
from typing import Final

from google.protobuf import json_format

from keepersim.sim.devshard_path import compute_path_scenario
from keepersim.sim.scenario import Scenario
from keepersim.sim.scenario_extras import compute_params_patch
from keepersim.types.params import get_mainnet_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import DEVSHARD_LIMITER

__all__ = [
    "LIVE_OVERRIDE",
    "LIVE_POLICY",
    "LIVE_WORDS",
    "RUN_PRESETS",
    "compute_live_params",
    "compute_live_scenario",
    "get_live_preset",
    "get_live_sprt_patch",
]

#: The run presets (``--preset``): ``default`` changes nothing.
RUN_PRESETS: Final = ("default", "mainnet")
#: The ``mainnet`` preset as a run's params override ({dotted path: value}): what
#: :func:`compute_live_params` sets.
LIVE_OVERRIDE: Final = {"extension_params.sprt_enabled": True}
#: The preset in words (compare's table heading).
LIVE_WORDS: Final = (
    "mainnet preset: devshard path unless a scenario has its own, the chain's downtime SPRT on "
    "at the live values"
)
#: The policy a ``mainnet`` run takes when none is given.
LIVE_POLICY: Final = DEVSHARD_LIMITER
_SPRT_FIELDS: Final = (
    "downtime_good_percentage",
    "downtime_bad_percentage",
    "downtime_h_threshold",
)


def get_live_preset(preset: str) -> bool:
    """Whether ``preset`` (one of :data:`RUN_PRESETS`) is the live network's; ValueError
    names the choices."""
    if preset not in RUN_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; one of {', '.join(RUN_PRESETS)}")
    return preset == "mainnet"


def get_live_sprt_patch() -> dict[str, object]:
    """The live chain's downtime SPRT values as a scenario ``params`` patch."""
    v = get_mainnet_params().params.validation_params
    return {
        "validation_params": {
            name: json_format.MessageToDict(getattr(v, name), preserving_proto_field_name=True)
            for name in _SPRT_FIELDS
        }
    }


def compute_live_scenario(scenario: Scenario) -> Scenario:
    """``scenario`` as the live network runs it: on the devshard path (its own ``devshard``
    key kept), with the live SPRT values under its own ``params`` patch."""
    out = scenario if scenario.devshard is not None else compute_path_scenario(scenario, "devshard")
    own = dict(scenario.params or {})
    patch = compute_params_patch({"params": get_live_sprt_patch()}, own)["params"]
    return dataclasses.replace(out, params=patch)


def compute_live_params(params: ModuleParams) -> ModuleParams:
    """A run's starting params (``build_params``) with the chain's downtime SPRT on."""
    out = ModuleParams()
    out.CopyFrom(params)
    for path, value in LIVE_OVERRIDE.items():
        setattr(out.extension_params, path.split(".")[1], value)
    return out
