"""Scenario limits beyond the corpus cases (``cases/``): a scenario beyond them is refused in
well under a second, the schema states them, random bad values name their field."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corpus_helpers import assert_refused, get_scenario, run_main, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepersim import limits as lim
from keepersim.sim.scenario import get_schema


@pytest.mark.parametrize(
    "change",
    [{"blocks": 1e12}, {"arrivals_per_block": 1e9}, {"blocks": 10**12, "arrivals_per_block": 1e9}],
)
def test_beyond_the_limits_is_refused_in_under_a_second(
    change: dict[str, Any], tmp_path: Path
) -> None:
    obj = get_scenario()
    obj.update(change)
    path = write_json(tmp_path / "huge.json", obj)
    run_main(["scenarios", "list"])  # imports warm, so the timing is the refusal's
    started = time.perf_counter()
    status, err = run_main(["simulate", str(path), "--store", "memory"])
    elapsed = time.perf_counter() - started
    assert_refused(status, err, "huge.json", "limit")
    lines = err.count("\n")
    assert lines == (1 if len(change) == 1 else 1 + len(change)), err  # a problem per field
    assert elapsed < 1.0, elapsed


def test_integral_floats_count_as_integers(tmp_path: Path) -> None:
    """Documented: 6e1 is 60 (JSON Schema's integers); only the limits refuse 1e12."""
    obj = get_scenario()
    obj["blocks"] = 6e1
    path = write_json(tmp_path / "floaty.json", obj)
    status, err = run_main(["simulate", str(path), "--store", "memory"])
    assert status == 0, err


def test_schema_states_the_module_limits() -> None:
    """The shipped JSON Schema and the code hold the same limits (one documented set)."""
    schema = get_schema()
    top, part = schema["properties"], schema["$defs"]["participant"]["properties"]
    assert top["blocks"]["maximum"] == lim.MAX_BLOCKS
    assert top["epoch_length"]["maximum"] == lim.MAX_EPOCH_LENGTH
    assert top["expiration_blocks"]["maximum"] == lim.MAX_EXPIRATION_BLOCKS
    assert top["arrivals_per_block"]["maximum"] == lim.MAX_ARRIVALS_PER_BLOCK
    assert top["max_reselects"]["maximum"] == lim.MAX_RESELECTS
    assert top["participants"]["maxItems"] == lim.MAX_PARTICIPANTS
    assert top["events"]["maxItems"] == lim.MAX_EVENTS
    assert top["events"]["items"]["properties"]["height"]["maximum"] == lim.MAX_BLOCKS
    assert top["arrival_shape"]["maxItems"] == lim.MAX_ARRIVAL_SHAPE
    assert top["model_traffic"]["maxProperties"] == lim.MAX_MODELS
    assert part["weight"]["maximum"] == lim.MAX_WEIGHT == 2**31 - 1
    assert part["capacity"]["maximum"] == lim.MAX_CAPACITY
    assert part["latency_blocks"]["maximum"] == lim.MAX_LATENCY_BLOCKS
    assert all(
        p["maximum"] == lim.MAX_LATENCY_BLOCKS for p in part["latency_blocks"]["prefixItems"]
    )


def test_builtin_scenarios_fit_the_limits_comfortably() -> None:
    from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios

    for name in list_builtin_scenarios():
        s = get_builtin_scenario(name, 1)
        assert s.blocks * s.arrivals_per_block * 10 <= lim.MAX_EXPECTED_REQUESTS, name
        assert len(s.participants) * 10 <= lim.MAX_PARTICIPANTS, name


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        node: Any = obj
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


# field -> (lowest value beyond the limit, how a bad value may be drawn)
_LIMITED = {
    ("blocks",): lim.MAX_BLOCKS + 1,
    ("epoch_length",): lim.MAX_EPOCH_LENGTH + 1,
    ("expiration_blocks",): lim.MAX_EXPIRATION_BLOCKS + 1,
    ("max_reselects",): lim.MAX_RESELECTS + 1,
    ("arrivals_per_block",): lim.MAX_ARRIVALS_PER_BLOCK + 1,
    ("participants", 0, "weight"): lim.MAX_WEIGHT + 1,
    ("participants", 2, "capacity"): lim.MAX_CAPACITY + 1,
    ("participants", 0, "latency_blocks"): lim.MAX_LATENCY_BLOCKS + 1,
}


def _location(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(sorted(_LIMITED, key=str)),
    excess=st.integers(0, 10**15),
    as_float=st.booleans(),
    wrong=st.sampled_from([None, "text", True, [], {}, -1, 0.5]),
    use_wrong=st.booleans(),
)
def test_random_bad_value_names_the_field(
    field: tuple[Any, ...],
    excess: int,
    as_float: bool,
    wrong: Any,
    use_wrong: bool,
    tmp_path: Path,
) -> None:
    """A value beyond a field's limit (integral float or int), or of a wrong type or range, is
    refused naming the field and the file."""
    obj = get_scenario()
    value: Any = _LIMITED[field] + excess
    if as_float:
        value = float(value)
    if use_wrong:
        if wrong is None and field == ("participants", 2, "capacity"):
            return  # null is a valid capacity (unlimited)
        if wrong == 0.5 and field == ("arrivals_per_block",):
            return  # 0.5 requests per block is valid
        if wrong == -1 and field == ("max_reselects",):
            wrong = -2
        value = wrong
    _set(field, value)(obj)
    path = write_json(tmp_path / "random.json", obj)
    status, err = run_main(["simulate", str(path), "--store", "memory"])
    assert_refused(status, err, "random.json", _location(field))
