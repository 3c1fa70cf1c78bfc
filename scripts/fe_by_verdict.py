"""Where a policy's false exclusion and withheld weight come from, on one built-in run.

    python scripts/fe_by_verdict.py SCENARIO POLICY [--seed N] [--set PATH=VALUE ...]
        [--every K] [--json]

Runs the built-in SCENARIO under POLICY (in memory) and, every K blocks, looks at each truly
healthy participant (sim/oracle.py: a true miss probability of at most 5%) that the next
block's selection keeps out or draws below its weight (as the run's metrics read it:
sim/driver.py, compute_selection_view; SPRT's deactivations, which the hook does not see, are
not counted). It splits the run's false exclusion by
the verdict the policy's state view gives (``verdict``, else ``state``: e.g. windowed's
``excluded`` / ``probe_full``) and by how the keep-out began: ``lag`` when the participant was
truly bad at its start (it has recovered and is still kept out), ``false alarm`` when it was
healthy then. Withheld weight (admitted, drawn below its weight) is split by verdict. The
shares are of the run's total weight, averaged over the blocks looked at: with ``--every 1``
blocks 2 to the last (the first is drawn before any block hook runs), so the splits add up to
the run's ``false_exclusion_weight_share`` and ``withheld_weight_share`` to within one block's
share; a larger K samples them.

This is the diagnosis behind docs/policies.md's research log (issue 16, third round).
Exit status: 0, or 2 for bad input (one line naming the argument).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this checkout's keepersim, whatever PYTHONPATH says
    sys.path.insert(0, str(ROOT))

from keepersim.chain import Chain  # noqa: E402
from keepersim.sim.governance import compute_params_with_changes  # noqa: E402
from keepersim.sim.oracle import is_truly_healthy  # noqa: E402
from keepersim.sim.run_genesis import build_params  # noqa: E402
from keepersim.sim.run_loop import compute_selection_view, get_model_tables, run_scenario  # noqa: E402
from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios  # noqa: E402
from keepersim.types.errors import KeepersimError  # noqa: E402
from keepersim.types.policies import get_unknown_policy_problem  # noqa: E402


def compute_breakdown(
    scenario_name: str, policy: str, seed: int, changes: dict[str, Any], every: int
) -> dict[str, Any]:
    """The run's metrics and its false exclusion / withheld weight split (module docstring)."""
    scenario = get_builtin_scenario(scenario_name, seed)
    params = build_params(scenario, policy)
    if changes:
        params = compute_params_with_changes(params, changes, "--set")
    specs = scenario.participants
    total = sum(spec.weight for spec in specs)
    models = sorted({m for spec in specs for m in spec.models})
    members = {m: frozenset(s.address for s in specs if m in s.models) for m in models}
    kept_since: dict[str, int] = {}  # kept out since this height
    by_verdict: Counter[str] = Counter()
    by_onset: Counter[str] = Counter()
    withheld: defaultdict[str, float] = defaultdict(float)
    looked = 0

    def on_block(chain: Chain, height: int) -> None:
        nonlocal looked
        kept, factors = compute_selection_view(  # of block height + 1
            models, *get_model_tables(chain, models), members
        )
        for address in list(kept_since):
            if address not in kept:
                del kept_since[address]
        for address in kept:
            kept_since.setdefault(address, height + 1)
        if height % every or height >= scenario.blocks:  # (after the last: no next block)
            return
        looked += 1
        for spec in specs:
            reduced = spec.address in factors
            if not is_truly_healthy(spec, height + 1) or (spec.address not in kept and not reduced):
                continue
            view = chain.get_policy_state(spec.address)
            verdict = str(view.get("verdict", view.get("state")))
            if spec.address in kept:
                by_verdict[verdict] += spec.weight
                began = kept_since[spec.address]
                by_onset["false alarm" if is_truly_healthy(spec, began) else "lag"] += spec.weight
            else:
                withheld[verdict] += spec.weight * (1.0 - factors[spec.address])

    result = run_scenario(
        scenario, policy, seed=seed, store="memory", params=params, on_block=on_block
    )
    metrics = result.metrics

    def shares(counter: Mapping[str, float]) -> dict[str, float]:
        ranked = sorted(counter.items(), key=lambda kv: -kv[1])
        return {k: v / total / max(1, looked) for k, v in ranked}

    return {
        "scenario": scenario_name,
        "policy": policy,
        "seed": seed,
        "set": changes,
        "every": every,
        "miss_rate": metrics["miss_rate"],
        "false_exclusion_weight_share": metrics["false_exclusion_weight_share"],
        "withheld_weight_share": metrics["withheld_weight_share"],
        "false_exclusion_by_verdict": shares(by_verdict),
        "false_exclusion_by_onset": shares(by_onset),
        "withheld_by_verdict": shares(withheld),
    }


def parse_set(items: list[str]) -> dict[str, Any]:
    """``PATH=VALUE`` pairs; a VALUE is read as JSON when it parses (numbers, true), else text."""
    changes: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set: expected PATH=VALUE, got {item!r}")
        path, raw = item.split("=", 1)
        try:
            changes[path] = json.loads(raw)
        except json.JSONDecodeError:
            changes[path] = raw
    return changes


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"{report['scenario']} / {report['policy']} (seed {report['seed']}): miss rate "
        f"{report['miss_rate']:.2%}, false exclusion {report['false_exclusion_weight_share']:.2%}"
        f", withheld {report['withheld_weight_share']:.2%}"
    ]
    for key, title in (
        ("false_exclusion_by_verdict", "false exclusion by verdict"),
        ("false_exclusion_by_onset", "false exclusion by how the keep-out began"),
        ("withheld_by_verdict", "withheld weight (admitted, drawn below its weight) by verdict"),
    ):
        lines.append(f"  {title}:")
        lines.extend(f"    {name:24s} {share:7.3%}" for name, share in report[key].items())
        if not report[key]:
            lines.append("    (none)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", help="a built-in scenario (keepersim scenarios list)")
    parser.add_argument("policy", help="a policy name")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--every", type=int, default=1, help="look every K blocks (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    if args.scenario not in list_builtin_scenarios():
        known = ", ".join(list_builtin_scenarios())
        print(f"scenario: unknown {args.scenario!r} (built-ins: {known})", file=sys.stderr)
        return 2
    unknown = get_unknown_policy_problem([args.policy])
    if unknown:
        print(f"policy: {unknown}", file=sys.stderr)
        return 2
    if args.every < 1:
        print(f"--every: expected a positive integer, got {args.every}", file=sys.stderr)
        return 2
    try:
        changes = parse_set(args.set)
        report = compute_breakdown(args.scenario, args.policy, args.seed, changes, args.every)
    except (ValueError, KeepersimError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
