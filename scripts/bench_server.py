"""Measurements of the server and the exporter: ``python scripts/bench_server.py``, or imported by
``scripts/bench.py``; the exporter tests build their demo chain with :func:`simulate_chain`.

* :func:`bench_random_executor`: ``get_random_executor`` over HTTP from ``clients`` threads
  while the served chain advances (a scenario runner in the server process): throughput,
  p50 / p99 latency, errors, and selection-table recomputes per cache expiry (one expiry per
  block).
* :func:`bench_export`: ``keepersim export`` of a simulated chain from a local ``keepersim
  serve``, healthy and with retryable faults: records per second, fetch errors, back-off pauses.

The server runs in a subprocess (``python -m keepersim.cli serve``) so that clients and server
do not share an interpreter lock; loopback only. Figures depend heavily on the machine and its
load: report them with the machine.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's keepersim, whatever PYTHONPATH says
    sys.path.insert(0, str(ROOT))

from keepersim.sim.scenario import Scenario  # noqa: E402

__all__ = [
    "bench_export",
    "bench_random_executor",
    "get_free_port",
    "make_demo_scenario",
    "serve_subprocess",
    "simulate_chain",
]

CHAIN_PREFIX = "/productscience/inference/inference"


def get_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_demo_scenario(
    participants: int = 40,
    blocks: int = 600,
    epoch_length: int = 200,
    arrivals_per_block: float = 4.0,
    seed: int = 1,
) -> Scenario:
    """A small generated fleet with degraded nodes (so health states change)."""
    from keepersim.sim.generate import generate_scenario

    return generate_scenario(
        "bench",
        seed,
        participants=participants,
        blocks=blocks,
        epoch_length=epoch_length,
        arrivals_per_block=arrivals_per_block,
        degraded_share=0.2,
        degraded_miss=(0.3, 0.6),
        latency=(1, 5),
        expiration_blocks=20,
    )


def simulate_chain(
    folder: str | os.PathLike[str],
    scenario: Scenario,
    policy: str = "gonka",
    *,
    trace: bool = True,
) -> tuple[Path, Path | None]:
    """Run ``scenario`` into a LevelDB chain at ``folder/chain`` (and its trace at
    ``folder/sim.jsonl``); returns both paths."""
    import dataclasses

    from keepersim.runs.task import make_task, run_task

    base = Path(folder)
    chain_dir = base / "chain"
    trace_path = base / "sim.jsonl" if trace else None
    task = make_task(scenario, policy, scenario.seed, store="leveldb")
    run_task(
        dataclasses.replace(
            task,
            store_dir=str(chain_dir),
            trace_out=None if trace_path is None else str(trace_path),
        )
    )
    return chain_dir, trace_path


@contextmanager
def serve_subprocess(args: Sequence[str], timeout: float = 30.0) -> Iterator[str]:
    """``keepersim serve ARGS --port P`` in a subprocess; yields its base URL."""
    port = get_free_port()
    cmd = [sys.executable, "-m", "keepersim.cli", "serve", *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"keepersim serve exited: {err.strip()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/keepersim/v1/status")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"keepersim serve did not answer within {timeout:g}s"
                    ) from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def _get_json(port: int, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return json.loads(response.read())
    finally:
        conn.close()


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def bench_random_executor(
    *,
    clients: int = 16,
    duration: float = 10.0,
    block_rate: float | None = 20.0,
    scenario: Scenario | None = None,
    policy: str = "gonka",
    model: str = "default",
) -> dict[str, Any]:
    """``clients`` threads calling ``get_random_executor`` for ``duration`` seconds against a
    served scenario advancing at ``block_rate`` blocks/s (None: as fast as possible)."""
    scenario = scenario or make_demo_scenario(blocks=100_000)
    with tempfile.TemporaryDirectory(prefix="keepersim-bench-") as tmp:
        from keepersim.sim.scenario import save_scenario

        path = Path(tmp) / "scenario.json"
        save_scenario(scenario, path)
        args = ["--scenario", str(path), "--policy", policy]
        if block_rate is not None:
            args += ["--block-rate", str(block_rate)]
        with serve_subprocess(args) as url:
            port = int(url.rsplit(":", 1)[1])
            before = _get_json(port, "/keepersim/v1/status")
            latencies: list[list[float]] = [[] for _ in range(clients)]
            errors = [0] * clients
            stop_at = time.monotonic() + duration
            barrier = threading.Barrier(clients)

            def client(i: int) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                barrier.wait()
                n = 0
                while time.monotonic() < stop_at:
                    n += 1
                    t0 = time.perf_counter()
                    try:
                        conn.request(
                            "GET",
                            f"{CHAIN_PREFIX}/get_random_executor?model={model}&request_id=b{i}-{n}",
                        )
                        response = conn.getresponse()
                        response.read()
                        ok = response.status == 200
                    except (OSError, http.client.HTTPException):
                        ok = False
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    latencies[i].append(time.perf_counter() - t0)
                    if not ok:
                        errors[i] += 1
                conn.close()

            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join(duration + 60)
            wall = time.perf_counter() - started
            after = _get_json(port, "/keepersim/v1/status")
    flat = [x for per in latencies for x in per]
    blocks = int(after["height"]) - int(before["height"])
    recomputes = (
        after["caches"]["selection"]["recomputes"] - before["caches"]["selection"]["recomputes"]
    )
    return {
        "clients": clients,
        "duration_seconds": round(wall, 3),
        "requests": len(flat),
        "errors": sum(errors),
        "throughput_rps": round(len(flat) / wall, 1) if wall else 0.0,
        "p50_ms": round(_percentile(flat, 0.50) * 1000, 2),
        "p99_ms": round(_percentile(flat, 0.99) * 1000, 2),
        "blocks_advanced": blocks,
        "block_rate_target": block_rate,
        "table_recomputes": recomputes,
        "recomputes_per_expiry": round(recomputes / blocks, 3) if blocks else None,
        "stale_serves": after["caches"]["selection"]["stale_serves"]
        - before["caches"]["selection"]["stale_serves"],
    }


def bench_export(
    *,
    scenario: Scenario | None = None,
    faults: str | None = None,
    fault_seed: int = 1,
    concurrency: int = 4,
    page_limit: int = 100,
    backoff_base: float = 0.05,
    backoff_cap: float = 1.0,
    chain_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Export every epoch of a simulated chain from ``keepersim serve --chain`` (with
    ``faults``, e.g. ``429=0.15,503=0.15``) and report the exporter's result and rate."""
    from keepersim.export.export_run import ExportOptions
    from keepersim.export.exporter import export_trace

    with tempfile.TemporaryDirectory(prefix="keepersim-bench-") as tmp:
        if chain_dir is None:
            chain_dir, _ = simulate_chain(tmp, scenario or make_demo_scenario(), trace=False)
        args = ["--chain", os.fspath(chain_dir)]
        if faults:
            args += ["--faults", faults, "--fault-seed", str(fault_seed)]
        with serve_subprocess(args) as url:
            port = int(url.rsplit(":", 1)[1])
            info = _get_json(port, f"{CHAIN_PREFIX}/epoch_info")
            latest = int(info["latest_epoch"]["index"])
            options = ExportOptions(
                concurrency=concurrency,
                page_limit=page_limit,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            )
            result = export_trace(url, (0, latest), Path(tmp) / "export.jsonl", options=options)
            out = result.to_dict()
            out["faults"] = faults
            out["backoff_base"] = backoff_base
            out["backoff_cap"] = backoff_cap
            return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run both benchmarks with small defaults and print the figures as JSON."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--block-rate", type=float, default=20.0)
    parser.add_argument("--export-participants", type=int, default=40)
    parser.add_argument("--export-blocks", type=int, default=600)
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {
        "random_executor": bench_random_executor(
            clients=args.clients, duration=args.duration, block_rate=args.block_rate
        ),
    }
    with tempfile.TemporaryDirectory(prefix="keepersim-bench-") as tmp:
        scenario = make_demo_scenario(
            participants=args.export_participants, blocks=args.export_blocks
        )
        chain_dir, _ = simulate_chain(tmp, scenario, trace=False)
        figures["export_healthy"] = bench_export(chain_dir=chain_dir)
        figures["export_faults_30pct"] = bench_export(
            chain_dir=chain_dir, faults="429=0.15,503=0.15"
        )
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
