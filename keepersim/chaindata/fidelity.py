"""Fidelity to the chain: each recorded epoch's fleet run under ``none`` (no health filter, what
the chain did) and compared with what the chain recorded (docs/mainnet-epochs.md).

Per epoch, over ``seeds`` runs (seeds ``1..N``): the participants' ``inference_count`` and
``missed_requests`` as keepersim's chain counts them at the epoch's last block (the fields the
chain's epoch summary copies), averaged over the seeds, against the recorded summary:

* ``inferences_rel_error``, ``misses_rel_error``, ``requests_rel_error``: (simulated - recorded)
  / recorded of the fleet's totals (requests = inferences + misses). The fleet is the epoch's
  group; a summary also counts what a participant did while the previous epoch's group still
  served (the chain settles an epoch's stats at the end of the next PoC's validation,
  x/inference/module/module.go:595-634 at d8b8e907 (v0.2.12), 120 blocks before the group
  switches at SetNewValidators, and an expired inference is counted when it expires,
  module.go:255-325). Participants outside the fleet (no weight in this epoch's sub-groups) can
  only have such counts: they are reported (``recorded_*_all``, ``recorded_outside_fleet``),
  not compared;
* ``share_pearson``: Pearson correlation of each participant's share of requests (inferences +
  misses over the total) with the recorded share, over the fleet;
* ``share_median_rel_error``: the median of |simulated - recorded| / recorded share over the
  participants above :data:`BIG_WEIGHT_SHARE` of the fleet's weight;
* ``misses_pearson``, ``misses_median_abs_error``: the same for each participant's misses;
* on an epoch built with the devshard path (``source.selection_path`` ``devshard``,
  :mod:`keepersim.chaindata.devshard_fleet`): ``classic_share_pearson``, the share correlation
  of the same fleet with every request through ``GetRandomExecutor`` (the scenario without its
  ``devshard`` key), so both paths are reported; the must-hold adds that the devshard path
  reproduces the shares at least as well.

Nothing compared is fitted from the per-participant counts: the fleet's weights are the
sub-groups', its traffic the group's requests (or, where the selection path is not modelled,
the summaries' total); only the miss probabilities come from the record
(:mod:`keepersim.chaindata.fleet`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from keepersim.chain import Chain
from keepersim.chaindata.epoch_folder import EpochRecord
from keepersim.chaindata.fleet import (
    DEFAULT_TRAFFIC_PROFILE,
    NOT_MODELLED,
    build_epoch_scenario,
)
from keepersim.report.tables import format_table
from keepersim.sim.run_loop import run_scenario
from keepersim.sim.scenario import Scenario

__all__ = [
    "BIG_WEIGHT_SHARE",
    "MUST_HOLD",
    "compute_epoch_fidelity",
    "format_fidelity_table",
    "get_devshard_inferences",
    "get_fidelity_csv",
    "run_epoch_counts",
    "write_fidelity_plot",
]

BIG_WEIGHT_SHARE: Final = 0.02
#: The targets for an epoch whose selection path keepersim models.
MUST_HOLD: Final = {"total_rel_error": 0.05, "share_pearson": 0.9}
#: Why keepersim cannot match an epoch whose traffic went through devshard escrows (gonka
#: ee730031): MsgCreateDevshardEscrow samples the escrow's slots by weight
#: (x/inference/keeper/msg_server_create_devshard_escrow.go:71-78, GroupSize 16 by default,
#: types/params.go:102) and the hosts' completed inferences reach inference_count by
#: keeper/devshard_host_stats.go:114-118, not through MsgStartInference's GetRandomExecutor.
DEVSHARD_NOTE: Final = (
    "traffic through devshard escrows: MsgCreateDevshardEscrow samples 16 slots by weight "
    "(x/inference/keeper/msg_server_create_devshard_escrow.go:71-78 at ee730031) and the hosts' "
    "inferences are counted by keeper/devshard_host_stats.go:114-118; keepersim models "
    "GetRandomExecutor only"
)


def get_devshard_inferences(record: EpochRecord) -> int:
    """The summaries' inferences that ``number_of_requests`` does not count: the group counts
    each inference finished through MsgFinishInference once, at its validation end block
    (x/inference/module/inference_validation_endblock.go:78 at d8b8e907), while a settled
    devshard escrow adds its hosts' completed requests to ``inference_count`` (and to
    ``validated_inferences``) directly (keeper/devshard_host_stats.go:114-124, called from
    msg_server_settle_devshard_escrow.go:201-214 at d8b8e907). 0 when the summaries count
    fewer."""
    done = record.get_recorded_inferences()
    return max(0, done - record.number_of_requests)


def run_epoch_counts(scenario: Scenario, policy: str, seed: int) -> dict[str, tuple[int, int]]:
    """Each participant's ``(inference_count, missed_requests)`` on keepersim's chain at the
    run's last block (the chain's current epoch stats, which its epoch summary copies)."""
    counts: dict[str, tuple[int, int]] = {}

    def on_block(chain: Chain, height: int) -> None:
        if height == scenario.blocks:
            with chain.read() as k:
                for p in k.iterate_participants():
                    stats = p.current_epoch_stats
                    counts[p.address] = (stats.inference_count, stats.missed_requests)

    run_scenario(scenario, policy, seed=seed, store="memory", on_block=on_block)
    return counts


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _rel(sim: float, rec: float) -> float | None:
    return (sim - rec) / rec if rec else None


def compute_epoch_fidelity(
    record: EpochRecord,
    *,
    seeds: int = 5,
    miss_timing: str = "constant",
    traffic: str = "auto",
    profile: str = DEFAULT_TRAFFIC_PROFILE,
    on_run: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The fidelity of one epoch (see the module docstring): the summary and per-participant
    rows. ``on_run(epoch, seed)`` is called after each run (progress)."""
    scenario = build_epoch_scenario(
        record, seed=1, miss_timing=miss_timing, traffic=traffic, profile=profile
    )
    fleet = [p.address for p in scenario.participants]
    sums = {a: [0, 0] for a in fleet}
    for seed in range(1, seeds + 1):
        for address, (done, missed) in run_epoch_counts(scenario, "none", seed).items():
            if address in sums:
                sums[address][0] += done
                sums[address][1] += missed
        if on_run is not None:
            on_run(record.epoch, seed)
    sim = {a: (d / seeds, m / seeds) for a, (d, m) in sums.items()}
    recorded_all = {s.address: (s.inference_count, s.missed_requests) for s in record.summaries}
    recorded = {a: recorded_all.get(a, (0, 0)) for a in fleet}
    weight = {
        p.address: p.weight + sum(w for _, w in p.model_weights) for p in scenario.participants
    }
    total_weight = sum(weight.values())
    rec_total = sum(d + m for d, m in recorded.values())
    sim_total = sum(d + m for d, m in sim.values())
    rows: list[dict[str, Any]] = []
    for address in fleet:
        rd, rm = recorded.get(address, (0, 0))
        sd, sm = sim[address]
        rows.append(
            {
                "epoch": record.epoch,
                "address": address,
                "weight_share": weight[address] / total_weight,
                "recorded_share": (rd + rm) / rec_total if rec_total else 0.0,
                "simulated_share": (sd + sm) / sim_total if sim_total else 0.0,
                "recorded_inferences": rd,
                "simulated_inferences": sd,
                "recorded_misses": rm,
                "simulated_misses": sm,
            }
        )
    rec_done = sum(d for d, _ in recorded.values())
    rec_missed = sum(m for _, m in recorded.values())
    sim_done = sum(d for d, _ in sim.values())
    sim_missed = sum(m for _, m in sim.values())
    big = [r for r in rows if r["weight_share"] > BIG_WEIGHT_SHARE and r["recorded_share"] > 0]
    path = str((scenario.source or {}).get("selection_path", ""))
    summary: dict[str, Any] = {
        "epoch": record.epoch,
        "selection_path": path,
        "participants": len(fleet),
        "seeds": seeds,
        "miss_timing": miss_timing,
        "traffic_profile": (scenario.source or {}).get("traffic", {}).get("profile", profile),
        "traffic_requests": round(scenario.arrivals_per_block * scenario.blocks),
        "recorded_inferences": rec_done,
        "simulated_inferences": sim_done,
        "inferences_rel_error": _rel(sim_done, rec_done),
        "recorded_misses": rec_missed,
        "simulated_misses": sim_missed,
        "misses_rel_error": _rel(sim_missed, rec_missed),
        "requests_rel_error": _rel(sim_total, rec_total),
        "recorded_outside_fleet": sum(d + m for a, (d, m) in recorded_all.items() if a not in sums),
        "recorded_inferences_all": sum(d for d, _ in recorded_all.values()),
        "recorded_misses_all": sum(m for _, m in recorded_all.values()),
        "devshard_inferences": get_devshard_inferences(record),
        "share_pearson": _pearson(
            [r["simulated_share"] for r in rows], [r["recorded_share"] for r in rows]
        ),
        "share_median_rel_error": (
            statistics.median(
                abs(r["simulated_share"] - r["recorded_share"]) / r["recorded_share"] for r in big
            )
            if big
            else None
        ),
        "big_participants": len(big),
        "misses_pearson": _pearson(
            [r["simulated_misses"] for r in rows], [float(r["recorded_misses"]) for r in rows]
        ),
        "misses_median_abs_error": statistics.median(
            abs(r["simulated_misses"] - r["recorded_misses"]) for r in rows
        )
        if rows
        else None,
    }
    if scenario.devshard is not None:
        summary["classic_share_pearson"] = _compute_classic_share_pearson(scenario, recorded, seeds)
    summary["must_hold"] = _check_must_hold(summary)
    if path == NOT_MODELLED:
        summary["note"] = DEVSHARD_NOTE
    return {"summary": summary, "participants": rows}


