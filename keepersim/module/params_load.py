"""The one check that params can run: used by the governance handlers before they accept new
params and by begin block before it applies them, so accepted params never stop the chain."""

from __future__ import annotations

from keepersim.keeper.policies import HealthPolicy, get_policy
from keepersim.keeper.selection import get_pipeline_rules
from keepersim.keeper.sprt import compute_sprt_constants
from keepersim.types.errors import InvalidParamsError
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams


def get_loaded_policy(params: ModuleParams) -> HealthPolicy:
    """The policy ``params`` name, built, once the params are valid and everything the chain
    derives from them (pipeline rules, SPRT constants) computes; InvalidParamsError otherwise."""
    validate_params(params)
    name = params.extension_params.health_params.policy
    try:
        policy = get_policy(name)
        get_pipeline_rules(policy, params.extension_params)
        if params.extension_params.sprt_enabled:
            compute_sprt_constants(params.params.validation_params)
    except Exception as exc:  # anything the params make fail: they cannot run
        raise InvalidParamsError(
            "extension_params.health_params",
            f"params the chain can load ({type(exc).__name__}: {exc})",
            name,
        ) from exc
    return policy
