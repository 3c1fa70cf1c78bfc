"""Scenario format: parsing, validation errors, defaults, dump/parse round trip."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.sim.scenario import (
    DEFAULT_MODELS,
    MAX_ARRIVALS_PER_BLOCK,
    MAX_BLOCKS,
    MAX_EXPECTED_REQUESTS,
    MAX_SEED,
    MAX_WEIGHT,
    ParticipantSpec,
    Scenario,
    ScenarioError,
    dump_scenario,
    format_scenario_json,
    get_schema,
    get_schema_path,
    load_scenario,
    parse_scenario,
    save_scenario,
)

# The example from shared/spec/scenario-format.md, verbatim.
SPEC_EXAMPLE = """\
{
  "name": "steady_degraded",
  "seed": 7,
  "blocks": 20000,
  "epoch_length": 5000,
  "expiration_blocks": 150,
  "arrivals_per_block": 4.6,
  "participants": [
    {"address": "gonka1qqq...", "weight": 1200, "latency_blocks": 2,
     "miss": [[0, 0.01], [8000, 0.28]], "capacity": null}
  ]
}
"""


def valid() -> dict[str, Any]:
    """A valid scenario with three participants, as decoded JSON."""
    return {
        "name": "t",
        "seed": 3,
        "blocks": 100,
        "epoch_length": 50,
        "expiration_blocks": 150,
        "arrivals_per_block": 2.5,
        "participants": [
            {"address": "a", "weight": 10, "latency_blocks": 2, "miss": [[0, 0.1]], "capacity": 1},
            {"address": "b", "weight": 20, "latency_blocks": [1, 4], "miss": [[0, 0.0]]},
            {
                "address": "c",
                "weight": 30,
                "miss": [[0, 0.01], [10, 0.5], [20, 1.0]],
                "capacity": None,
            },
        ],
    }


def errors_of(obj: object, source: str = "scen.json") -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(obj, source)
    message = str(info.value)
    assert source in message
    return message


# --------------------------------------------------------------------------------------------
# Valid input
# --------------------------------------------------------------------------------------------


def test_spec_example_parses(tmp_path: Path) -> None:
    path = tmp_path / "example.json"
    path.write_text(SPEC_EXAMPLE)
    s = load_scenario(path)
    assert s.name == "steady_degraded"
    assert (s.seed, s.blocks, s.epoch_length, s.expiration_blocks) == (7, 20000, 5000, 150)
    assert s.arrivals_per_block == 4.6
    (p,) = s.participants
    assert p == ParticipantSpec(
        address="gonka1qqq...",
        weight=1200,
        latency_min=2,
        latency_max=2,
        miss=((0, 0.01), (8000, 0.28)),
        capacity=None,
        models=("default",),
    )
    assert s.get_total_weight() == 1200
    assert (s.max_reselects, s.pushback, s.description) == (2, False, "")


def test_defaults_applied() -> None:
    obj = valid()
    del obj["expiration_blocks"]
    s = parse_scenario(obj, "mem")
    assert s.expiration_blocks == 150
    assert s.max_reselects == 2
    assert s.pushback is False
    assert s.description == ""
    a, b, c = s.participants
    assert (a.latency_min, a.latency_max) == (2, 2)
    assert (b.latency_min, b.latency_max) == (1, 4)
    assert (c.latency_min, c.latency_max) == (2, 2)  # latency_blocks absent: default 2
    assert b.capacity is None  # capacity absent: unlimited
    assert a.capacity == 1
    assert all(p.models == DEFAULT_MODELS == ("default",) for p in s.participants)
    assert s.get_total_weight() == 60


def test_extension_keys() -> None:
    obj = valid()
    obj.update({"description": "hello", "max_reselects": 0, "pushback": True})
    obj["participants"][0]["models"] = ["m1", "m2"]
    s = parse_scenario(obj, "mem")
    assert (s.description, s.max_reselects, s.pushback) == ("hello", 0, True)
    assert s.participants[0].models == ("m1", "m2")
    assert parse_scenario(dump_scenario(s), "dump") == s


def test_integral_floats_accepted_as_integers() -> None:
    obj = valid()
    obj["blocks"] = 100.0
    obj["participants"][0]["weight"] = 10.0
    s = parse_scenario(obj, "mem")
    assert s.blocks == 100 and isinstance(s.blocks, int)
    assert s.participants[0].weight == 10 and isinstance(s.participants[0].weight, int)


def test_schema_is_valid_draft_2020_12_and_strict() -> None:
    schema = get_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert get_schema_path().is_file()

    # Objects are closed, except the maps (their values typed: {model: share or weight}) and
    # the two that are checked elsewhere ('params' loads as the chain's Params) or are free
    # ('source', no effect on a run).
    open_objects = {"params", "source"}

    def walk(node: Any, name: str = "") -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and name not in open_objects:
                extra = node.get("additionalProperties")
                assert extra is False or (isinstance(extra, dict) and "type" in extra), name
            for key, child in node.items():
                walk(child, key)
        elif isinstance(node, list):
            for child in node:
                walk(child, name)

    walk(schema)
    described = json.dumps(schema)
    for key in ("description", "max_reselects", "pushback", "models"):
        assert key in described
    participant = schema["$defs"]["participant"]["properties"]
    for key in ("models", "model_weights"):
        assert "extension" in participant[key]["description"]
    for key in (
        "description",
        "max_reselects",
        "pushback",
        "model_traffic",
        "events",
        "params",
        "source",
    ):
        assert "extension" in schema["properties"][key]["description"]


# --------------------------------------------------------------------------------------------
# Invalid input: every message names the source, the JSON location and the expectation
# --------------------------------------------------------------------------------------------


def test_unknown_top_level_key() -> None:
    obj = valid()
    obj["blokcs"] = 5
    msg = errors_of(obj)
    assert "top level: unknown key 'blokcs'" in msg
    assert "did you mean 'blocks'" in msg


def test_unknown_participant_key() -> None:
    obj = valid()
    obj["participants"][2]["wieght"] = obj["participants"][2].pop("weight")
    msg = errors_of(obj)
    assert "participants[2]: unknown key 'wieght'" in msg
    assert "did you mean 'weight'" in msg
    assert "participants[2]: missing required key 'weight'" in msg


def test_unknown_key_without_close_match_lists_allowed() -> None:
    obj = valid()
    obj["participants"][0]["zzz"] = 1
    msg = errors_of(obj)
    assert "participants[0]: unknown key 'zzz' (allowed: address, capacity" in msg


@pytest.mark.parametrize(
    ("mutate", "location", "expected"),
    [
        (lambda o: o.update(seed="7"), "seed", 'expected an integer, got a string "7"'),
        (lambda o: o.update(seed=True), "seed", "expected an integer, got a boolean true"),
        (lambda o: o.update(blocks=1.5), "blocks", "expected an integer > 0"),
        (lambda o: o.update(blocks=0), "blocks", "expected an integer > 0, got 0"),
        (lambda o: o.update(name=None), "name", "expected a string, got null"),
        (
            lambda o: o.update(arrivals_per_block=-1),
            "arrivals_per_block",
            "expected a number >= 0, got -1",
        ),
        (lambda o: o.update(pushback="yes"), "pushback", "expected a boolean"),
        (lambda o: o.update(max_reselects=-1), "max_reselects", "expected an integer >= 0"),
        (
            lambda o: o.update(participants=[]),
            "participants",
            "expected a non-empty list (at least one participant)",
        ),
        (
            lambda o: o.update(participants={}),
            "participants",
            "expected a non-empty list, got an object {}",
        ),
        (
            lambda o: o["participants"][1].update(weight=-5),
            "participants[1].weight",
            "expected an integer > 0, got -5",
        ),
        (
            lambda o: o["participants"][1].update(weight="heavy"),
            "participants[1].weight",
            "expected an integer > 0, got a string",
        ),
        (
            lambda o: o["participants"][0].update(capacity=0),
            "participants[0].capacity",
            "expected an integer > 0 or null, got 0",
        ),
        (
            lambda o: o["participants"][0].update(latency_blocks=0),
            "participants[0].latency_blocks",
            "expected an integer >= 1 or a list [min, max], got 0",
        ),
        (
            lambda o: o["participants"][0].update(latency_blocks="2"),
            "participants[0].latency_blocks",
            "expected an integer >= 1 or a list [min, max], got a string",
        ),
        (
            lambda o: o["participants"][0].update(latency_blocks=[1, 2, 3]),
            "participants[0].latency_blocks",
            "expected a list of exactly 2 items [min, max], got 3 items",
        ),
        (
            lambda o: o["participants"][0].update(latency_blocks=[0, 2]),
            "participants[0].latency_blocks[0]",
            "expected an integer >= 1, got 0",
        ),
        (
            lambda o: o["participants"][0].update(latency_blocks=[5, 3]),
            "participants[0].latency_blocks",
            "expected [min, max] with min <= max, got [5, 3]",
        ),
        (
            lambda o: o["participants"][2]["miss"][1].__setitem__(1, 1.5),
            "participants[2].miss[1][1]",
            "expected a number in [0, 1], got 1.5",
        ),
        (
            lambda o: o["participants"][2]["miss"][1].__setitem__(1, -0.1),
            "participants[2].miss[1][1]",
            "expected a number in [0, 1], got -0.1",
        ),
        (
            lambda o: o["participants"][2]["miss"][1].__setitem__(0, "10"),
            "participants[2].miss[1][0]",
            "expected an integer >= 0, got a string",
        ),
        (
            lambda o: o["participants"][2]["miss"].__setitem__(1, [10]),
            "participants[2].miss[1]",
            "expected a list of exactly 2 items [from_block, p], got 1 items",
        ),
        (
            lambda o: o["participants"][2].update(miss=[]),
            "participants[2].miss",
            "expected a non-empty list",
        ),
        (
            lambda o: o["participants"][2]["miss"][0].__setitem__(0, 5),
            "participants[2].miss[0][0]",
            "expected the first from_block to be 0, got 5",
        ),
        (
            lambda o: o["participants"][2]["miss"][2].__setitem__(0, 10),
            "participants[2].miss[2][0]",
            "expected from_block > 10 (from_blocks must strictly increase), got 10",
        ),
        (
            lambda o: o["participants"][2]["miss"][2].__setitem__(0, 3),
            "participants[2].miss[2][0]",
            "expected from_block > 10 (from_blocks must strictly increase), got 3",
        ),
        (
            lambda o: o["participants"][1].update(address="a"),
            "participants[1].address",
            "duplicate address 'a' (already used by participants[0])",
        ),
        (
            lambda o: o["participants"][1].update(address=""),
            "participants[1].address",
            "expected a non-empty string",
        ),
        (
            lambda o: o["participants"][1].update(models=[]),
            "participants[1].models",
            "expected a non-empty list",
        ),
        (
            lambda o: o["participants"][1].update(models=["x", "x"]),
            "participants[1].models",
            "expected distinct items",
        ),
        (
            lambda o: o["participants"].__setitem__(1, 7),
            "participants[1]",
            "expected an object, got an integer 7",
        ),
        (lambda o: o.pop("seed"), "top level", "missing required key 'seed'"),
        (
            lambda o: o["participants"][0].pop("miss"),
            "participants[0]",
            "missing required key 'miss'",
        ),
        (
            lambda o: o.update(arrivals_per_block=float("nan")),
            "arrivals_per_block",
            "expected a finite number",
        ),
        (
            lambda o: o["participants"][2]["miss"][1].__setitem__(1, float("nan")),
            "participants[2].miss[1][1]",
            "expected a finite number, got NaN",
        ),
    ],
)
def test_bad_input_names_location(mutate: Any, location: str, expected: str) -> None:
    obj = valid()
    mutate(obj)
    msg = errors_of(obj)
    assert f"{location}: {expected}" in msg, msg


def test_not_an_object() -> None:
    assert "scen.json: top level: expected an object, got a list" in errors_of([1, 2])


def test_all_problems_collected_in_one_message() -> None:
    obj = valid()
    obj["extra"] = 1
    obj["participants"][0]["weight"] = 0
    obj["participants"][1]["address"] = "a"
    obj["participants"][2]["miss"] = [[1, 0.1], [1, 2.0]]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(obj, "many.json")
    err = info.value
    assert str(err).startswith("many.json: 6 problems:")
    assert err.problems == (
        "top level: unknown key 'extra' (allowed: arrival_shape, arrivals_per_block, blocks, "
        "description, devshard, epoch_length, events, expiration_blocks, max_reselects, model_traffic, "
        "name, params, participants, pushback, seed, source)",
        "participants[0].weight: expected an integer > 0, got 0",
        "participants[1].address: duplicate address 'a' (already used by participants[0]); "
        "expected unique addresses",
        "participants[2].miss[0][0]: expected the first from_block to be 0, got 1",
        "participants[2].miss[1][0]: expected from_block > 1 (from_blocks must strictly "
        "increase), got 1",
        "participants[2].miss[1][1]: expected a number in [0, 1], got 2.0",
    )


def test_problems_sorted_numerically() -> None:
    obj = valid()
    obj["participants"] = [copy.deepcopy(obj["participants"][0]) for _ in range(12)]
    for i, p in enumerate(obj["participants"]):
        p["address"] = f"n{i}"
    obj["participants"][10]["weight"] = 0
    obj["participants"][2]["weight"] = 0
    err = pytest.raises(ScenarioError, parse_scenario, obj, "s").value
    assert [line.split(":")[0] for line in err.problems] == [
        "participants[2].weight",
        "participants[10].weight",
    ]


def test_invalid_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "name": "x",\n  "seed": 1,,\n}\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "invalid JSON at line 3, column 13" in msg


def test_duplicate_json_key_is_an_error(tmp_path: Path) -> None:
    text = SPEC_EXAMPLE.replace('"weight": 1200,', '"weight": 1200, "weight": 12,')
    path = tmp_path / "dup.json"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert f"{path}: participants[0]: duplicate key 'weight'" in str(info.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(
        ScenarioError, match="nope.json: cannot read the scenario file: no such file"
    ):
        load_scenario(missing)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(ScenarioError, match="bin.json: the scenario file is not UTF-8 text"):
        load_scenario(binary)


def test_load_errors_carry_location(tmp_path: Path) -> None:
    obj = valid()
    obj["participants"][2]["wieght"] = 4
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert f"{path}: participants[2]: unknown key 'wieght'" in str(info.value)


def test_scenario_error_is_value_error() -> None:
    assert issubclass(ScenarioError, ValueError)


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


def test_get_miss_probability_boundaries() -> None:
    p = ParticipantSpec("a", 1, 1, 1, ((0, 0.01), (100, 0.5), (101, 1.0), (500, 0.0)))
    assert p.get_miss_probability(0) == 0.01
    assert p.get_miss_probability(1) == 0.01
    assert p.get_miss_probability(99) == 0.01
    assert p.get_miss_probability(100) == 0.5  # a range starts at its from_block
    assert p.get_miss_probability(101) == 1.0
    assert p.get_miss_probability(499) == 1.0
    assert p.get_miss_probability(500) == 0.0
    assert p.get_miss_probability(10**9) == 0.0
    assert p.get_miss_probability(-5) == 0.01
    single = ParticipantSpec("b", 1, 1, 1, ((0, 0.25),))
    assert [single.get_miss_probability(h) for h in (0, 1, 10**6)] == [0.25] * 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"weight": 0},
        {"latency_min": 0},
        {"latency_min": 3, "latency_max": 2},
        {"miss": ()},
        {"miss": ((1, 0.1),)},
        {"miss": ((0, 0.1), (0, 0.2))},
        {"miss": ((0, 1.5),)},
        {"miss": ((0, float("nan")),)},
        {"capacity": 0},
        {"models": ()},
        {"address": ""},
    ],
)
def test_participant_spec_validates(kwargs: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "address": "a",
        "weight": 1,
        "latency_min": 1,
        "latency_max": 2,
        "miss": ((0, 0.1),),
    }
    base.update(kwargs)
    with pytest.raises(ScenarioError):
        ParticipantSpec(**base)


def test_scenario_validates() -> None:
    p = ParticipantSpec("a", 1, 1, 1, ((0, 0.0),))
    ok: dict[str, Any] = {
        "name": "x",
        "seed": 1,
        "blocks": 10,
        "epoch_length": 5,
        "expiration_blocks": 3,
        "arrivals_per_block": 1.0,
        "participants": (p,),
    }
    Scenario(**ok)
    for bad in (
        {"blocks": 0},
        {"arrivals_per_block": float("inf")},
        {"participants": ()},
        {"participants": (p, p)},
        {"max_reselects": -1},
    ):
        with pytest.raises(ScenarioError):
            Scenario(**{**ok, **bad})


def test_frozen_hashable_picklable() -> None:
    s = parse_scenario(valid(), "mem")
    with pytest.raises(AttributeError):
        s.blocks = 5  # type: ignore[misc]
    assert hash(s) == hash(parse_scenario(valid(), "mem"))
    clone = pickle.loads(pickle.dumps(s))
    assert clone == s
    assert clone.get_total_weight() == 60
    assert clone.participants[2].get_miss_probability(15) == 0.5


# --------------------------------------------------------------------------------------------
# Dump / parse round trip
# --------------------------------------------------------------------------------------------


def test_dump_is_spec_format_without_extensions() -> None:
    s = parse_scenario(valid(), "mem")
    dumped = dump_scenario(s)
    assert set(dumped) == {
        "name",
        "seed",
        "blocks",
        "epoch_length",
        "expiration_blocks",
        "arrivals_per_block",
        "participants",
    }
    assert dumped["participants"][1] == {
        "address": "b",
        "weight": 20,
        "latency_blocks": [1, 4],
        "miss": [[0, 0.0]],
        "capacity": None,
    }
    assert parse_scenario(json.loads(json.dumps(dumped)), "rt") == s


def test_save_and_load(tmp_path: Path) -> None:
    obj = valid()
    obj["description"] = "désc"
    obj["pushback"] = True
    s = parse_scenario(obj, "mem")
    path = tmp_path / "s.json"
    save_scenario(s, path)
    assert load_scenario(path) == s
    text = format_scenario_json(s)
    assert json.loads(text) == dump_scenario(s)
    # one participant per line
    assert sum(1 for line in text.splitlines() if '"address"' in line) == 3


_probs = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def participant_specs(draw: st.DrawFn, address: str) -> ParticipantSpec:
    lat_min = draw(st.integers(1, 200))
    lat_max = draw(st.integers(lat_min, 300))
    starts = draw(st.lists(st.integers(1, 10**7), max_size=6, unique=True))
    miss = tuple(
        zip(
            [0, *sorted(starts)],
            draw(st.lists(_probs, min_size=len(starts) + 1, max_size=len(starts) + 1)),
            strict=True,
        )
    )
    return ParticipantSpec(
        address=address,
        weight=draw(st.integers(1, MAX_WEIGHT)),
        latency_min=lat_min,
        latency_max=lat_max,
        miss=miss,
        capacity=draw(st.none() | st.integers(1, 1000)),
        models=tuple(
            draw(
                st.one_of(
                    st.just(["default"]),
                    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True),
                )
            )
        ),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    addresses = draw(
        st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6, unique=True)
    )
    blocks = draw(st.integers(1, MAX_BLOCKS))
    return Scenario(
        name=draw(st.text(max_size=20)),
        seed=draw(st.integers(0, MAX_SEED)),
        blocks=blocks,
        epoch_length=draw(st.integers(1, 10**6)),
        expiration_blocks=draw(st.integers(1, 10**4)),
        arrivals_per_block=draw(
            st.floats(
                min_value=0, max_value=min(MAX_ARRIVALS_PER_BLOCK, MAX_EXPECTED_REQUESTS / blocks)
            )
        ),
        participants=tuple(draw(participant_specs(a)) for a in addresses),
        max_reselects=draw(st.integers(0, 10)),
        pushback=draw(st.booleans()),
        description=draw(st.text(max_size=30)),
    )


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_round_trip_property(s: Scenario) -> None:
    dumped = dump_scenario(s)
    assert parse_scenario(dumped, "prop") == s
    assert parse_scenario(json.loads(json.dumps(dumped)), "prop-json") == s
    assert parse_scenario(json.loads(format_scenario_json(s)), "prop-text") == s
