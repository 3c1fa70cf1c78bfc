"""Random bad governance values through the CLI (the fixed cases are ``cases/``): exit 2, the
field named, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus_helpers import assert_refused, get_scenario, run_main, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    return write_json(tmp_path / "scenario.json", get_scenario())


#: The SPRT's p0 is the chain's downtime percentage (a chain Decimal: any exponent, so a decimal
#: finer than 12 fractional digits is a value, no longer an error).
P0 = "params.validation_params.downtime_good_percentage"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(
        st.text(min_size=1, max_size=12).filter(lambda s: not _is_decimal(s)),
        st.sampled_from(["inf", "-Infinity", "NaN", "sNaN", "1e", "0x10"]),
    )
)
def test_random_bad_decimal_names_the_field(
    value: str, scenario_file: Path, tmp_path: Path
) -> None:
    gov = write_json(tmp_path / "gov.json", [{"height": 1, "set": {P0: value}}])
    status, err = run_main(
        ["simulate", str(scenario_file), "--store", "memory", "--governance", str(gov)]
    )
    assert_refused(status, err, "gov.json", P0)


def _is_decimal(text: str) -> bool:
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(text.strip()).is_finite()
    except (InvalidOperation, ValueError):
        return False
