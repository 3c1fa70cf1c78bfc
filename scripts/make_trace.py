"""Write a calibrated synthetic chain trace (docs/trace-format.md) fast, for the replay benchmark.

Mainnet-like: 150 participants with lognormal weights, ~80,000 inferences an epoch of the
mainnet preset (15,391 blocks), ~3.25% misses (most nodes 0.5-2%, a minority up to 28%), latency 1-8 blocks, expiry after 150.
The epoch summaries are what the module computes for that traffic (a finish counts in the epoch
of its block, a miss in the epoch of its expiry), so an as-recorded replay must match them.

    python scripts/make_trace.py OUT.jsonl --epochs 31 [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from keepersim.trace.format import (
    build_header_line,
    build_inference_line,
    build_params_line,
    build_participants_line,
    build_summary_line,
    encode_line,
    encode_message,
)
from keepersim.trace.integrity import append_closing_record
from keepersim.types.messages import ACTIVE, MLNodeInfo, Participant
from keepersim.types.params import get_mainnet_params
from keepersim.types.pb.keepersim.v1.state_pb2 import ParticipantNodes

EXPIRATION = 150


def make_fleet(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    addresses = [f"gonka1trace{i:04d}{'q' * 28}" for i in range(n)]
    weights = np.maximum(1, (rng.lognormal(0.0, 1.0, n) * 1000).astype(np.int64))
    miss = rng.uniform(0.005, 0.02, n)
    degraded = rng.choice(n, size=n // 10, replace=False)
    miss[degraded] = rng.uniform(0.06, 0.28, degraded.size)
    share = weights / weights.sum()
    # Scale the healthy nodes so the traffic-weighted miss rate is 3.25%.
    healthy = np.ones(n, dtype=bool)
    healthy[degraded] = False
    deficit = 0.0325 - float((share * miss)[~healthy].sum())
    miss[healthy] *= deficit / float((share * miss)[healthy].sum())
    return addresses, weights, np.clip(miss, 0.0, 0.28)


def write_trace(
    path: Path, epochs: int, per_epoch: int = 80_000, n: int = 150, seed: int = 1
) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    params = get_mainnet_params()
    length = int(params.params.epoch_params.epoch_length)
    last = epochs * length
    addresses, weights, miss = make_fleet(rng, n)
    cum = np.cumsum(weights / weights.sum())
    rate = per_epoch / length
    node = MLNodeInfo(node_id="n0", timeslot_allocation=[True, True])
    participants = [
        encode_message(Participant(index=a, address=a, weight=int(w), status=ACTIVE))
        for a, w in zip(addresses, weights, strict=True)
    ]
    nodes = [
        encode_message(ParticipantNodes(address=a, models=["qwen"], ml_nodes=[node]))
        for a in addresses
    ]
    # counts[epoch][participant] = [finished, missed]
    counts = np.zeros((epochs, n, 2), dtype=np.int64)
    total = misses = 0
    with open(path, "w", encoding="utf-8") as f:
        w = f.write
        header = build_header_line(
            chain_id="gonka-mainnet-synthetic",
            source="simulate",
            first_height=1,
            last_height=last,
            scenario="calibrated_mainnet",
            seed=seed,
        )
        w(encode_line(header) + "\n")
        ext = params.extension_params
        w(encode_line(build_params_line(0, encode_message(params.params), encode_message(ext))))
        w("\n" + encode_line(build_participants_line(0, 0, participants, nodes)) + "\n")
        seq = 0
        for epoch in range(epochs):
            lo, hi = epoch * length + 1, (epoch + 1) * length
            if epoch:
                w(summary_line(epoch - 1, lo - 1, addresses, counts[epoch - 1]))
                line = build_participants_line(epoch, lo - 1, participants, nodes)
                w(encode_line(line) + "\n")
            heights = np.arange(lo, hi + 1)
            arrivals = rng.poisson(rate, heights.size)
            arrivals[heights > last - EXPIRATION] = 0  # everything resolves inside the trace
            starts = np.repeat(heights, arrivals)
            who = np.searchsorted(cum, rng.random(starts.size), side="right")
            who = np.minimum(who, n - 1)
            missed = rng.random(starts.size) < miss[who]
            latency = rng.integers(1, 9, starts.size)
            for h, i, m, lat in zip(
                starts.tolist(), who.tolist(), missed.tolist(), latency.tolist(), strict=True
            ):
                seq += 1
                a = addresses[i]
                if m:
                    end = h + EXPIRATION
                    status, executed, end_height = "EXPIRED", "", "0"
                    misses += 1
                else:
                    end = h + lat
                    status, executed, end_height = "FINISHED", a, str(end)
                counts[(end - 1) // length, i, 1 if m else 0] += 1
                iid = f"inf-{seq:010d}"
                inference = {
                    "index": iid,
                    "inference_id": iid,
                    "model": "qwen",
                    "requested_by": "gonka1requester",
                    "assigned_to": a,
                    "executed_by": executed,
                    "status": status,
                    "start_block_height": str(h),
                    "end_block_height": end_height,
                    "epoch_id": str(epoch),
                }
                w(encode_line(build_inference_line(inference)) + "\n")
            total += int(starts.size)
        w(summary_line(epochs - 1, last, addresses, counts[epochs - 1]))
    append_closing_record(path)  # the trace is whole: readers refuse one without it
    return {"inferences": total, "misses": misses, "blocks": last}


def summary_line(epoch: int, height: int, addresses: list[str], counts: np.ndarray) -> str:
    summaries = [
        {
            "epoch_index": str(epoch),
            "participant_id": a,
            "inference_count": str(int(c[0])),
            "missed_requests": str(int(c[1])),
            "earned_coins": "0",
            "rewarded_coins": "0",
            "burned_coins": "0",
            "validated_inferences": "0",
            "invalidated_inferences": "0",
            "claimed": False,
        }
        for a, c in sorted(zip(addresses, counts, strict=True))
    ]
    return encode_line(build_summary_line(epoch, height, summaries)) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--epochs", type=int, default=31)
    parser.add_argument("--per-epoch", type=int, default=80_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(write_trace(args.out, args.epochs, args.per_epoch, seed=args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
