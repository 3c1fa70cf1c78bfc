"""TEMPORARY stand-in (replaced by the chain-params branch)."""

from __future__ import annotations

import json
from decimal import Decimal as PyDecimal
from importlib import resources

from google.protobuf import json_format

from keepersim.types.messages import Decimal, Params


def compute_chain_decimal(value: str | int) -> Decimal:
    d = PyDecimal(value)
    if d == 0:
        return Decimal(value=0, exponent=0)
    sign, digits, exponent = d.normalize().as_tuple()
    coefficient = int("".join(map(str, digits)))
    return Decimal(value=-coefficient if sign else coefficient, exponent=int(exponent))


def get_chain_decimal_value(d: Decimal) -> PyDecimal:
    return PyDecimal(d.value).scaleb(d.exponent)


def get_chain_default_params() -> Params:
    text = resources.files("keepersim.types").joinpath("data/chain_default_params.json").read_text()
    data = {k: v for k, v in json.loads(text).items() if v is not None}
    return json_format.ParseDict(data, Params())


def get_chain_mainnet_params() -> Params:
    p = get_chain_default_params()
    e = p.epoch_params
    e.epoch_length, e.poc_stage_duration, e.poc_validation_delay = 17280, 35, 5
    e.poc_validation_duration, e.set_new_validators_delay = 240, 120
    v = p.validation_params
    v.expiration_blocks = 150
    v.downtime_good_percentage.CopyFrom(compute_chain_decimal("0.98"))
    v.downtime_bad_percentage.CopyFrom(compute_chain_decimal("0.99"))
    v.downtime_h_threshold.CopyFrom(compute_chain_decimal("100"))
    return p


def validate_chain_params(params: Params) -> None:
    return None
