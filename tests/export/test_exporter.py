"""``keepersim export`` against a local ``keepersim serve``: records identical to the simulator's
trace, byte-identical traces from a healthy node, from one answering 30% 429/503 and from the
documented fault mix (truncated 200s and dropped connections included) in one run, truncated 200s
retried, 4xx stopping at once with the URL, bounded retries, and one back-off gate shared by all
workers with capped pauses.

Loopback only (uvicorn on 127.0.0.1, a free port, in a background thread); back-off bases are
milliseconds so the tests stay short.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_server import make_demo_scenario, simulate_chain
from starlette.types import ASGIApp, Receive, Scope, Send

from keepersim.chain import Chain
from keepersim.export.backoff import BackoffGate
from keepersim.export.export_run import ExportError, ExportOptions, parse_epoch_range
from keepersim.export.exporter import export_trace
from keepersim.server.app import BackgroundServer, create_app
from keepersim.server.faults import FaultInjector, parse_fault_spec
from keepersim.trace.format import encode_message as message_to_json
from keepersim.trace.reader import iterate_trace
from keepersim.trace.records import EpochSummaryRecord, Header, InferenceRecord
from keepersim.types.chain_json import compute_chain_json
from keepersim.types.params import get_default_extension_params

EPOCH_LENGTH = 100
NODE_INFO = "/cosmos/base/tendermint/v1beta1/node_info"
#: A fault seed with which the documented mix truncates a body and drops a connection here.
FAULT_MIX_SEED = 2
BLOCKS = 300
FAST = ExportOptions(backoff_base=0.001, backoff_cap=0.004, timeout=10.0)


def opts(**changes: Any) -> ExportOptions:
    return dataclasses.replace(FAST, **changes)


class Node:
    def __init__(self, chain: Chain, sim_trace: Path) -> None:
        self.chain = chain
        self.sim_trace = sim_trace
        self.servers: list[BackgroundServer] = []

    def serve(self, app: ASGIApp) -> str:
        server = BackgroundServer(app).start()
        self.servers.append(server)
        return server.url


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    folder = tmp_path_factory.mktemp("node")
    scenario = make_demo_scenario(
        participants=12, blocks=BLOCKS, epoch_length=EPOCH_LENGTH, arrivals_per_block=3
    )
    chain_dir, trace = simulate_chain(folder, scenario)
    assert trace is not None
    chain = Chain.open(chain_dir)
    n = Node(chain, trace)
    yield n
    for server in n.servers:
        server.stop()
    chain.close()


@pytest.fixture(scope="module")
def healthy(node: Node) -> str:
    return node.serve(create_app(node.chain))


@pytest.fixture(scope="module")
def baseline(node: Node, healthy: str, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("baseline") / "trace.jsonl"
    result = export_trace(healthy, (0, 3), out, options=opts(page_limit=37))
    assert result.ok and result.fetch_errors == 0
    return out.read_bytes()


def count_extra_fetches(chain: Chain, epochs: tuple[int, int]) -> int:
    """Requests of an export from ``keepersim serve`` besides its pages and summaries (counted in
    ``pages_fetched``): epoch_info (params included), node_info and keepersim's extension params,
    one parent group per epoch up to the current one, each epoch's model groups (participant
    nodes) and exclusions (but epoch 0's), and one declines request per summary (the settled epochs, but a mid-chain A's)."""
    a, b = epochs
    with chain.read() as k:
        latest = k.get_effective_epoch_index()
        subgroups = 0
        for epoch in range(a, b + 1):
            group = k.get_epoch_group(epoch, "")
            assert group is not None
            subgroups += len(group.sub_group_models)
    groups = min(b + 1, latest) + 1 - a
    summaries = sum(1 for e in range(a, b + 1) if e < latest and (e == 0 or e > a))
    excluded = sum(1 for e in range(a, b + 1) if e > 0)  # excluded_participants/0: the current
    return 3 + groups + subgroups + summaries + excluded


def lines_of(data: bytes, *types: str) -> list[str]:
    return [
        line
        for line in data.decode().splitlines()
        if any(f'"type":"{t}"' in line[:40] for t in types)
    ]


def test_export_has_the_simulators_records(node: Node, baseline: bytes, tmp_path: Path) -> None:
    sim = node.sim_trace.read_bytes()
    assert lines_of(baseline, "inference") == lines_of(sim, "inference")
    assert lines_of(baseline, "epoch_summary") == lines_of(sim, "epoch_summary")
    assert lines_of(baseline, "params") == lines_of(sim, "params")
    out = tmp_path / "t.jsonl"
    out.write_bytes(baseline)
    records = list(iterate_trace(out))  # the replay reader's format and ordering checks
    header = records[0]
    assert isinstance(header, Header)
    assert header.source == "export" and header.chain_id == node.chain.chain_id
    assert (header.first_height, header.last_height) == (1, BLOCKS)
    assert [r.epoch_index for r in records if isinstance(r, EpochSummaryRecord)] == [0, 1, 2]
    assert sum(isinstance(r, InferenceRecord) for r in records) == len(lines_of(sim, "inference"))


def test_export_writes_the_chains_shapes_and_keepersims_extension(
    node: Node, baseline: bytes
) -> None:
    """The params line carries the node's chain Params and keepersim's extension params; epoch
    0's participants line the models and ML nodes of its members, derived from its groups (they
    match what the participants registered); each summary line the node's declines."""
    lines = {t: [json.loads(x) for x in lines_of(baseline, t)] for t in ("params", "participants")}
    (params,) = lines["params"]
    with node.chain.read() as k:
        module = k.get_module_params()
        group = k.get_epoch_group(0, "")
        assert group is not None
        members = {m.member_address for m in group.validation_weights}
        registered = [n for n in k.iterate_participant_nodes() if n.address in members]
        declines = {(d.epoch_index, d.address): d.declined_requests for d in k.iterate_declines()}
    assert params["params"] == message_to_json(module.params)
    assert params["extension_params"] == message_to_json(module.extension_params)
    # one participants line per epoch (0..3), each at the epoch's formation height
    assert [p["epoch_index"] for p in lines["participants"]] == ["0", "1", "2", "3"]
    participants = lines["participants"][0]
    assert members and participants["participant_nodes"] == [message_to_json(n) for n in registered]
    summaries = [json.loads(x) for x in lines_of(baseline, "epoch_summary")]
    assert summaries
    for line in summaries:
        epoch = int(line["epoch_index"])
        assert [d["address"] for d in line["epoch_declines"]] == [
            s["participant_id"] for s in line["summaries"]
        ]
        for d in line["epoch_declines"]:
            assert int(d["declined_requests"]) == declines.get((epoch, d["address"]), 0)


