"""The server's single-flight caches: one recompute per (height, model) however many clients
arrive at a new block, stale-while-refresh, a bounded cold-start wait ending in 503, a failed
refresh keeping the previous table, and the metrics they feed."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from keepersim.chain import Chain
from keepersim.keeper.selection import SelectionTable
from keepersim.server.app import HEIGHT_HEADER, BackgroundServer, ServerConfig, create_app
from keepersim.types.pb.inference.inference.tx_pb2 import MsgStartInference

P = "/productscience/inference/inference"
CLIENTS = 16


def metric(text: str, name: str, **labels: str) -> float:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name + ("{" + inner + "}" if inner else "")) + r" ([0-9.e+-]+)"
    found = re.search(pattern, text)
    assert found is not None, (name, labels)
    return float(found.group(1))


def make_clients(url: str, n: int) -> list[httpx.Client]:
    clients = [httpx.Client(base_url=url, timeout=20) for _ in range(n)]
    for client in clients:
        client.get("/keepersim/v1/status")  # connected before any burst
    return clients


def burst(clients: list[httpx.Client], path: str, timeout: float = 20.0) -> list[httpx.Response]:
    """One GET per client, in threads released together by a barrier."""
    n = len(clients)
    barrier = threading.Barrier(n)
    out: list[httpx.Response | BaseException] = [RuntimeError("not run")] * n

    def run(i: int) -> None:
        barrier.wait(timeout)
        try:
            out[i] = clients[i].get(path)
        except BaseException as exc:  # reported below
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
    responses = []
    for r in out:
        assert isinstance(r, httpx.Response), r
        responses.append(r)
    return responses


def start(i: int, assigned: str) -> MsgStartInference:
    return MsgStartInference(
        creator="req", inference_id=f"c-{i}", model="m", requested_by="req", assigned_to=assigned
    )


def test_sixteen_clients_at_a_new_block_cause_one_recompute(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(6))
    calls: dict[int, int] = {}
    lock = threading.Lock()

    def counted(model: str) -> SelectionTable:
        time.sleep(0.05)  # a recompute long enough for the others to pile up
        table = chain.get_selection_table(model)
        with lock:
            calls[table.height] = calls.get(table.height, 0) + 1
        return table

    app = create_app(chain, table_compute=counted)
    state = app.state.keepersim
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        clients = make_clients(server.url, CLIENTS)
        client.get(f"{P}/get_random_executor", params={"model": "m"})  # cold start
        for round_ in range(5):
            before = state.selection_cache.stats()
            r = client.post(
                "/keepersim/v1/blocks",
                json=[
                    {
                        "type": "MsgStartInference",
                        "creator": "r",
                        "inference_id": f"x{round_}",
                        "model": "m",
                        "assigned_to": "p1",
                    }
                ],
            )
            height = r.json()["height"]
            responses = burst(clients, f"{P}/get_random_executor?model=m")
            assert all(r.status_code == 200 for r in responses)
            heights = {int(r.headers[HEIGHT_HEADER]) for r in responses}
            # the new table or, while it was recomputed, the previous block's (stale)
            assert heights <= {height - 1, height} and height in heights or heights == {height}
            after = state.selection_cache.stats()
            assert after.recomputes - before.recomputes == 1
            assert (
                after.stale_serves + after.hits - before.stale_serves - before.hits == CLIENTS - 1
            )
            assert calls[height] == 1
        text = client.get("/metrics").text
        assert (
            metric(text, "keepersim_cache_events_total", cache="selection", event="recompute") == 6
        )
        assert metric(text, "keepersim_cache_events_total", cache="selection", event="stale") >= 1
        for c in clients:
            c.close()
    chain.close()


def test_cold_start_waits_then_503(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(4))
    release = threading.Event()

    def slow(model: str) -> SelectionTable:
        release.wait(10)
        return chain.get_selection_table(model)

    app = create_app(chain, config=ServerConfig(cold_wait=0.3), table_compute=slow)
    with BackgroundServer(app) as server:
        clients = make_clients(server.url, 6)
        timer = threading.Timer(1.5, release.set)
        timer.start()
        try:
            started = time.monotonic()
            responses = burst(clients, f"{P}/get_random_executor?model=m")
            elapsed = time.monotonic() - started
        finally:
            timer.cancel()
            release.set()
        codes = sorted(r.status_code for r in responses)
        assert codes == [200] + [503] * 5, codes
        for r in responses:
            if r.status_code == 503:
                body = r.json()
                assert body["code"] == 14 and r.headers["retry-after"] == "1"
                assert "'m'" in body["message"] and "0.3s" in body["message"]
                assert "retry later" in body["message"]
        assert elapsed < 8
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert client.get(f"{P}/get_random_executor", params={"model": "m"}).status_code == 200
            text = client.get("/metrics").text
        assert (
            metric(text, "keepersim_cache_events_total", cache="selection", event="unavailable")
            == 5
        )
        assert (
            metric(text, "keepersim_cache_events_total", cache="selection", event="cold_wait") == 5
        )
    chain.close()


def test_failed_refresh_keeps_previous_table(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(4))
    failing = threading.Event()

    def flaky(model: str) -> SelectionTable:
        if failing.is_set():
            raise OSError("store hiccup")
        return chain.get_selection_table(model)

    app = create_app(chain, table_compute=flaky)
    state = app.state.keepersim
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        url = f"{P}/get_random_executor"
        assert client.get(url, params={"model": "m"}).headers[HEIGHT_HEADER] == "0"
        failing.set()
        client.post("/keepersim/v1/blocks", json=[])
        client.post("/keepersim/v1/blocks", json=[])
        r = client.get(url, params={"model": "m"})
        assert r.status_code == 200 and r.headers[HEIGHT_HEADER] == "0"  # previous table
        stats = state.selection_cache.stats()
        assert stats.refresh_failures == 1
        # within the retry window (one block) no new attempt
        client.get(url, params={"model": "m"})
        assert state.selection_cache.stats().recomputes == stats.recomputes
        failing.clear()
        client.post("/keepersim/v1/blocks", json=[])
        r = client.get(url, params={"model": "m"})
        assert r.headers[HEIGHT_HEADER] == "3"
        text = client.get("/metrics").text
        assert (
            metric(text, "keepersim_cache_events_total", cache="selection", event="refresh_failed")
            == 1
        )
    chain.close()


def test_selection_errors_are_answers_not_failures(make_genesis: Any) -> None:
    """An unknown model is a 404 answer (cached per block), not a refresh failure."""
    chain = Chain.open(memory=True, genesis=make_genesis(3))
    app = create_app(chain)
    state = app.state.keepersim
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(3):
            r = client.get(f"{P}/get_random_executor", params={"model": "other"})
            assert r.status_code == 404 and "other" in r.json()["message"]
        stats = state.selection_cache.stats()
        assert stats.recomputes == 1 and stats.refresh_failures == 0
    chain.close()


def test_reputation_cache_one_compute_per_epoch(make_genesis: Any) -> None:
    chain = Chain.open(memory=True, genesis=make_genesis(4))
    app = create_app(chain)
    state = app.state.keepersim
    with BackgroundServer(app) as server:
        responses = burst(make_clients(server.url, 8), "/keepersim/v1/reputation/0")
        assert all(r.status_code == 200 for r in responses)
        assert {tuple(sorted(r.json()["reputation"])) for r in responses} == {
            ("p0", "p1", "p2", "p3")
        }
        stats = state.reputation_cache.stats()
        assert stats.recomputes == 1 and stats.hits + stats.cold_waits == 7
    chain.close()


@pytest.mark.parametrize("model", ["m", ""])
def test_table_answers_follow_blocks(make_genesis: Any, model: str) -> None:
    """Each new block expires the table: the reported height follows the chain."""
    chain = Chain.open(memory=True, genesis=make_genesis(3))
    app = create_app(chain)
    get_table: Callable[[str], SelectionTable] = app.state.keepersim.get_table
    for h in range(1, 6):
        chain.deliver_block([start(h, "p0")])
        assert get_table(model).height == h
    chain.close()
