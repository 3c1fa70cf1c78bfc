"""``keepersim export`` against the stand-in chain nodes (tests/standin: the chain's REST
gateway behind its proxy, independent of keepersim's server): export, then replay as-recorded
with 0 mismatches; participants with their models, ML nodes, weights and reputation from the
epoch groups; RAMPING kept; inferences started in the next epoch's PoC window kept in their
epoch; one pinned height per snapshot; pruned epochs refused naming the earliest exportable one;
an older node without the summary route exported without summaries (and saying so); 501 never
retried; Retry-After honoured; pages per epoch reported."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standin.chain_node import (
    API_PREFIX,
    OLDER_VERSION,
    PROXY_PREFIX,
    ChainHistory,
    StandinNode,
    get_poc_window_inferences,
)
from standin.conftest import chain_history, current_node, older_node  # noqa: F401

from keepersim.cli import main
from keepersim.export.backoff import BackoffGate
from keepersim.export.export_run import ExportError, ExportOptions, ExportResult
from keepersim.export.exporter import export_trace
from keepersim.replay.as_recorded import replay_as_recorded
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import (
    EpochSummaryRecord,
    Header,
    InferenceRecord,
    ParticipantsRecord,
)
from keepersim.types.messages import RAMPING

FAST = ExportOptions(backoff_base=0.001, backoff_cap=0.004, timeout=10.0, jitter=0.0)
#: With the stand-in's default history (latest epoch 4, pruning threshold 2), epochs 3 and 4
#: are the exportable ones; epoch 0's inferences are never pruned.
LAST_TWO = (3, 4)


def opts(**changes: Any) -> ExportOptions:
    return dataclasses.replace(FAST, **changes)


def export(node_url: str, epochs: tuple[int, int], out: Path, **changes: Any) -> ExportResult:
    return export_trace(node_url, epochs, out, options=opts(**changes))


@pytest.fixture
def exported(current_node: StandinNode, tmp_path: Path) -> Iterator[tuple[Path, ExportResult]]:  # noqa: F811
    out = tmp_path / "trace.jsonl"
    yield out, export(current_node.url, LAST_TWO, out)


# --------------------------------------------------------------------------------------------
# Export, then replay
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epochs", [LAST_TWO, (0, 0)])
def test_export_then_replay_as_recorded_gives_no_mismatch(
    current_node: StandinNode,  # noqa: F811
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
    epochs: tuple[int, int],
) -> None:
    out = tmp_path / "trace.jsonl"
    result = export(current_node.url, epochs, out)
    assert result.ok and result.summaries_available
    report = replay_as_recorded(out, policies=["gonka"])
    assert report.ok
    assert report.summary_mismatch_count == 0 and report.status_mismatches.count == 0
    latest = chain_history.latest
    wanted = [i for i in latest.inferences if epochs[0] <= i.epoch_id <= epochs[1]]
    records = list(iterate_trace(out))
    inferences = [r for r in records if isinstance(r, InferenceRecord)]
    assert sorted(r.inference_id for r in inferences) == sorted(i.inference_id for i in wanted)
    summaries = [r for r in records if isinstance(r, EpochSummaryRecord)]
    if epochs == (0, 0):  # epoch 0 starts at genesis: its summary is complete and compared
        assert [s.epoch_index for s in summaries] == [0] and len(report.summaries_checked) == 1
    else:  # epoch 3's counts hold epoch 2's (pruned) late outcomes; epoch 4 is not settled
        assert summaries == [] and set(result.summaries_omitted) == {"3"}


def test_participants_carry_models_ml_nodes_weights_and_reputation(
    exported: tuple[Path, ExportResult],
    chain_history: ChainHistory,  # noqa: F811
) -> None:
    out, result = exported
    latest = chain_history.latest
    lines = [r for r in iterate_trace(out) if isinstance(r, ParticipantsRecord)]
    assert [r.epoch_index for r in lines] == [3, 4]
    for line in lines:
        groups = [g for g in latest.epoch_groups if g.epoch_index == line.epoch_index]
        parent = next(g for g in groups if g.model_id == "")
        weights = {w.member_address: w.weight for w in parent.validation_weights}
        assert {p.address: p.weight for p in line.participants} == weights
        expected_models: dict[str, list[str]] = {}
        expected_nodes: dict[str, set[str]] = {}
        for model in parent.sub_group_models:
            sub = next(g for g in groups if g.model_id == model)
            for w in sub.validation_weights:
                expected_models.setdefault(w.member_address, []).append(model)
                expected_nodes.setdefault(w.member_address, set()).update(
                    n.node_id for n in w.ml_nodes
                )
        nodes = {n.address: n for n in line.nodes}
        assert {a: list(n.models) for a, n in nodes.items()} == expected_models
        assert {a: {m.node_id for m in n.ml_nodes} for a, n in nodes.items()} == expected_nodes
        assert all(m.poc_weight > 0 for n in line.nodes for m in n.ml_nodes)
        reputations = {w.member_address: w.reputation for w in parent.validation_weights}
        assert result.reputations[str(line.epoch_index)] == reputations
        # The trace itself carries the group's members: weight and reputation as the group has
        # them, and the member's ML nodes.
        assert {w.member_address: w.reputation for w in line.weights} == reputations
        assert {w.member_address: w.weight for w in line.weights} == weights
        assert {w.member_address: {m.node_id for m in w.ml_nodes} for w in line.weights} == {
            a: expected_nodes.get(a, set()) for a in weights
        }
    assert any(r > 0 for r in result.reputations["4"].values())


def test_ramping_is_preserved(
    exported: tuple[Path, ExportResult],
    chain_history: ChainHistory,  # noqa: F811
) -> None:
    out, _ = exported
    ramping = {p.address for p in chain_history.latest.participants if p.status == RAMPING}
    assert ramping
    for line in (r for r in iterate_trace(out) if isinstance(r, ParticipantsRecord)):
        assert {p.address for p in line.participants if p.status == RAMPING} == ramping
    assert '"status":"RAMPING"' in out.read_text()


def test_inferences_started_in_the_next_epochs_poc_window_stay_in_their_epoch(
    exported: tuple[Path, ExportResult],
    chain_history: ChainHistory,  # noqa: F811
) -> None:
    out, result = exported
    in_window = [i for i in get_poc_window_inferences(chain_history.latest) if i.epoch_id == 3]
    assert in_window  # epoch 3's inferences started in [poc_start(4), effective(4))
    records = {r.inference_id: r for r in iterate_trace(out) if isinstance(r, InferenceRecord)}
    for inference in in_window:
        assert records[inference.inference_id].inference.epoch_id == 3
    header = next(r for r in iterate_trace(out) if isinstance(r, Header))
    parents = {g.epoch_index: g for g in chain_history.latest.epoch_groups if g.model_id == ""}
    assert header.first_height == parents[3].effective_block_height  # not poc_start
    assert result.pages_per_epoch["3"]["inferences"] == sum(
        1 for i in chain_history.latest.inferences if i.epoch_id == 3
    )


# --------------------------------------------------------------------------------------------
# Requests: prefix, pinning, pages per epoch
# --------------------------------------------------------------------------------------------


def test_every_request_of_the_snapshot_is_pinned_to_one_height(
    current_node: StandinNode,  # noqa: F811
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    result = export(current_node.api_url, LAST_TWO, tmp_path / "t.jsonl", page_limit=20)
    requests = current_node.requests
    assert requests[0].rpc == "EpochInfo" and requests[0].height_header is None
    pinned = {r.height_header for r in requests[1:]}
    assert pinned == {str(chain_history.latest.height)} == {str(result.pinned_height)}
    assert current_node.counts["InferenceAll"] > 1  # a paged listing, every page pinned
    assert all(r.status == 200 for r in requests if r.rpc is not None)


def test_pages_per_epoch_and_request_counts(
    current_node: StandinNode,  # noqa: F811
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    result = export(current_node.api_url, LAST_TWO, tmp_path / "t.jsonl")
    counts = current_node.counts
    per_epoch = result.pages_per_epoch
    assert set(per_epoch) == {"3", "4"}
    # the parents of 3 and 4 plus their model groups (the range ends at the current epoch)
    assert counts["EpochGroupData"] == sum(p["epoch_group_data"] for p in per_epoch.values())
    assert counts["InferenceAll"] == result.shared_pages["inference"]
    assert counts["ParticipantAll"] == result.shared_pages["participant"]
    assert counts["EpochPerformanceSummary"] == sum(
        p["epoch_performance_summary"] for p in per_epoch.values()
    )
    assert counts["ExcludedParticipants"] == sum(
        p["excluded_participants"] for p in per_epoch.values()
    )
    assert result.fetch_requests == sum(counts.values())
    assert "<unrouted>" in counts  # node_info: the stand-in, like a proxy, has none
    assert result.chain_id_source == "default"
    assert any("paged whole once" in n for n in result.notes)
    assert any("prompt_payload" in n for n in result.notes)


@pytest.mark.parametrize("suffix", ["", PROXY_PREFIX, PROXY_PREFIX + "/"])
def test_node_url_is_a_host_root_or_the_chain_api(
    current_node: StandinNode,  # noqa: F811
    tmp_path: Path,
    suffix: str,
) -> None:
    assert export(current_node.url + suffix, (0, 0), tmp_path / "t.jsonl").ok
    paths = [r.path for r in current_node.requests]
    assert not any(p.startswith(PROXY_PREFIX + PROXY_PREFIX) for p in paths)
    probes = [p for p in paths if not p.startswith(PROXY_PREFIX + "/")]
    assert probes == ([API_PREFIX + "/epoch_info"] if suffix == "" else [])


# --------------------------------------------------------------------------------------------
# Pruning, older nodes, retries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epochs", [(1, 4), (2, 3), (2, 2)])
def test_pruned_epochs_name_the_earliest_exportable_epoch(
    current_node: StandinNode,  # noqa: F811
    tmp_path: Path,
    epochs: tuple[int, int],
) -> None:
    out = tmp_path / "t.jsonl"
    with pytest.raises(ExportError, match="the earliest exportable epoch is 3") as info:
        export(current_node.url, epochs, out)
    assert "inference_pruning_epoch_threshold 2" in str(info.value)
    assert current_node.counts["InferenceAll"] == 0  # refused before any listing
    assert not out.exists() and not out.with_name(out.name + ".progress.json").exists()


def test_an_older_node_exports_without_summaries_and_says_so(
    older_node: StandinNode,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert older_node.version == OLDER_VERSION
    out = tmp_path / "t.jsonl"
    status = main(
        ["export", "--node", older_node.url, "--epochs", "0-0", "--out", str(out), "--no-progress"]
    )
    captured = capsys.readouterr()
    assert status == 0
    result = json.loads(captured.out)
    assert result["summaries_available"] is False
    assert "no epoch_performance_summary" in captured.err
    assert any("no epoch_performance_summary" in n for n in result["notes"])
    summary_requests = [r for r in older_node.requests if "epoch_performance_summary" in r.path]
    assert [r.status for r in summary_requests] == [501]  # one request: 501 is never retried
    assert result["fetch_retries"] == 0
    records = list(iterate_trace(out))
    assert not any(isinstance(r, EpochSummaryRecord) for r in records)
    report = replay_as_recorded(out, policies=["gonka"])
    assert report.ok and report.summaries_checked == []


def test_the_current_node_says_summaries_are_available(
    current_node: StandinNode,  # noqa: F811
    tmp_path: Path,
) -> None:
    result = export(current_node.url, (0, 0), tmp_path / "t.jsonl")
    assert result.summaries_available and result.to_dict()["summaries_available"] is True


class FakeClock:
    """A monotonic clock that only sleeps move (thread-safe)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.lock = threading.Lock()

    def clock(self) -> float:
        with self.lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.sleeps.append(seconds)
            self.now += seconds


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured(
    current_node: StandinNode,  # noqa: F811
    tmp_path: Path,
    status: int,
) -> None:
    fake = FakeClock()
    gate = BackoffGate(0.001, 0.004, clock=fake.clock, sleep=fake.sleep)
    current_node.fail_next(1, status, retry_after=7, rpc="InferenceAll")
    result = export_trace(current_node.url, (0, 0), tmp_path / "t.jsonl", options=FAST, gate=gate)
    assert result.ok and result.fetch_retries == 1
    assert max(fake.sleeps) >= 7  # not the 1 ms back-off: the server's Retry-After
    statuses = [r.status for r in current_node.requests if r.rpc == "InferenceAll"]
    assert statuses[0] == status and statuses[1:] == [200] * (len(statuses) - 1)