def test_declines_come_from_keepersims_route(node: Node, tmp_path: Path) -> None:
    """Each summary line's epoch_declines: the node's count for each summary's participant, 0
    for one the node lists none for."""
    with node.chain.read() as k:
        addresses = [s.participant_id for s in k.get_summaries_for_epoch(1)]
    assert len(addresses) > 1
    counts = {"height": BLOCKS, "epoch_index": 1, "declines": {addresses[1]: 4}}
    app = Rule(
        create_app(node.chain),
        lambda path, query: path == "/keepersim/v1/declines/1",
        200,
        json.dumps(counts).encode(),
    )
    out = tmp_path / "t.jsonl"
    assert export_trace(node.serve(app), (0, 1), out, options=FAST).ok
    (line,) = [
        json.loads(x)
        for x in lines_of(out.read_bytes(), "epoch_summary")
        if json.loads(x)["epoch_index"] == "1"
    ]
    got = {d["address"]: int(d["declined_requests"]) for d in line["epoch_declines"]}
    assert got == {a: 4 if a == addresses[1] else 0 for a in addresses}
    assert {d["epoch_index"] for d in line["epoch_declines"]} == {"1"}


def test_a_chain_node_gets_keepersims_defaults_and_no_keepersim_request(
    node: Node, tmp_path: Path
) -> None:
    """A node that is not ``keepersim serve`` (its node_info says another app) is asked nothing
    under /keepersim/: the params line has keepersim's default extension params, the header no
    policy and the summary lines no epoch_declines. (Epoch 0 only: a chain node prunes epochs
    1 .. latest - inference_pruning_epoch_threshold, and keepersim's data are such epochs.)"""
    info = {
        "default_node_info": {"network": node.chain.chain_id},
        "application_version": {"name": "inference", "app_name": "inferenced"},
    }
    app = Rule(
        Rule(
            create_app(node.chain),
            lambda path, query: path == NODE_INFO,
            200,
            json.dumps(info).encode(),
        ),
        lambda path, query: path.startswith("/keepersim/"),
        404,
    )
    out = tmp_path / "t.jsonl"
    with pytest.raises(ExportError, match="the earliest exportable epoch is 2"):
        export_trace(node.serve(app), (0, 3), out, options=FAST)
    assert export_trace(node.serve(app), (0, 0), out, options=FAST).ok
    assert not any(k.startswith("/keepersim/") for k in app.seen)
    data = out.read_bytes()
    header = json.loads(data.decode().splitlines()[0])
    assert header["type"] == "header" and "policy" not in header
    (params,) = [json.loads(x) for x in lines_of(data, "params")]
    assert params["extension_params"] == message_to_json(get_default_extension_params())
    summaries = [json.loads(x) for x in lines_of(data, "epoch_summary")]
    assert summaries and all("epoch_declines" not in s for s in summaries)
    # the reader takes it: every line but the closing record
    assert len(list(iterate_trace(out))) == len(data.splitlines()) - 1


