"""Load: 16+ clients call get_random_executor over HTTP while a scenario runner advances the
chain (health states changing). No errors, and no torn reads: every answer's height is a
committed block and its executor is exactly the draw from that height's selection table."""

from __future__ import annotations

import threading
import time

import httpx

from keepersim.chain import BlockResult
from keepersim.keeper.selection import SelectionTable, compute_draw, compute_selection_seed
from keepersim.server.app import HEIGHT_HEADER, BackgroundServer, create_app
from keepersim.server.metrics import ServerMetrics
from keepersim.server.runner import BlockSink, ScenarioRunner, open_scenario_chain
from keepersim.sim.generate import generate_scenario

P = "/productscience/inference/inference"
CLIENTS = 16
REQUESTS_PER_CLIENT = 40
TIME_LIMIT = 60.0
MODEL = "default"


def test_concurrent_selection_while_blocks_advance() -> None:
    scenario = generate_scenario(
        "load",
        5,
        participants=30,
        blocks=400,
        epoch_length=100,
        arrivals_per_block=4,
        expiration_blocks=10,
        latency=(1, 4),
        degraded_share=0.3,
        degraded_miss=(0.5, 0.9),
    )
    chain = open_scenario_chain(scenario, "gonka")
    metrics = ServerMetrics()
    sink = BlockSink(chain, metrics)
    tables: dict[int, SelectionTable] = {0: chain.get_selection_table(MODEL)}

    def record(result: BlockResult) -> None:
        # called in the delivering thread right after the commit, before the next block
        tables[result.height] = chain.get_selection_table(MODEL)

    sink.add_listener(record)
    runner = ScenarioRunner(sink, scenario, block_rate=150.0)
    app = create_app(chain, metrics=metrics, sink=sink, runner=runner)
    answers: list[list[tuple[str, int, str]]] = [[] for _ in range(CLIENTS)]
    failures: list[str] = []
    barrier = threading.Barrier(CLIENTS)

    with BackgroundServer(app) as server:
        deadline = time.monotonic() + TIME_LIMIT

        def client(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=20) as http:
                http.get("/keepersim/v1/status")
                barrier.wait(30)
                for n in range(REQUESTS_PER_CLIENT):
                    if time.monotonic() > deadline:
                        failures.append(f"client {i}: time limit")
                        return
                    rid = f"load-{i}-{n}"
                    try:
                        r = http.get(
                            f"{P}/get_random_executor", params={"model": MODEL, "request_id": rid}
                        )
                    except httpx.HTTPError as exc:
                        failures.append(f"{rid}: {type(exc).__name__}: {exc}")
                        continue
                    if r.status_code != 200:
                        failures.append(f"{rid}: HTTP {r.status_code} {r.text[:200]}")
                        continue
                    answers[i].append(
                        (rid, int(r.headers[HEIGHT_HEADER]), r.json()["executor"]["address"])
                    )

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIME_LIMIT + 30)
        height_after = chain.height
        runner.stop(10)

    assert not failures, failures[:5]
    flat: list[tuple[str, int, str]] = [a for per in answers for a in per]
    assert len(flat) == CLIENTS * REQUESTS_PER_CLIENT
    heights = {h for _, h, _ in flat}
    assert len(heights) > 3, "the chain should have advanced during the load"
    assert height_after > 3
    torn = []
    for rid, height, address in flat:
        table = tables.get(height)
        if table is None:
            torn.append((rid, height, "height was never committed"))
            continue
        if address not in table.addresses:
            torn.append((rid, height, f"{address} not in that height's table"))
            continue
        expected = compute_draw(table, compute_selection_seed(chain.chain_id, height, MODEL, rid))
        if address != expected:
            torn.append((rid, height, f"{address} != draw {expected}"))
    assert not torn, torn[:5]
    answered = sorted(heights)
    changes_in_range = sum(
        1
        for h in range(answered[0] + 1, answered[-1] + 1)
        if tables[h].addresses != tables[h - 1].addresses
    )
    assert changes_in_range >= 1, "health states should change while clients read"
    # exactly one recompute per (height, model): each answered height was computed once
    stats = app.state.keepersim.selection_cache.stats()
    assert stats.recomputes == len(heights)
    assert stats.refresh_failures == 0 and stats.unavailable == 0
    chain.close()
