"""Calibrate the what-if replay against the ground truth (issue 13 item 4).

For each built-in scenario x seed: ``simulate --policy none --trace-out`` records a trace; what-if
replays it under every chain policy; ``simulate`` runs each policy for real with the same seed.
The table is what-if's relative error of the miss rate per (scenario, seed, policy) cell and the
rank agreement: for each pair of policies whose simulate 95% (Wilson) intervals do not overlap,
does what-if order them the same way?

Every run is cached as one JSON file under ``--work`` (simulate runs by scenario/seed/policy/
blocks, what-if runs also by the estimator's settings), so trying another estimator re-runs only
the what-if replays. Runs go to a process pool of ``--jobs`` workers (default: every core).

    python scripts/calibrate_what_if.py --quick                 # 2 scenarios, 1 seed, 3000 blocks
    python scripts/calibrate_what_if.py --out docs/results/what-if-calibration
    python scripts/calibrate_what_if.py --estimator window_blocks=2000,participant_strength=50

Outputs (``--out``): results.json (every cell), table.md, plot.png, and the summary the what-if
report quotes (``keepersim/replay/calibration.json`` with ``--write-summary``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

POLICIES = (
    "none",
    "gonka",
    "consecutive",
    "trin-additive",
    "trin-multiplicative",
    "sprt",
    "windowed",
)
TOLERANCE = 0.15
QUICK_SCENARIOS = ("steady_degraded", "sudden_outage")
# Scenarios a what-if over a none-trace cannot reproduce: load (capacity) changes the miss rates.
CAPACITY_SCENARIOS = ("overload", "overload_pushback")


from keepersim.replay.calibration import compute_rank_agreement, compute_wilson  # noqa: E402


def _scenario(name: str, seed: int, blocks: int | None) -> Any:
    from keepersim.sim.suite import get_builtin_scenario

    scenario = get_builtin_scenario(name, seed)
    if blocks is not None and blocks < scenario.blocks:
        scenario = dataclasses.replace(scenario, blocks=blocks)
    return scenario


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def run_simulate(
    name: str, seed: int, policy: str, blocks: int | None, trace: str | None, out: str
) -> dict[str, Any]:
    from keepersim.sim.run_loop import run_scenario

    started = time.process_time()
    result = run_scenario(
        _scenario(name, seed, blocks), policy, seed=seed, store="memory", trace_out=trace
    )
    data = {
        "scenario": name,
        "seed": seed,
        "policy": policy,
        "blocks": result.blocks,
        "inferences": result.inferences,
        "misses": result.misses,
        "miss_rate": result.miss_rate,
        "cpu_seconds": round(time.process_time() - started, 2),
    }
    _write_json(Path(out), data)
    return data


def run_what_if(
    trace: str, seed: int, policy: str, settings: dict[str, Any], out: str
) -> dict[str, Any]:
    from keepersim.replay.estimator import estimate_trace
    from keepersim.replay.what_if import replay_what_if

    started = time.process_time()
    _, estimator = estimate_trace(trace, **settings)
    run = replay_what_if(trace, policy, seed=seed, estimator=estimator, store="memory")
    data = {
        "policy": policy,
        "inferences": run["inferences"],
        "misses": run["misses"],
        "miss_rate": run["miss_rate"],
        "recorded_miss_rate": run["recorded"]["miss_rate"],
        "cpu_seconds": round(time.process_time() - started, 2),
    }
    _write_json(Path(out), data)
    return data


def _settings_key(settings: dict[str, Any]) -> str:
    from keepersim.replay.estimator import BehaviourEstimator

    resolved = BehaviourEstimator(0, **settings).get_settings()
    text = json.dumps(resolved, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _parse_settings(text: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key == "prior":
            a, _, b = value.partition(":")
            settings[key] = (float(a), float(b))
        else:
            try:
                settings[key] = int(value)
            except ValueError:
                settings[key] = float(value)
    return settings


def run_calibration(
    scenarios: Sequence[str],
    seeds: Sequence[int],
    policies: Sequence[str],
    blocks: int | None,
    settings: dict[str, Any],
    work: Path,
    jobs: int,
) -> list[dict[str, Any]]:
    """Every (scenario, seed): the simulate and what-if runs (from the cache where they exist)."""
    work.mkdir(parents=True, exist_ok=True)
    tag = f"b{blocks}" if blocks else "full"
    key = _settings_key(settings)

    def sim_path(name: str, seed: int, policy: str) -> Path:
        return work / f"sim-{name}-s{seed}-{tag}-{policy}.json"

    def trace_path(name: str, seed: int) -> Path:
        return work / f"trace-{name}-s{seed}-{tag}.jsonl"

    def wi_path(name: str, seed: int, policy: str) -> Path:
        return work / f"whatif-{name}-s{seed}-{tag}-{key}-{policy}.json"

    cells = [(name, seed) for name in scenarios for seed in seeds]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        sims: dict[tuple[str, int, str], Future[dict[str, Any]]] = {}
        # The recording runs first: what-if waits for them.
        order = sorted(
            ((n, s, p) for n, s in cells for p in policies), key=lambda c: c[2] != "none"
        )
        for name, seed, policy in order:
            path = sim_path(name, seed, policy)
            if path.exists() and (policy != "none" or trace_path(name, seed).exists()):
                continue
            trace = str(trace_path(name, seed)) if policy == "none" else None
            sims[(name, seed, policy)] = pool.submit(
                run_simulate, name, seed, policy, blocks, trace, str(path)
            )
        wis: dict[tuple[str, int, str], Future[dict[str, Any]]] = {}
        for name, seed in cells:
            recording = sims.get((name, seed, "none"))
            if recording is not None:
                recording.result()
            for policy in policies:
                if wi_path(name, seed, policy).exists():
                    continue
                wis[(name, seed, policy)] = pool.submit(
                    run_what_if,
                    str(trace_path(name, seed)),
                    seed,
                    policy,
                    settings,
                    str(wi_path(name, seed, policy)),
                )
        for future in [*sims.values(), *wis.values()]:
            future.result()
    results = []
    for name, seed in cells:
        real = {p: json.loads(sim_path(name, seed, p).read_text()) for p in policies}
        what_if = {p: json.loads(wi_path(name, seed, p).read_text()) for p in policies}
        errors = {
            p: (what_if[p]["miss_rate"] - real[p]["miss_rate"]) / real[p]["miss_rate"]
            if real[p]["miss_rate"]
            else 0.0
            for p in policies
        }
        results.append(
            {
                "scenario": name,
                "seed": seed,
                "capacity_limited": name in CAPACITY_SCENARIOS,
                "blocks": real["none"]["blocks"],
                "simulate": {
                    p: {
                        "miss_rate": real[p]["miss_rate"],
                        "misses": real[p]["misses"],
                        "inferences": real[p]["inferences"],
                        "ci95": list(compute_wilson(real[p]["misses"], real[p]["inferences"])),
                    }
                    for p in policies
                },
                "what_if": {p: what_if[p]["miss_rate"] for p in policies},
                "relative_error": errors,
                "rank": compute_rank_agreement(real, what_if),
            }
        )
    return results


def compute_summary(
    results: Sequence[dict[str, Any]], policies: Sequence[str], settings: dict[str, Any]
) -> dict[str, Any]:
    """Share of cells within the tolerance, rank agreement, and error quantiles per policy."""
    cells = [(r, p) for r in results for p in policies]
    within = [abs(r["relative_error"][p]) <= TOLERANCE for r, p in cells]
    calibratable = [
        abs(r["relative_error"][p]) <= TOLERANCE for r, p in cells if not r["capacity_limited"]
    ]
    per_policy = {}
    for p in policies:
        errs = sorted(abs(r["relative_error"][p]) for r in results if not r["capacity_limited"])
        if not errs:
            continue
        per_policy[p] = {
            "median_abs_relative_error": round(statistics.median(errs), 4),
            "p90_abs_relative_error": round(_quantile(errs, 0.9), 4),
            "mean_relative_error": round(
                statistics.mean(
                    r["relative_error"][p] for r in results if not r["capacity_limited"]
                ),
                4,
            ),
            "cells": len(errs),
        }
    pairs = sum(r["rank"]["separated_pairs"] for r in results)
    disagreements = sum(len(r["rank"]["disagreements"]) for r in results)
    pairs_c = sum(r["rank"]["separated_pairs"] for r in results if not r["capacity_limited"])
    dis_c = sum(len(r["rank"]["disagreements"]) for r in results if not r["capacity_limited"])
    return {
        "estimator": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
        "tolerance": TOLERANCE,
        "scenarios": sorted({r["scenario"] for r in results}),
        "seeds": sorted({r["seed"] for r in results}),
        "blocks": sorted({r["blocks"] for r in results}),
        "cells": len(cells),
        "cells_within": sum(within),
        "share_within": round(sum(within) / len(within), 4) if within else None,
        "calibratable_cells": len(calibratable),
        "calibratable_within": sum(calibratable),
        "calibratable_share_within": (
            round(sum(calibratable) / len(calibratable), 4) if calibratable else None
        ),
        "separated_pairs": pairs,
        "rank_disagreements": disagreements,
        "calibratable_separated_pairs": pairs_c,
        "calibratable_rank_disagreements": dis_c,
        "not_calibratable": list(CAPACITY_SCENARIOS),
        "per_policy": per_policy,
    }


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def format_table(
    results: Sequence[dict[str, Any]], policies: Sequence[str], summary: dict[str, Any]
) -> str:
    lines = [
        "# what-if calibration",
        "",
        f"Estimator: `{json.dumps(summary['estimator'], sort_keys=True)}`; "
        f"scenarios x seeds {summary['seeds']}, blocks {summary['blocks']}.",
        "",
        "Relative error of what-if's miss rate against simulate's real run of the same policy and "
        f"seed (what-if / simulate - 1); `*` marks |error| > {TOLERANCE:.0%}. "
        "Capacity-limited scenarios (flagged `(cap)`) cannot be calibrated by a what-if over a "
        "none-trace: they are counted in the totals, and reported apart.",
        "",
        "| scenario | seed | " + " | ".join(policies) + " | rank (disagree / separated) |",
        "|" + "---|" * (len(policies) + 3),
    ]
    for r in results:
        cells = []
        for p in policies:
            e = r["relative_error"][p]
            cells.append(f"{e:+.1%}{' *' if abs(e) > TOLERANCE else ''}")
        name = r["scenario"] + (" (cap)" if r["capacity_limited"] else "")
        rank = r["rank"]
        lines.append(
            f"| {name} | {r['seed']} | "
            + " | ".join(cells)
            + f" | {len(rank['disagreements'])} / {rank['separated_pairs']} |"
        )
    lines += [
        "",
        f"Cells within {TOLERANCE:.0%}: {summary['cells_within']} / {summary['cells']} "
        f"({summary['share_within']:.1%}); without the capacity-limited scenarios "
        f"{summary['calibratable_within']} / {summary['calibratable_cells']} "
        f"({(summary['calibratable_share_within'] or 0):.1%}).",
        f"Rank: {summary['rank_disagreements']} disagreements in {summary['separated_pairs']} "
        f"separated pairs ({summary['calibratable_rank_disagreements']} in "
        f"{summary['calibratable_separated_pairs']} without the capacity-limited scenarios).",
        "",
        "| policy | median abs. error | p90 abs. error | mean error | cells |",
        "|---|---|---|---|---|",
    ]
    for p, s in summary["per_policy"].items():
        lines.append(
            f"| {p} | {s['median_abs_relative_error']:.1%} | {s['p90_abs_relative_error']:.1%} | "
            f"{s['mean_relative_error']:+.1%} | {s['cells']} |"
        )
    lines += ["", "Miss rates (simulate / what-if):", ""]
    lines.append("| scenario | seed | " + " | ".join(policies) + " |")
    lines.append("|" + "---|" * (len(policies) + 2))
    for r in results:
        cells = [f"{r['simulate'][p]['miss_rate']:.2%} / {r['what_if'][p]:.2%}" for p in policies]
        lines.append(f"| {r['scenario']} | {r['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict[str, Any]], policies: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 7))
    markers = "os^vD<>"
    for marker, p in zip(markers, policies, strict=False):
        for capacity in (False, True):
            chosen = [r for r in results if r["capacity_limited"] == capacity]
            xs = [max(r["simulate"][p]["miss_rate"], 1e-4) * 100 for r in chosen]
            ys = [max(r["what_if"][p], 1e-4) * 100 for r in chosen]
            ax.scatter(
                xs,
                ys,
                marker=marker,
                label=None if capacity else p,
                alpha=0.75,
                s=22,
                facecolors="none" if capacity else None,
                edgecolors=f"C{policies.index(p)}",
                color=None if capacity else f"C{policies.index(p)}",
            )
    values = [r["simulate"][p]["miss_rate"] for r in results for p in policies]
    values += [r["what_if"][p] for r in results for p in policies]
    lo = max(min(v for v in values if v > 0) * 100 / 1.3, 1e-2)
    hi = max(values) * 100 * 1.3
    line = [lo, hi]
    ax.plot(line, line, color="k", lw=0.8)
    ax.plot(line, [v * (1 + TOLERANCE) for v in line], color="k", lw=0.5, ls="--")
    ax.plot(line, [v * (1 - TOLERANCE) for v in line], color="k", lw=0.5, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("simulate miss rate (%)")
    ax.set_ylabel("what-if miss rate (%) on the none-trace")
    ax.set_title(
        f"what-if vs simulate per scenario x seed x policy (dashed: ±{TOLERANCE:.0%};\n"
        "hollow: capacity-limited, not calibratable)",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 scenarios, 1 seed, 3000 blocks")
    parser.add_argument("--scenarios", help="comma-separated (default: every built-in)")
    parser.add_argument("--seeds", default=None, help="comma-separated (default 1,2,3)")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--blocks", type=int, default=None, help="cut every scenario to N blocks")
    parser.add_argument("--estimator", default="", help="estimate_trace settings: k=v,...")
    parser.add_argument("--work", default="/tmp/keepersim-calibration", help="run cache folder")
    parser.add_argument("--out", default=None, help="write results.json, table.md, plot.png here")
    parser.add_argument("--write-summary", default=None, help="write the summary JSON here")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(list(argv) if argv is not None else None)
    from keepersim.sim.suite import list_builtin_scenarios

    known = list_builtin_scenarios()
    if args.scenarios:
        scenarios = args.scenarios.split(",")
    else:
        scenarios = list(QUICK_SCENARIOS) if args.quick else known
    for name in scenarios:
        if name not in known:
            print(f"calibrate: --scenarios: unknown scenario {name!r}", file=sys.stderr)
            return 2
    seeds = [int(s) for s in (args.seeds or ("1" if args.quick else "1,2,3")).split(",")]
    blocks = args.blocks if args.blocks is not None else (3000 if args.quick else None)
    policies = args.policies.split(",")
    settings = _parse_settings(args.estimator)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = run_calibration(
        scenarios, seeds, policies, blocks, settings, Path(args.work), args.jobs
    )
    summary = compute_summary(results, policies, settings)
    from keepersim.replay.estimator import BehaviourEstimator

    summary["estimator"] = BehaviourEstimator(0, **settings).get_settings()
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    table = format_table(results, policies, summary)
    print(table)
    if out is not None:
        _write_json(out / "results.json", {"summary": summary, "cells": results})
        (out / "table.md").write_text(table)
        plot(results, policies, out / "plot.png")
    if args.write_summary:
        _write_json(Path(args.write_summary), summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
