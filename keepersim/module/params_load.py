"""The one check that params can run: used by the governance handler before it accepts new
params and by begin block before it applies them, so accepted params never stop the chain."""

from __future__ import annotations

from keepersim.keeper.policies import HealthPolicy, get_policy
from keepersim.keeper.selection import get_pipeline_rules
from keepersim.keeper.sprt import compute_sprt_constants
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import validate_params
from keepersim.types.pb.inference.inference.params_pb2 import Params


def get_loaded_policy(params: Params) -> HealthPolicy:
    """The policy ``params`` name, built, once the params are valid and everything the chain
    derives from them (pipeline rules, SPRT constants) computes; InvalidParamsError otherwise."""
    validate_params(params)
    name = params.health_params.policy
    try:
        policy = get_policy(name)
        get_pipeline_rules(policy, params)
        compute_sprt_constants(params.sprt_params)
    except Exception as exc:  # anything the params make fail: they cannot run
        raise InvalidParamsError(
            "health_params", f"params the chain can load ({type(exc).__name__}: {exc})", name
        ) from exc
    return policy
