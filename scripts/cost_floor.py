"""What a per-outcome policy costs at the least: the floor under windowed's CPU ratio to none.

    python scripts/cost_floor.py [--blocks N] [--rules]

bench.py's module workload (150 participants, 5 inferences a block, one in 31 never finished,
a LevelDB commit every block) in lockstep (bench.run_lockstep), for three chains:

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
import functools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench import SyntheticLoad, compute_median_ratio, make_genesis, run_lockstep  # noqa: E402

from keepersim.chain import Chain  # noqa: E402
from keepersim.keeper.policies import HealthPolicy, PolicyStore  # noqa: E402
from keepersim.keeper.policies.windowed import WindowedBreaker, process_push  # noqa: E402
from keepersim.types.events import Outcome  # noqa: E402
from keepersim.types.messages import Inference  # noqa: E402


class FloorPolicy(HealthPolicy):
    """One entry read, one ring push and one entry write per outcome; nothing else."""

    name = "cost-floor"
    prefix = b"\x7e"  # no chain policy's (get_override checks)

    def process_outcome(
        self, ctx: PolicyStore, address: str, outcome: Outcome, inference: Inference
    ) -> None:
        entry = ctx.get(address, WindowedBreaker.get_entry)
        process_push(entry, miss=outcome is Outcome.MISS)
        ctx.set(address, entry, verdict=False)


# windowed with rules off: the params each variant changes.
RULES_OFF: dict[str, dict[str, int]] = {
    "windowed-no-suspicion": {"suspicion_prior_pct": 0},
    "windowed-no-overdue": {"overdue_min_blocks": 150},  # bench.make_genesis's expiration_blocks
    "windowed-neither": {"suspicion_prior_pct": 0, "overdue_min_blocks": 150},
}


def open_chain(folder: Path, name: str) -> Chain:
    if name == "floor":
        return Chain.open(folder, genesis=make_genesis(150, "none"), policy_override=FloorPolicy)
    genesis = make_genesis(150, "windowed" if name in RULES_OFF else name)
    windowed = genesis.keepersim.extension_params.health_params.windowed
    for field, value in RULES_OFF.get(name, {}).items():
        setattr(windowed, field, value)
    return Chain.open(folder, genesis=genesis)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=3000, help="timed blocks (default 3000)")
    parser.add_argument("--rules", action="store_true", help="also windowed with rules off")
    args = parser.parse_args()
    if args.blocks < 20:
        parser.error(f"--blocks must be at least 20 (one lockstep round), got {args.blocks}")
    runs = ("none", "floor", "windowed", *(RULES_OFF if args.rules else ()))
    with tempfile.TemporaryDirectory() as d:
        chains = {name: open_chain(Path(d) / name, name) for name in runs}
        try:
            loads = {name: SyntheticLoad(5) for name in runs}
            for name in runs:
                loads[name].process_blocks(chains[name], 200)  # warm-up, as bench.py
            timed = run_lockstep(
                {n: functools.partial(loads[n].process_blocks, chains[n]) for n in runs},
                args.blocks,
                20,
            )
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