def test_faulty_node_gives_a_byte_identical_trace(
    node: Node, baseline: bytes, tmp_path: Path
) -> None:
    injector = FaultInjector(parse_fault_spec("429=0.15,503=0.15"), seed=11, max_streak=2)
    url = node.serve(create_app(node.chain, faults=injector))
    for concurrency in (4, 1):
        out = tmp_path / f"faulty-{concurrency}.jsonl"
        result = export_trace(
            url,
            (0, 3),
            out,
            options=opts(concurrency=concurrency, page_limit=37),
        )
        assert out.read_bytes() == baseline
        assert result.ok and result.gave_up == 0 and result.fatal_errors == 0
        assert result.fetch_errors > 0
        assert result.fetch_backoff_pauses == result.fetch_errors
        assert result.fetch_retries == result.fetch_errors
        extra = count_extra_fetches(node.chain, (0, 3))
        assert result.fetch_requests == result.pages_fetched + result.fetch_errors + extra
        assert not out.with_name(out.name + ".progress.json").exists()
        assert not out.with_name(out.name + ".parts").exists()
    injected = injector.stats()["injected"]
    assert injected["429"] > 0 and injected["503"] > 0


@pytest.mark.parametrize(
    ("epochs", "first", "last", "summaries"),
    # a mid-chain export has no summary of its first epoch (it counts the previous epoch's
    # inferences that resolved in it, which the trace lacks)
    [((1, 2), 101, 300, [2]), ((2, 2), 201, 300, []), ((3, 3), 301, 300, [])],
)
def test_epoch_ranges(
    node: Node,
    healthy: str,
    tmp_path: Path,
    epochs: tuple[int, int],
    first: int,
    last: int,
    summaries: list[int],
) -> None:
    if first > last:  # the current epoch has no block yet: nothing to export
        with pytest.raises(ExportError, match="no block committed"):
            export_trace(healthy, epochs, tmp_path / "t.jsonl", options=FAST)
        return
    out = tmp_path / "t.jsonl"
    export_trace(healthy, epochs, out, options=FAST)
    records = list(iterate_trace(out))
    header = records[0]
    assert isinstance(header, Header)
    assert (header.first_height, header.last_height) == (first, last)
    infs = [r for r in records if isinstance(r, InferenceRecord)]
    assert infs and {r.inference.epoch_id for r in infs} <= set(range(epochs[0], epochs[1] + 1))
    assert [r.epoch_index for r in records if isinstance(r, EpochSummaryRecord)] == summaries
    sim_ids = [
        r.inference_id
        for r in iterate_trace(node.sim_trace)
        if isinstance(r, InferenceRecord) and epochs[0] <= r.inference.epoch_id <= epochs[1]
    ]
    assert [r.inference_id for r in infs] == sim_ids


