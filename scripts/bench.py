"""keepersim benchmarks. Prints one JSON object; costs are also given in units of a raw LevelDB
batched put measured in the same run (these machines are noisy, ratios are what to compare).

    python scripts/bench.py [--quick] [--only NAME ...]

Accuracy benchmark (not run here, minutes to hours): the what-if calibration against simulate,
scripts/calibrate_what_if.py; its figure is docs/results/what-if-calibration/ (table.md,
results.json, plot.png), described in docs/what-if.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's keepersim, whatever PYTHONPATH says
    sys.path.insert(0, str(ROOT))

import plyvel  # noqa: E402

from keepersim.chain import Chain  # noqa: E402
from keepersim.module.genesis import compute_genesis  # noqa: E402
from keepersim.types.messages import MLNodeInfo, Participant  # noqa: E402
from keepersim.types.params import get_default_params  # noqa: E402
from keepersim.types.pb.inference.inference.tx_pb2 import (  # noqa: E402
    MsgFinishInference,
    MsgStartInference,
)
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis  # noqa: E402
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes  # noqa: E402

Bench = Callable[[argparse.Namespace, dict[str, Any]], dict[str, Any]]
BENCHES: dict[str, Bench] = {}


def bench(name: str) -> Callable[[Bench], Bench]:
    def register(fn: Bench) -> Bench:
        BENCHES[name] = fn
        return fn

    return register


def make_genesis(n: int, policy: str = "gonka", epoch_length: int = 1_000_000) -> Genesis:
    params = get_default_params()
    epoch = params.params.epoch_params
    epoch.epoch_length = epoch_length
    # The shortest PoC the chain accepts; every node keeps serving during it.
    epoch.poc_stage_duration = 1
    epoch.poc_exchange_duration = 0
    epoch.poc_validation_delay = 0
    epoch.poc_validation_duration = 1
    epoch.set_new_validators_delay = 0
    params.params.validation_params.expiration_blocks = 150
    params.extension_params.health_params.policy = policy
    params.extension_params.sprt_enabled = policy == "sprt"
    node = MLNodeInfo(node_id="n0", timeslot_allocation=[True, True])
    participants = []
    for i in range(n):
        address = f"gonka1bench{i:06d}"
        participants.append(
            (
                Participant(address=address, weight=100 + (i * 7919) % 5000),
                ParticipantNodes(address=address, models=["m"], ml_nodes=[node]),
            )
        )
    return compute_genesis("keepersim-bench", params, participants)


@bench("raw_put")
def bench_raw_put(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """The unit: one put in a plyvel write batch of 1,000, keys 20-40 bytes, values ~60 bytes,
    in CPU time (the benchmarks' figures are CPU time in this unit)."""
    n = 50_000 if args.quick else 200_000
    times = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            db = plyvel.DB(d, create_if_missing=True)
            value = os.urandom(60)
            t0 = time.process_time()
            for start in range(0, n, 1000):
                with db.write_batch() as wb:
                    for i in range(start, start + 1000):
                        wb.put(b"\x0einference-%012d" % i, value)
            times.append((time.process_time() - t0) / n)
            db.close()
    unit = min(times)
    return {"seconds_per_put": unit, "puts_per_second": 1 / unit}


class SyntheticLoad:
    """The synthetic request stream, resumable: finishes still pending and the miss counter carry
    over between calls, so driving a chain in chunks is the same workload as in one go."""

    def __init__(self, per_block: int, miss_every: int = 31, latency: int = 2) -> None:
        self.per_block = per_block
        self.miss_every = miss_every
        self.latency = latency
        self.pending: dict[int, list[MsgFinishInference]] = {}
        self.req = 0

    def process_blocks(self, chain: Chain, blocks: int) -> int:
        """Deliver ``blocks`` blocks; return the number of inferences started."""
        first = self.req
        start_h = chain.height + 1
        for h in range(start_h, start_h + blocks):
            txs: list[Any] = self.pending.pop(h, [])
            for i in range(self.per_block):
                self.req += 1
                rid = f"req-{h}-{i}"
                sel = chain.get_random_executor("m", rid)
                txs.append(
                    MsgStartInference(
                        inference_id=rid, model="m", assigned_to=sel.address, creator="ta"
                    )
                )
                if self.req % self.miss_every:
                    self.pending.setdefault(h + self.latency, []).append(
                        MsgFinishInference(inference_id=rid, executed_by=sel.address)
                    )
            result = chain.deliver_block(txs)
            if result.get_failed():
                raise RuntimeError(f"bench block {h} rejected a message: {result.get_failed()[0]}")
        return self.req - first


def run_synthetic(
    chain: Chain, blocks: int, per_block: int, miss_every: int = 31, latency: int = 2
) -> int:
    """Drive ``per_block`` inferences a block; every ``miss_every``-th is never finished."""
    return SyntheticLoad(per_block, miss_every, latency).process_blocks(chain, blocks)


@dataclass
class Lockstep:
    """Wall time, CPU time (this process, LevelDB's threads included) and work units per runner."""

    wall: float = 0.0
    cpu: float = 0.0
    units: int = 0
    # CPU seconds per work unit of each round (one chunk of every runner).
    rounds: list[float] = field(default_factory=list)


def compute_median_ratio(runner: Lockstep, base: Lockstep) -> float:
    """Median over rounds of the per-unit CPU ratio: a load spike spoils a round, not the
    figure."""
    return statistics.median(r / b for r, b in zip(runner.rounds, base.rounds, strict=True))


def run_lockstep(
    runners: dict[str, Callable[[int], int]], blocks: int, chunk: int
) -> dict[str, Lockstep]:
    """Run each ``runner(n) -> work units`` for ``blocks`` blocks in chunks, in a rotating turn,
    timing each runner's chunks: load on the machine hits all of them alike, so their ratios
    hold where one-after-another runs do not."""
    names = list(runners)
    out = {name: Lockstep() for name in names}
    for k, start in enumerate(range(0, blocks, chunk)):
        n = min(chunk, blocks - start)
        turn = k % len(names)
        for name in names[turn:] + names[:turn]:
            t0, c0 = time.perf_counter(), time.process_time()
            units = runners[name](n)
            cpu = time.process_time() - c0
            out[name].wall += time.perf_counter() - t0
            out[name].cpu += cpu
            out[name].units += units
            out[name].rounds.append(cpu / units)
    return out


# bench's module workload: this many participants, this many inferences a block, timed in
# lockstep turns of this many blocks after a warm-up that fills the expiry window.
MODULE_PARTICIPANTS = 150
MODULE_PER_BLOCK = 5
MODULE_CHUNK = 20
MODULE_WARM_UP = 200


def run_module_workload(chains: dict[str, Chain], blocks: int) -> dict[str, Lockstep]:
    """The module workload on each chain (each its own SyntheticLoad): the warm-up, then
    ``blocks`` blocks in lockstep (run_lockstep)."""
    loads = {name: SyntheticLoad(MODULE_PER_BLOCK) for name in chains}
    for name, chain in chains.items():
        loads[name].process_blocks(chain, MODULE_WARM_UP)
    return run_lockstep(
        {
            name: functools.partial(loads[name].process_blocks, chain)
            for name, chain in chains.items()
        },
        blocks,
        MODULE_CHUNK,
    )


@bench("module_throughput")
def bench_module(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """150 participants, 5 inferences a block, a LevelDB commit every block; the policies in
    lockstep (run_module_workload)."""
    unit = out["raw_put"]["seconds_per_put"]
    blocks = 600 if args.quick else 3000
    policies = list(args.policies or ["gonka"])
    with tempfile.TemporaryDirectory() as d:
        chains = {
            p: Chain.open(Path(d) / p, genesis=make_genesis(MODULE_PARTICIPANTS, p))
            for p in policies
        }
        try:
            timed = run_module_workload(chains, blocks)
        finally:
            for chain in chains.values():
                chain.close()
    result: dict[str, Any] = {}
    for p, t in timed.items():
        per_inf = t.wall / t.units
        result[p] = {
            "inferences": t.units,
            "seconds_per_inference": per_inf,
            "cpu_seconds_per_inference": t.cpu / t.units,
            "inferences_per_second": t.units / t.wall,
            "raw_put_units_per_inference": t.cpu / t.units / unit,
        }
    if "none" in result:
        base = result["none"]["seconds_per_inference"]
        base_cpu = result["none"]["cpu_seconds_per_inference"]
        for p, r in result.items():
            r["ratio_to_none"] = r["seconds_per_inference"] / base
            r["cpu_ratio_to_none"] = r["cpu_seconds_per_inference"] / base_cpu
            r["median_round_cpu_ratio_to_none"] = compute_median_ratio(timed[p], timed["none"])
    return {
        "goal_units": 20,
        "goal_ratio_to_none": 1.5,
        "method": (
            f"lockstep: {MODULE_CHUNK}-block chunks per policy in rotating turn, timed per policy "
            "(wall and CPU time; on a loaded machine cpu_ratio_to_none is the steadier figure, "
            "and median_round_cpu_ratio_to_none, the median over rounds, the steadiest)"
        ),
        "policies": result,
    }


def process_empty_blocks(chain: Chain, n: int) -> int:
    for _ in range(n):
        chain.deliver_block([])
    return n


@bench("idle_block")
def bench_idle(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """An empty block's cost must not grow with participant count (both chains in lockstep)."""
    unit = out["raw_put"]["seconds_per_put"]
    sizes = ("150", "10000")
    with tempfile.TemporaryDirectory() as d:
        chains = {n: Chain.open(Path(d) / n, genesis=make_genesis(int(n))) for n in sizes}
        try:
            for chain in chains.values():
                process_empty_blocks(chain, 50)
            timed = run_lockstep(
                {n: functools.partial(process_empty_blocks, chains[n]) for n in sizes},
                300 if args.quick else 2000,
                50,
            )
        finally:
            for chain in chains.values():
                chain.close()
    res: dict[str, Any] = {
        n: {
            "seconds_per_block": t.wall / t.units,
            "cpu_seconds_per_block": t.cpu / t.units,
            "raw_put_units": t.cpu / t.units / unit,
        }
        for n, t in timed.items()
    }
    res["ratio_10000_to_150"] = timed["10000"].wall / timed["150"].wall
    res["cpu_ratio_10000_to_150"] = timed["10000"].cpu / timed["150"].cpu
    res["goal_ratio"] = 2.0
    return res


@bench("selection_latency")
def bench_selection(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """get_random_executor p50 / p99 while blocks with outcomes commit between calls."""
    res: dict[str, Any] = {}
    for n in (150, 1000, 10_000):
        with tempfile.TemporaryDirectory() as d:
            chain = Chain.open(Path(d), genesis=make_genesis(n))
            run_synthetic(chain, 30, 5)
            lat: list[float] = []
            req = 0
            for _ in range(60 if args.quick else 200):
                for _ in range(20):
                    req += 1
                    t0 = time.perf_counter()
                    chain.get_random_executor("m", f"q-{req}")
                    lat.append(time.perf_counter() - t0)
                run_synthetic(chain, 1, 5)
            chain.close()
        lat.sort()
        res[str(n)] = {
            "p50_us": lat[len(lat) // 2] * 1e6,
            "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
            "mean_us": statistics.fmean(lat) * 1e6,
            "calls": len(lat),
        }
    return res


@bench("simulation_throughput")
def bench_simulation(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """Scenario simulation (driver + chain) on mainnet_like under gonka, memory vs LevelDB:
    inferences per CPU-second, and CPU per inference in raw-put units."""
    import dataclasses

    from keepersim.runs.task import make_task, run_task
    from keepersim.sim.suite import get_builtin_scenario

    scenario = get_builtin_scenario("mainnet_like", 1)
    scenario = dataclasses.replace(scenario, blocks=2000 if args.quick else 6000)
    res: dict[str, Any] = {"scenario": "mainnet_like", "blocks": scenario.blocks}
    hashes = set()
    unit = out["raw_put"]["seconds_per_put"]
    for store in ("memory", "leveldb"):
        c0 = time.process_time()
        result = run_task(make_task(scenario, "gonka", scenario.seed, store=store))
        cpu = time.process_time() - c0
        hashes.add(result["app_hash"])
        res[store] = {
            "inferences": result["inferences"],
            "inferences_per_cpu_second": result["inferences"] / cpu,
            "raw_put_units_per_inference": cpu / result["inferences"] / unit,
        }
    res["same_app_hash"] = len(hashes) == 1
    return res


def run_replay_child(trace: str, store_dir: str, policies: str) -> dict[str, Any]:
    """Replay in a fresh process so its peak memory (ru_maxrss) is the replay's alone."""
    import subprocess

    code = (
        "import json, resource, sys, time\n"
        "from keepersim.runs.task import run_task\n"
        "from keepersim.runs.traces import make_trace_task\n"
        "t0, c0 = time.perf_counter(), time.process_time()\n"
        "r = run_task(make_trace_task(sys.argv[1], 'as-recorded', sys.argv[3].split(','),"
        " store='leveldb', store_dir=sys.argv[2]))\n"
        "print(json.dumps({'seconds': time.perf_counter() - t0,"
        " 'cpu_seconds': time.process_time() - c0,"
        " 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,"
        " 'inferences': r['recorded']['inferences'], 'blocks': r['blocks'],"
        " 'summary_mismatches': sum(c['mismatches'] for c in r['summaries']['checked']),"
        " 'ok': r['ok']}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, trace, store_dir, policies],
        cwd=ROOT,  # the child imports this checkout's keepersim, from wherever bench.py ran
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@bench("replay")
def bench_replay(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """A calibrated mainnet-like trace (~80k inferences an epoch of 15,391 blocks, ~3.25% misses)
    replayed end to end from JSON lines on LevelDB, with the gonka breaker in shadow."""
    from make_trace import write_trace

    unit = out["raw_put"]["seconds_per_put"]
    sizes = [1] if args.quick else [1, 4]
    if args.headline:
        sizes.append(31)
    res: dict[str, Any] = {"goal_units": 20, "goal_peak_rss_mb": 300}
    for epochs in sizes:
        with tempfile.TemporaryDirectory(prefix="keepersim-replay-") as d:
            trace = Path(d) / "trace.jsonl"
            written = write_trace(trace, epochs, per_epoch=20_000 if args.quick else 80_000)
            r = run_replay_child(str(trace), str(Path(d) / "store"), "gonka")
        r["seconds_per_inference"] = r["seconds"] / max(1, r["inferences"])
        r["cpu_seconds_per_inference"] = r["cpu_seconds"] / max(1, r["inferences"])
        # CPU time (these machines are shared): the replay's own, in the same machine's units.
        r["raw_put_units_per_inference"] = r["cpu_seconds_per_inference"] / unit
        r["misses"] = written["misses"]
        res[f"{epochs}_epochs"] = r
    return res


@bench("http")
def bench_http(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """get_random_executor over HTTP (16 clients, chain advancing) and export throughput."""
    from bench_server import (
        bench_export,
        bench_random_executor,
        make_demo_scenario,
        simulate_chain,
    )

    res: dict[str, Any] = {
        "random_executor_16_clients": bench_random_executor(
            clients=16, duration=5.0 if args.quick else 15.0, block_rate=20.0
        )
    }
    with tempfile.TemporaryDirectory(prefix="keepersim-bench-") as tmp:
        chain_dir, _ = simulate_chain(
            tmp, make_demo_scenario(participants=40, blocks=600), trace=False
        )
        res["export_healthy"] = bench_export(chain_dir=chain_dir)
        res["export_30pct_retryable_faults"] = bench_export(
            chain_dir=chain_dir, faults="429=0.15,503=0.15"
        )
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke check)")
    parser.add_argument("--only", nargs="*", default=None, help=f"subset of {sorted(BENCHES)}")
    parser.add_argument("--policies", nargs="*", default=None, help="policies for throughput")
    parser.add_argument(
        "--headline",
        action="store_true",
        help="also replay the full 31-epoch, ~2.5M-inference trace",
    )
    args = parser.parse_args()
    if args.policies is None:
        from keepersim.types.policies import POLICY_NAMES

        args.policies = sorted(POLICY_NAMES)
    out: dict[str, Any] = {"python": sys.version.split()[0], "quick": args.quick}
    wanted = args.only or list(BENCHES)
    for name, fn in BENCHES.items():
        if name == "raw_put" or name in wanted:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            out[name] = fn(args, out)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
