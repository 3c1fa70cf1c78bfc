"""The ``--aggregate`` layout's rules on generated answers: the model file names of the shared
data, the check of an answer's shape and epoch, and the printing of a body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepersim.types.chain_json import compute_chain_json
from keepersim.types.epoch_layout import (
    AggregateFile,
    check_answer,
    compute_aggregate_text,
    compute_epoch_files,
    compute_model_file_name,
    compute_model_files,
)
from keepersim.types.messages import ConfirmationPoCEvent, EpochGroupData, ExcludedParticipant

EPOCHS = st.integers(0, 2**64 - 1)
MODEL_IDS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1)


def test_model_file_names_of_the_shared_data() -> None:
    assert compute_model_file_name(249, "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8") == (
        "epoch_group_data_249__Qwen_Qwen3-235B-A22B-Instruct-2507-FP8.json"
    )
    assert compute_model_file_name(250, "moonshotai/Kimi-K2.6") == (
        "epoch_group_data_250__moonshotai_Kimi-K2.6.json"
    )


@given(epoch=EPOCHS, models=st.lists(MODEL_IDS, max_size=5, unique=True))
def test_model_files_name_each_model_once_or_refuse(epoch: int, models: list[str]) -> None:
    names = [compute_model_file_name(epoch, m) for m in models]
    if len(set(names)) < len(names):  # "a/b" and "a_b" would share a file
        with pytest.raises(ValueError, match="map to the same file name"):
            compute_model_files(epoch, models)
        return
    files = compute_model_files(epoch, models)
    assert [f.name for f in files] == names and [f.model for f in files] == models
    assert all("/" not in f.name and f.params == {"model_id": f.model} for f in files)


@given(epoch=EPOCHS)
def test_epoch_files_are_the_shared_folder_s(epoch: int) -> None:
    before, after = compute_epoch_files(epoch)
    assert [f.name for f in before + after] == [
        "params.json",
        f"epoch_group_data_{epoch}.json",
        f"epoch_performance_summary_{epoch}.json",
        f"excluded_participants_{epoch}.json",
        f"confirmation_poc_events_{epoch}.json",
    ]
    assert all(f.path.endswith(str(epoch)) for f in before[1:] + after)


events = st.builds(
    ConfirmationPoCEvent,
    event_sequence=st.integers(0, 2**64 - 1),
    trigger_height=st.integers(0, 2**63 - 1),
    phase=st.integers(0, 4),
    poc_seed_block_hash=st.text(max_size=8),
)


@settings(max_examples=60)
@given(epoch=st.integers(1, 2**64 - 1), items=st.lists(events, max_size=4), bad=st.data())
def test_events_answer_is_checked_for_its_epoch(epoch: int, items: list[Any], bad: Any) -> None:
    for item in items:
        item.epoch_index = epoch
    body = {"events": [compute_chain_json(e) for e in items]}
    file = AggregateFile(f"confirmation_poc_events_{epoch}.json", "confirmation_poc_events", epoch)
    ignored: list[str] = []
    assert check_answer(file, body, "GET x", ignored) == items and ignored == []
    text = compute_aggregate_text(body)
    assert json.loads(text) == body and text.endswith("}\n")
    assert text == json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if items:
        i = bad.draw(st.integers(0, len(items) - 1))
        body["events"][i]["epoch_index"] = str(epoch - 1)
        with pytest.raises(ValueError, match=rf"events\[{i}\]\.epoch_index: expected epoch"):
            check_answer(file, body, "GET x", [])


def test_answers_of_the_wrong_shape_name_what_is_wrong() -> None:
    group = AggregateFile("g.json", "epoch_group_data", 5, "m/x")
    ok = compute_chain_json(EpochGroupData(epoch_index=5, model_id="m/x"))
    assert check_answer(group, {"epoch_group_data": ok}, "GET g", [])
    with pytest.raises(ValueError, match="GET g: the answer has no 'epoch_group_data' field"):
        check_answer(group, {"items": []}, "GET g", [])
    other = compute_chain_json(EpochGroupData(epoch_index=5, model_id="m"))
    with pytest.raises(ValueError, match=r"model_id: expected 'm/x', got 'm'"):
        check_answer(group, {"epoch_group_data": other}, "GET g", [])
    excluded = AggregateFile("e.json", "excluded_participants", 5)
    with pytest.raises(ValueError, match="'items' is not a list"):
        check_answer(excluded, {"items": {}}, "GET e", [])
    row = compute_chain_json(ExcludedParticipant(epoch_index=5, address="a"))
    row["exclusion_block_height"] = "x"
    with pytest.raises(ValueError, match=r"exclusion_block_height"):
        check_answer(excluded, {"items": [row]}, "GET e", [])
    # a newer chain's field is kept in the file and reported, not an error
    row = compute_chain_json(ExcludedParticipant(epoch_index=5, address="a"))
    row["new_field"] = 1
    ignored: list[str] = []
    check_answer(excluded, {"items": [row]}, "GET e", ignored)
    assert ignored and "new_field" in ignored[0]