def test_epochs_beyond_the_node(healthy: str, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="latest epoch 3"):
        export_trace(healthy, (2, 9), tmp_path / "t.jsonl", options=FAST)
    with pytest.raises(ValueError, match="A <= B"):
        parse_epoch_range("5-2")
    assert parse_epoch_range("4") == (4, 4) and parse_epoch_range("1-3") == (1, 3)


# --------------------------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------------------------


class Rule:
    """ASGI wrapper: answer ``status`` (with ``body``) to the requests ``match`` selects, at most
    ``times`` times; counts the requests it saw per path+query."""

    def __init__(
        self,
        app: ASGIApp,
        match: Callable[[str, str], bool],
        status: int,
        body: bytes = b'{"code": 3, "message": "rejected by the test"}',
        times: int | None = None,
    ) -> None:
        self.app = app
        self.match = match
        self.status = status
        self.body = body
        self.times = times
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, query = scope["path"], scope.get("query_string", b"").decode()
        with self.lock:
            self.seen[f"{path}?{query}"] = self.seen.get(f"{path}?{query}", 0) + 1
            hit = self.match(path, query) and (self.times is None or self.times > 0)
            if hit and self.times is not None:
                self.times -= 1
        if not hit:
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": self.body})


@pytest.mark.parametrize("status", [400, 404])
def test_a_4xx_stops_the_export_at_once_naming_the_url(
    node: Node, tmp_path: Path, status: int
) -> None:
    rule = Rule(
        create_app(node.chain),
        lambda path, query: path.endswith("/inference") and "pagination.key" in query,
        status,
    )
    url = node.serve(rule)
    out = tmp_path / "t.jsonl"
    with pytest.raises(ExportError) as info:
        export_trace(url, (0, 3), out, options=opts(page_limit=50))
    message = str(info.value)
    assert f"failed: HTTP {status} " in message
    assert f"{url}/productscience/inference/inference/inference?" in message
    assert "pagination.key=" in message and "rejected by the test" in message
    result = info.value.result
    assert result is not None and result.fatal_errors == 1 and result.fetch_errors == 0
    assert result.fetch_backoff_pauses == 0 and not result.ok and result.error
    failed = [
        k
        for k in rule.seen
        if k.startswith("/productscience/inference/inference/inference?") and "key" in k
    ]
    assert len(failed) == 1 and rule.seen[failed[0]] == 1  # no retry
    assert not out.exists()
    assert out.with_name(out.name + ".progress.json").exists()  # done units kept for a rerun


SUMMARY_1 = "/productscience/inference/inference/epoch_performance_summary/1"


@pytest.mark.parametrize("times", [1, 2])
def test_a_truncated_200_is_retried(
    node: Node, baseline: bytes, tmp_path: Path, times: int
) -> None:
    rule = Rule(
        create_app(node.chain),
        lambda path, query: path == SUMMARY_1,
        200,
        body=b'{"epochPerformanceSummary": [',
        times=times,
    )
    url = node.serve(rule)
    out = tmp_path / "t.jsonl"
    result = export_trace(url, (0, 3), out, options=opts(page_limit=37))
    assert result.ok and out.read_bytes() == baseline
    assert rule.seen[f"{SUMMARY_1}?"] == times + 1
    assert (result.fetch_retries, result.fetch_errors, result.fetch_bad_bodies) == (
        times,
        times,
        times,
    )
    assert (result.fetch_backoff_pauses, result.fatal_errors, result.gave_up) == (times, 0, 0)
    assert result.to_dict()["fetch_bad_bodies"] == times


def test_a_200_that_stays_truncated_stops_the_export_naming_the_url(
    node: Node, tmp_path: Path
) -> None:
    rule = Rule(
        create_app(node.chain),
        lambda path, query: path == SUMMARY_1,
        200,
        body=b'{"epochPerformanceSummary": [',
    )
    url = node.serve(rule)
    with pytest.raises(ExportError) as info:
        export_trace(url, (0, 3), tmp_path / "t.jsonl", options=FAST)
    message = str(info.value)
    assert f"GET {url}{SUMMARY_1} failed after 3 attempt(s): invalid JSON in HTTP 200" in message
    assert rule.seen[f"{SUMMARY_1}?"] == 3
    result = info.value.result
    assert result is not None and not result.ok
    assert (result.gave_up, result.fetch_bad_bodies, result.fatal_errors) == (1, 3, 0)


