"""Bad scenario files through ``keepersim simulate``: exit 2, the file and field named, no
traceback; a scenario beyond the limits is refused in well under a second."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corpus_helpers import assert_refused, get_scenario, run_main, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepersim.sim import scenario as lim
from keepersim.sim.scenario import get_schema


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        node: Any = obj
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def _budget(obj: dict[str, Any]) -> None:
    obj["blocks"], obj["arrivals_per_block"] = 900_000, 10.0  # each within its own limit


def _many_participants(obj: dict[str, Any]) -> None:
    base = obj["participants"][0]
    obj["participants"] = [dict(base, address=f"n{i}") for i in range(lim.MAX_PARTICIPANTS + 1)]


# (mutation, strings the message must contain)
CASES: list[tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    (_set(("participants", 1, "weight"), 3_000_000_000), ("participants[1].weight", "int32")),
    (_set(("participants", 0, "weight"), 2**31), ("participants[0].weight", "2147483647")),
    (_set(("blocks",), 1e12), ("blocks", "limit")),
    (_set(("arrivals_per_block",), 1e9), ("arrivals_per_block", "limit")),
    (_budget, ("blocks x arrivals_per_block", "5,000,000")),
    (_many_participants, ("participants", "above the limit 10000")),
    (_set(("epoch_length",), 2_000_000), ("epoch_length", "limit")),
    (_set(("expiration_blocks",), 10**6), ("expiration_blocks", "limit")),
    (_set(("participants", 0, "latency_blocks"), 20_000), ("participants[0].latency_blocks",)),
    (_set(("participants", 1, "latency_blocks"), [1, 20_000]), ("latency_blocks[1]",)),
    (_set(("participants", 2, "capacity"), 2_000_000), ("participants[2].capacity",)),
    (_set(("max_reselects",), 1000), ("max_reselects",)),
    (_set(("seed",), -1), ("seed",)),
    (_set(("seed",), 2**64), ("seed",)),
    (_set(("participants", 1, "weight"), "heavy"), ("participants[1].weight", "integer")),
    (_set(("participants", 2, "miss", 1, 1), 1.5), ("participants[2].miss[1][1]",)),
    (_set(("participants",), []), ("participants", "at least one participant")),
    (_set(("blocks",), 1.5), ("blocks", "integer")),
    (_set(("blokcs",), 5), ("blokcs", "did you mean 'blocks'")),
    (_set(("participants", 1, "address"), "a"), ("participants[1].address", "duplicate")),
]


@pytest.mark.parametrize(("mutate", "named"), CASES)
def test_bad_scenario_field(
    mutate: Callable[[dict[str, Any]], None], named: tuple[str, ...], tmp_path: Path
) -> None:
    obj = get_scenario()
    mutate(obj)
    path = write_json(tmp_path / "scenario.json", obj)
    status, err = run_main(["simulate", str(path), "--store", "memory"])
    assert_refused(status, err, "scenario.json", *named)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b'{"name": "x", ', ("scenario.json", "invalid JSON at line 1")),
        (b"\xff\xfe\x00garbage", ("scenario.json", "not UTF-8")),
        (b'{"name": "x", "name": "y"}', ("scenario.json", "duplicate key 'name'")),
        (b'{"name": "x", "arrivals_per_block": NaN}', ("scenario.json", "arrivals_per_block")),
        (b"[]", ("scenario.json", "top level")),
    ],
)
def test_bad_scenario_text(content: bytes, named: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "scenario.json"
    path.write_bytes(content)
    status, err = run_main(["simulate", str(path), "--store", "memory"])
    assert_refused(status, err, *named)


def test_missing_scenario_names_it(tmp_path: Path) -> None:
    status, err = run_main(["simulate", str(tmp_path / "nowhere.json")])
    assert_refused(status, err, "nowhere.json", "neither a built-in scenario")


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
