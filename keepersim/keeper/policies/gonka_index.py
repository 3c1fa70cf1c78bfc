"""gonka's speed-ups beside its rules (gonka.py), each with its plain form (upstream's), proven
equal by tests/policies/test_acceleration.py.

* Pass 2 of UpdateCBStateForBlock looks at the participants written in this block instead of
  every participant: one not written keeps the stats it was last judged on.
* Each verdict the end block computes is handed to the chain, so its table need not ask.
* The breaker's settings are derived once per params object (the chain replaces its params on
  a change and never edits them), not in every end block.
"""

from __future__ import annotations

from collections.abc import Callable

# The module, not its names: the policies package imports this while the acceleration layer
# may still be importing the policies' base.
from keepersim.keeper.acceleration import policy_store as acceleration
from keepersim.keeper.policies.base import Health, ParamsView, PolicyStore
from keepersim.types import params as chain_params
from keepersim.types.params import CbSettings
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ExtensionParams

_settings: ParamsView[CbSettings] = ParamsView(chain_params.get_cb_settings)


def get_cb_settings(params: ExtensionParams) -> CbSettings:
    """types.params.get_cb_settings of ``params``, derived again only for another object
    (plain form: derived at every call)."""
    return _settings.get(params)


def hand_verdict(ctx: PolicyStore, address: str, health: Health) -> None:
    """The verdict get_cb_health will give at this height, handed to the chain."""
    acceleration.hand_verdict(ctx, address, health)


def get_rate_rule_candidates(ctx: PolicyStore, everyone: Callable[[], list[str]]) -> list[str]:
    """Whom pass 2 judges: the participants written in this block (plain form: ``everyone()``,
    as upstream's scan)."""
    touched = acceleration.get_touched(ctx)
    return everyone() if touched is None else touched