def get_documented_fault_mix() -> str:
    """The ``--faults`` example of docs/server.md (the mix users are shown)."""
    text = (Path(__file__).parents[2] / "docs" / "server.md").read_text(encoding="utf-8")
    found = re.search(r"--faults (\S+)", text)
    assert found is not None
    return found.group(1)


def test_the_documented_fault_mix_exports_in_one_run(
    node: Node, baseline: bytes, tmp_path: Path
) -> None:
    """Every fault kind of the documented mix (truncated 200s and dropped connections
    included) is retried: one run gives the healthy node's trace byte for byte."""
    injector = FaultInjector(parse_fault_spec(get_documented_fault_mix()), seed=FAULT_MIX_SEED)
    url = node.serve(create_app(node.chain, faults=injector))
    out = tmp_path / "t.jsonl"
    result = export_trace(url, (0, 3), out, options=opts(page_limit=10))  # ~150 requests
    assert result.ok and out.read_bytes() == baseline
    injected = injector.stats()["injected"]
    assert injected["badjson"] > 0 and injected["drop"] > 0  # the seed exercises both
    assert result.fetch_bad_bodies == injected["badjson"]
    failing = injected["429"] + injected["503"] + injected["drop"] + injected["badjson"]
    assert result.fetch_errors == result.fetch_retries == failing
    assert (result.fatal_errors, result.gave_up) == (0, 0)


def test_retries_are_bounded(node: Node, tmp_path: Path) -> None:
    rule = Rule(create_app(node.chain), lambda path, query: path.endswith("/epoch_info"), 503)
    url = node.serve(rule)
    with pytest.raises(ExportError) as info:
        export_trace(url, (0, 3), tmp_path / "t.jsonl", options=FAST)
    assert "failed after 3 attempt(s)" in str(info.value) and "HTTP 503" in str(info.value)
    result = info.value.result
    assert result is not None
    assert (result.gave_up, result.fetch_errors, result.fetch_backoff_pauses) == (1, 3, 3)
    assert rule.seen["/productscience/inference/inference/epoch_info?"] == 3