def _compute_classic_share_pearson(
    scenario: Scenario, recorded: Mapping[str, tuple[int, int]], seeds: int
) -> float | None:
    """The share correlation of ``scenario`` with every request through GetRandomExecutor."""
    classic = dataclasses.replace(scenario, devshard=None)
    fleet = [p.address for p in scenario.participants]
    sums = dict.fromkeys(fleet, 0)
    for seed in range(1, seeds + 1):
        for address, (done, missed) in run_epoch_counts(classic, "none", seed).items():
            if address in sums:
                sums[address] += done + missed
    sim_total = sum(sums.values())
    rec = [sum(recorded.get(a, (0, 0))) for a in fleet]
    rec_total = sum(rec)
    if not sim_total or not rec_total:
        return None
    return _pearson([sums[a] / sim_total for a in fleet], [r / rec_total for r in rec])


def _check_must_hold(summary: Mapping[str, Any]) -> str:
    """``pass``, ``fail: ...`` or ``not applicable: ...`` (selection path not modelled)."""
    if summary["selection_path"] == NOT_MODELLED:
        return "not applicable: selection path not modelled (devshard)"
    failed = []
    for key in ("inferences_rel_error", "misses_rel_error"):
        value = summary[key]
        if value is None or abs(value) > MUST_HOLD["total_rel_error"]:
            failed.append(f"{key} {_fmt(value)}")
    pearson = summary["share_pearson"]
    if pearson is None or pearson < MUST_HOLD["share_pearson"]:
        failed.append(f"share_pearson {_fmt(pearson)}")
    classic = summary.get("classic_share_pearson")
    if classic is not None and (pearson is None or pearson < classic):
        failed.append(f"share_pearson {_fmt(pearson)} below the classic path's {_fmt(classic)}")
    return "pass" if not failed else "fail: " + ", ".join(failed)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _count(value: Any) -> str:
    return "-" if value is None else f"{round(value):,}"


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def _share(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


#: (summary key, title, right-aligned, cell): the table's columns (docs/metrics.md, fidelity).
_TABLE_COLUMNS: Final = (
    ("epoch", "epoch", True, str),
    ("participants", "fleet", True, str),
    ("recorded_inferences", "inf rec", True, _count),
    ("simulated_inferences", "inf sim", True, _count),
    ("inferences_rel_error", "inf err", True, _percent),
    ("recorded_misses", "miss rec", True, _count),
    ("simulated_misses", "miss sim", True, _count),
    ("misses_rel_error", "miss err", True, _percent),
    ("recorded_misses_all", "miss rec all", True, _count),
    ("devshard_inferences", "devshard inf", True, _count),
    ("share_pearson", "share r", True, _ratio),
    ("classic_share_pearson", "classic share r", True, _ratio),
    ("share_median_rel_error", "share med err", True, _share),
    ("misses_pearson", "miss r", True, _ratio),
    ("misses_median_abs_error", "miss med abs", True, _fmt),
    ("selection_path", "selection path", False, str),
)


def format_fidelity_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """One line per epoch, then each epoch's must-hold verdict."""
    table = format_table(
        [c[1] for c in _TABLE_COLUMNS],
        [[c[3](s.get(c[0])) for c in _TABLE_COLUMNS] for s in summaries],
        [c[2] for c in _TABLE_COLUMNS],
    )
    verdicts = [f"epoch {s['epoch']}: {s['must_hold']}" for s in summaries]
    return "\n".join([table, "", *verdicts]) + "\n"


def get_fidelity_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-participant rows as CSV."""
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


def write_fidelity_plot(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Simulated against recorded share of requests, one panel per epoch (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(results))
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 4.0 * rows_n), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, result in zip(axes.flat, results, strict=False):
        summary, rows = result["summary"], result["participants"]
        xs = [r["recorded_share"] for r in rows]
        ys = [r["simulated_share"] for r in rows]
        top = max([*xs, *ys, 1e-9]) * 1.05
        ax.plot([0, top], [0, top], color="0.7", linewidth=1)
        ax.scatter(xs, ys, s=12, alpha=0.7)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        title = f"epoch {summary['epoch']}: r = {_fmt(summary['share_pearson'])}"
        if summary["selection_path"] == NOT_MODELLED:
            title += "\n(devshard: not modelled)"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("recorded share of requests", fontsize=8)
        ax.set_ylabel("simulated share (none, mean of seeds)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    from keepersim.outputs import get_atomic_path

    with get_atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