def test_retries_have_jitter() -> None:
    draws = iter([0.0, 0.5, 0.999])
    fake = FakeClock()
    gate = BackoffGate(
        2.0, 100.0, clock=fake.clock, sleep=fake.sleep, jitter=0.5, rng=lambda: next(draws)
    )
    assert [gate.pause(1), gate.pause(1), gate.pause(2)] == pytest.approx([2.0, 2.5, 4 * 1.4995])
    steady = BackoffGate(2.0, 100.0, clock=fake.clock, sleep=fake.sleep, jitter=0.5, rng=lambda: 0)
    assert steady.pause(1, at_least=30.0) == 30.0 and steady.pause(1, at_least=0.5) == 2.0


def test_height_pins_an_earlier_snapshot(
    current_node: StandinNode,  # noqa: F811
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    height = chain_history.heights[3]  # epoch 3's effective height: latest epoch 3 there
    out = tmp_path / "t.jsonl"
    result = export(current_node.api_url, (0, 0), out, height=height)
    assert result.ok and result.pinned_height == height
    assert {r.height_header for r in current_node.requests[1:]} == {str(height)}
    with pytest.raises(ExportError, match="the node is at height"):
        export(current_node.api_url, (0, 0), tmp_path / "u.jsonl", height=10**6)


def test_exclusions_come_with_their_height(
    current_node: StandinNode,  # noqa: F811
    chain_history: ChainHistory,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The stand-in's sprt run excludes a participant ("downtime"); each epoch's exclusions are
    in the result with ``exclusion_block_height``."""
    result = export(current_node.url, LAST_TWO, tmp_path / "t.jsonl")
    for epoch in ("3", "4"):
        expected = [
            (x.address, x.reason, str(x.exclusion_block_height))
            for x in chain_history.latest.excluded
            if x.epoch_index == int(epoch)
        ]
        got = [
            (x["address"], x["reason"], x["exclusion_block_height"]) for x in result.excluded[epoch]
        ]
        assert sorted(got) == sorted(expected)
    assert any(result.excluded.values())