class RecordingGate(BackoffGate):
    """Records who paused (and for how long) and who slept in wait()."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.delays: list[float] = []
        self.pausers: set[str] = set()
        self.sleepers: set[str] = set()

    def pause(self, n: int, *, at_least: float | None = None) -> float:
        delay = super().pause(n, at_least=at_least)
        with self.lock:
            self.delays.append(delay)
            self.pausers.add(threading.current_thread().name)
        return delay

    def wait(self) -> float:
        slept = super().wait()
        if slept > 0:
            with self.lock:
                self.sleepers.add(threading.current_thread().name)
        return slept


def test_backoff_pause_is_shared_and_capped(node: Node, baseline: bytes, tmp_path: Path) -> None:
    # Only epoch 0's summary fails (twice, 503): its worker pauses; the listing workers, which
    # never fail, must wait out the same pause.
    rule = Rule(
        create_app(node.chain),
        lambda path, query: path.endswith("/epoch_performance_summary/0"),
        503,
        times=2,
    )
    url = node.serve(rule)
    gate = RecordingGate(base=0.15, cap=0.2)
    out = tmp_path / "t.jsonl"
    result = export_trace(
        url, (0, 3), out, options=ExportOptions(page_limit=5, timeout=10.0), gate=gate
    )
    assert out.read_bytes() == baseline
    assert gate.delays == [0.15, 0.2]  # base, then 2*base capped at 0.2
    assert result.fetch_backoff_pauses == 2 == gate.pauses and result.fetch_errors == 2
    assert len(gate.pausers) == 1
    assert gate.sleepers - gate.pausers, "workers that never failed should have paused too"


def test_progress_lines_on_a_non_terminal(
    healthy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    out = tmp_path / "p.jsonl"
    assert export_trace(healthy, (0, 3), out, options=opts(progress=True)).ok
    err = capsys.readouterr().err.splitlines()
    line = re.compile(r"^export 0-3: \d+(/\d+)? records( \(\d+%\))?, \S+ elapsed$")
    assert err and all(line.match(x) for x in err), err
    out.unlink()
    assert export_trace(healthy, (0, 3), out, options=opts(progress=False)).ok
    assert capsys.readouterr().err == ""


PARTICIPANTS = "/productscience/inference/inference/participant"
GROUP_0 = "/productscience/inference/inference/epoch_group_data/0"


def test_a_newer_chains_fields_are_listed_by_path_not_dropped_silently(
    node: Node, tmp_path: Path
) -> None:
    """A node of a newer chain answers fields keepersim's protos do not have, nested ones and
    ones inside lists too: the export goes on and the result names each one by path, per record
    kind (list indices as ``[]``)."""
    with node.chain.read() as k:
        group = k.get_epoch_group(0, "")
    assert group is not None and group.validation_weights[0].ml_nodes
    member = group.validation_weights[0].member_address  # the participants line: members only
    participant = {
        "index": member,
        "address": member,
        "weight": 10,
        "status": "ACTIVE",
        "coin_balance": "5",  # the chain's own field: known
        "current_epoch_stats": {"inference_count": "3", "future_stat": "7"},
        "hardware_nodes": [{"node_id": "a", "hardware": "H100"}],
    }
    body = {"participant": [participant], "pagination": {"next_key": None, "total": "1"}}
    group_json = compute_chain_json(group)
    for weight in group_json["validation_weights"]:
        for ml_node in weight["ml_nodes"]:
            ml_node["hardware"] = "A100"
    app = Rule(
        Rule(
            create_app(node.chain),
            lambda path, query: path == PARTICIPANTS,
            200,
            json.dumps(body).encode(),
        ),
        lambda path, query: path == GROUP_0 and query == "",
        200,
        json.dumps({"epoch_group_data": group_json}).encode(),
    )
    out = tmp_path / "t.jsonl"
    result = export_trace(node.serve(app), (0, 3), out, options=FAST)
    assert result.ok
    assert result.to_dict()["unknown_fields"] == {
        "Participant": ["current_epoch_stats.future_stat", "hardware_nodes"],
        "EpochGroupData": ["validation_weights[].ml_nodes[].hardware"],
    }
    text = out.read_text()
    line = next(line for line in text.splitlines() if '"participants"' in line[:40])
    assert f'"{member}"' in line and '"coin_balance":"5"' in line
    assert "H100" not in text and "A100" not in text and "future_stat" not in text


def test_a_bad_value_stops_the_export_naming_the_field(node: Node, tmp_path: Path) -> None:
    body = {"epochPerformanceSummary": [{"epoch_index": "1", "inference_count": "many"}]}
    rule = Rule(
        create_app(node.chain),
        lambda path, query: path == SUMMARY_1,
        200,
        json.dumps(body).encode(),
    )
    url = node.serve(rule)
    with pytest.raises(ExportError) as info:
        export_trace(url, (0, 3), tmp_path / "t.jsonl", options=FAST)
    message = str(info.value)
    assert message.startswith(f"GET {url}{SUMMARY_1}: inference_count: expected a uint64")
    assert message.endswith("(as EpochPerformanceSummary)")


@pytest.mark.parametrize("epochs", [(0, 3), (1, 2)])
def test_an_export_from_keepersim_serve_replays_with_no_mismatch(
    healthy: str, tmp_path: Path, epochs: tuple[int, int]
) -> None:
    """As-recorded replay of an export from ``keepersim serve``: from genesis (every summary
    compared) and mid-chain (the first epoch's summary is left out, the next one compared)."""
    from keepersim.replay.as_recorded import replay_as_recorded

    out = tmp_path / "t.jsonl"
    assert export_trace(healthy, epochs, out, options=FAST).ok
    report = replay_as_recorded(out, policies=["gonka"])
    assert report.ok and report.summary_mismatch_count == 0
    assert report.status_mismatches.count == 0
    expected = [e for e in range(epochs[0], epochs[1] + 1) if e < 3 and (e == 0 or e > epochs[0])]
    assert len(report.summaries_checked) == len(expected) > 0
