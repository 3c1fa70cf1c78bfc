"""Where a policy's CPU goes: its hooks timed one by one on bench.py's module workload.

    python scripts/hook_costs.py [POLICY ...] [--blocks N]

Each of the policy's hooks (start, outcome, end block, get_health), the block's write of its
entries (ChainPolicyStore.flush) and the commit are wrapped with a timer; the JSON gives each in
microseconds per inference next to the run's CPU per inference. Timers cost about 0.1 us a
call, so compare policies with each other, not with bench.py's figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench first: it puts this checkout's keepersim ahead of any other on sys.path.
from bench import (
    MODULE_PARTICIPANTS,
    MODULE_PER_BLOCK,
    MODULE_WARM_UP,
    SyntheticLoad,
    make_genesis,
)

from keepersim.chain import Chain
from keepersim.keeper.acceleration.policy_store import ChainPolicyStore
from keepersim.keeper.policies import get_policy
from keepersim.store.committed import CommitStore

HOOKS = ("process_start", "process_outcome", "process_end_block", "get_health")


def process_wrap(owner: type, name: str, spent: dict[str, float]) -> None:
    """Replace ``owner.name`` with a copy that adds its time to ``spent[name]``."""
    inner: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

    setattr(owner, name, timed)


def compute_hook_costs(policy: str, blocks: int) -> dict[str, float]:
    """Microseconds per inference in each part, after a 200-block warm-up."""
    spent: dict[str, float] = {}
    cls = type(get_policy(policy))
    saved = {name: getattr(cls, name) for name in HOOKS if name in vars(cls)}
    saved_flush, saved_commit = ChainPolicyStore.flush, CommitStore.commit
    for name in saved:
        process_wrap(cls, name, spent)
    process_wrap(ChainPolicyStore, "flush", spent)
    process_wrap(CommitStore, "commit", spent)
    try:
        with tempfile.TemporaryDirectory() as d:
            chain = Chain.open(Path(d) / policy, genesis=make_genesis(MODULE_PARTICIPANTS, policy))
            try:
                load = SyntheticLoad(MODULE_PER_BLOCK)
                load.process_blocks(chain, MODULE_WARM_UP)
                spent.clear()
                c0 = time.process_time()
                n = load.process_blocks(chain, blocks)
                cpu = time.process_time() - c0
            finally:
                chain.close()
    finally:
        for name, method in saved.items():
            setattr(cls, name, method)
        ChainPolicyStore.flush, CommitStore.commit = saved_flush, saved_commit  # type: ignore[method-assign]
    costs = {"cpu_per_inference": cpu / n * 1e6}
    costs.update({name: seconds / n * 1e6 for name, seconds in sorted(spent.items())})
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="*", default=["none", "windowed"])
    parser.add_argument("--blocks", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.blocks < 1:
        parser.error("--blocks: expected a positive number of blocks")
    try:
        for policy in args.policies:
            get_policy(policy)
    except KeyError as e:
        parser.error(str(e.args[0]))
    result = {
        policy: {k: round(v, 2) for k, v in compute_hook_costs(policy, args.blocks).items()}
        for policy in args.policies
    }
    print(json.dumps({"unit": "us per inference", "policies": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
