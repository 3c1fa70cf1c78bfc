"""What a per-outcome policy costs at the least: the floor under windowed's CPU ratio to none.

    python scripts/cost_floor.py [--blocks N] [--rules]

bench.py's module workload (150 participants, 5 inferences a block, one in 31 never finished,
a LevelDB commit every block), bench.run_module_workload, for these chains:

- ``none``: no policy state;
- ``floor``: a harness policy (``Chain.open(policy_override=...)``, as the simulator's oracle)
  doing the least a policy that keeps evidence per participant does: read the participant's
  entry at each outcome, push the outcome into its ring, write the entry (windowed's entry
  message; no verdict asked again, no start, no end block, every verdict "admitted");
- ``windowed``: the policy itself;
- with ``--rules``, windowed with one of its costlier rules off by its params, to price them:
  ``windowed-no-suspicion`` (suspicion_prior_pct 0: no suspicion weighting, so the verdict moves
  only with the state), ``windowed-no-overdue`` (overdue_min_blocks at the expiry: no overdue
  evidence) and ``windowed-neither``.

It prints CPU per inference and the ratios to ``none`` as JSON. The floor's ratio is what any
policy that writes one entry per outcome pays before its rules do anything (see "What each
policy costs" in docs/policies.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

# bench first: it puts this checkout's keepersim ahead of any other on sys.path.
from bench import (
    MODULE_CHUNK,
    MODULE_PARTICIPANTS,
    compute_median_ratio,
    make_genesis,
    run_module_workload,
)

from keepersim.chain import Chain
from keepersim.keeper.acceleration.policy_store import set_keeping_verdict
from keepersim.keeper.policies import HealthPolicy, PolicyStore
from keepersim.keeper.policies.windowed import WindowedBreaker, process_push
from keepersim.types.events import Outcome
from keepersim.types.messages import Inference
from keepersim.types.pb.keepersim.v1.genesis_pb2 import Genesis


class FloorPolicy(HealthPolicy):
    """One entry read, one ring push and one entry write per outcome; nothing else."""

    name = "cost-floor"
    prefix = b"\x7e"  # no chain policy's (get_override checks)

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        entry = ctx.get(address, WindowedBreaker.get_entry)
        process_push(entry, miss=outcome is Outcome.MISS)
        set_keeping_verdict(ctx, address, entry)  # as windowed's index does


# windowed with rules off: the rules each variant turns off.
RULES_OFF: dict[str, tuple[str, ...]] = {
    "windowed-no-suspicion": ("suspicion",),
    "windowed-no-overdue": ("overdue",),
    "windowed-neither": ("suspicion", "overdue"),
}


def compute_rules_off(name: str, genesis: Genesis) -> dict[str, int]:
    """The windowed params of variant ``name``, as changes to ``genesis``'s: suspicion off is a
    zero prior; overdue off is a first look at the expiry, which no inference still open
    reaches (process_overdue_checks looks only below it)."""
    expiration = genesis.inference.params.validation_params.expiration_blocks
    off = {"suspicion": {"suspicion_prior_pct": 0}, "overdue": {"overdue_min_blocks": expiration}}
    changes: dict[str, int] = {}
    for rule in RULES_OFF.get(name, ()):
        changes.update(off[rule])
    return changes


def open_chain(folder: Path, name: str) -> Chain:
    if name == "floor":
        genesis = make_genesis(MODULE_PARTICIPANTS, "none")
        return Chain.open(folder, genesis=genesis, policy_override=FloorPolicy)
    genesis = make_genesis(MODULE_PARTICIPANTS, "windowed" if name in RULES_OFF else name)
    windowed = genesis.keepersim.extension_params.health_params.windowed
    for field, value in compute_rules_off(name, genesis).items():
        setattr(windowed, field, value)
    return Chain.open(folder, genesis=genesis)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3000, help="timed blocks (default 3000)")
    parser.add_argument("--rules", action="store_true", help="also windowed with rules off")
    args = parser.parse_args()
    if args.blocks < MODULE_CHUNK:
        parser.error(
            f"--blocks must be at least {MODULE_CHUNK} (one lockstep round), got {args.blocks}"
        )
    runs = ("none", "floor", "windowed", *(RULES_OFF if args.rules else ()))
    with tempfile.TemporaryDirectory() as d:
        chains = {name: open_chain(Path(d) / name, name) for name in runs}
        try:
            timed = run_module_workload(chains, args.blocks)
        finally:
            for chain in chains.values():
                chain.close()
    base_cpu = timed["none"].cpu / timed["none"].units
    out: dict[str, Any] = {"blocks": args.blocks, "unit": "us CPU per inference"}
    for name, t in timed.items():
        cpu = t.cpu / t.units
        out[name] = {
            "cpu_per_inference": round(cpu * 1e6, 2),
            "cpu_ratio_to_none": round(cpu / base_cpu, 3),
            "median_round_cpu_ratio_to_none": round(compute_median_ratio(t, timed["none"]), 3),
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
