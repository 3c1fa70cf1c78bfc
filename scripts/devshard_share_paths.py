"""Share correlation of devshard epochs on both selection paths (docs/results/devshard/).

For each epoch, ``none`` on the classic path (every request through GetRandomExecutor) and on
the devshard path with each ``nonces_per_escrow`` given: Pearson correlation of the simulated
with the recorded per-participant share of requests, per seed and of the seeds' mean (what
``keepersim fidelity`` reports as ``share_pearson`` / ``classic_share_pearson``)::

    python scripts/devshard_share_paths.py DATA_DIR --epochs 251,252 --seeds 5 --npe 1000,1467
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from keepersim.chaindata.epoch_folder import load_epoch_source
from keepersim.chaindata.fidelity import run_epoch_counts
from keepersim.chaindata.fleet import build_epoch_scenario


def pearson(xs: list[float], ys: list[float]) -> float:
    return statistics.correlation(xs, ys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("data")
    parser.add_argument("--epochs", default="251,252")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--npe", default="1000")
    args = parser.parse_args()
    epochs = [int(e) for e in args.epochs.split(",")]
    for record in load_epoch_source(args.data, epochs):
        scenario = build_epoch_scenario(record)
        assert scenario.devshard is not None, f"epoch {record.epoch} is not a devshard epoch"
        recorded = {s.address: s.inference_count + s.missed_requests for s in record.summaries}
        fleet = [p.address for p in scenario.participants]
        rec_total = sum(recorded.get(a, 0) for a in fleet)
        rec = [recorded.get(a, 0) / rec_total for a in fleet]
        variants = [("classic", dataclasses.replace(scenario, devshard=None))]
        for n in (int(x) for x in args.npe.split(",")):
            spec = dataclasses.replace(scenario.devshard, nonces_per_escrow=n)
            variants.append((f"devshard npe={n}", dataclasses.replace(scenario, devshard=spec)))
        for label, s in variants:
            sums = dict.fromkeys(fleet, 0)
            per_seed = []
            for seed in range(1, args.seeds + 1):
                counts = run_epoch_counts(s, "none", seed)
                one = {a: sum(counts.get(a, (0, 0))) for a in fleet}
                total = sum(one.values())
                per_seed.append(round(pearson([one[a] / total for a in fleet], rec), 4))
                for a in fleet:
                    sums[a] += one[a]
            total = sum(sums.values())
            mean_r = pearson([sums[a] / total for a in fleet], rec)
            row = {"epoch": record.epoch, "path": label, "seeds": args.seeds}
            row |= {"r_of_mean": round(mean_r, 4), "r_per_seed": per_seed}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
