"""``keepersim compare``: every policy (and the baselines) over scenarios and seeds."""

from __future__ import annotations

import argparse
import os
from typing import Any

from keepersim.cli.argtypes import get_int_type, parse_name_list
from keepersim.cli.common import (
    UsageError,
    add_progress_option,
    add_reputation_weighting_option,
    check_output_args,
    is_progress_on,
    require_extra,
)
from keepersim.sim.devshard_spec import SELECTION_PATH_CHOICES

__all__ = [
    "DEFAULT_COMPARE_SCENARIO",
    "DEFAULT_COMPARE_SEEDS",
    "DEFAULT_REPORT_DIR",
    "add_compare_command",
    "run_compare",
]

DEFAULT_REPORT_DIR = "keepersim-report"
DEFAULT_COMPARE_SCENARIO = "mainnet_like"
DEFAULT_COMPARE_SEEDS = 3


def add_compare_command(subparsers: Any) -> None:
    from keepersim.sim.live_network import RUN_PRESETS

    parser = subparsers.add_parser(
        "compare",
        help="compare policies over scenarios and seeds",
        description=(
            "Run every policy (plus the `none` and `oracle` baselines) on each scenario over N "
            "seeds; print a table; write report.json, runs.csv, summary.csv and PNG plots.\n\n"
            f"Defaults: scenario {DEFAULT_COMPARE_SCENARIO}, every registered policy, "
            f"{DEFAULT_COMPARE_SEEDS} seeds, output ./{DEFAULT_REPORT_DIR}/.\n"
            "A built-in scenario is rebuilt for each seed 1..N; a scenario file keeps its fleet "
            "and runs seeds file_seed .. file_seed + N - 1."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"built-in names, scenario files or folders of the chain's recorded epochs "
        f"(epoch_N/, or a folder holding them: one scenario per epoch) "
        f"(default: {DEFAULT_COMPARE_SCENARIO})",
    )
    parser.add_argument(
        "--policies",
        type=parse_name_list,
        default=None,
        help="comma-separated policies, or all (default: every registered policy)",
    )
    parser.add_argument(
        "--seeds", type=get_int_type(1), default=DEFAULT_COMPARE_SEEDS, help="seeds per scenario"
    )
    parser.add_argument("--out", default=DEFAULT_REPORT_DIR, help="output folder")
    parser.add_argument(
        "--jobs",
        type=get_int_type(1),
        default=None,
        help="worker processes (default: every core; 1: in this process)",
    )
    parser.add_argument(
        "--store", choices=("leveldb", "memory"), default="leveldb", help="chain store"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--selection-path",
        choices=SELECTION_PATH_CHOICES,
        default="scenario",
        help="how requests reach executors: as each scenario says (default), classic "
        "(GetRandomExecutor), devshard (escrow slots and the session picker), mixed (half "
        "each), or both (every scenario twice: NAME@classic, NAME@devshard)",
    )
    parser.add_argument(
        "--slot-filter",
        action="store_true",
        help="devshard runs: escrow creation samples slots only from the participants the "
        "chain policy admits (a what-if; upstream has no such filter)",
    )
    parser.add_argument(
        "--preset",
        choices=RUN_PRESETS,
        default="default",
        help="mainnet: every scenario as the live network at v0.2.14 handles it (the devshard "
        "path unless the scenario has its own 'devshard' key, the chain's downtime SPRT on at "
        "the live values; docs/design/devshard.md), then --selection-path as asked; default: "
        "as each scenario says",
    )
    add_reputation_weighting_option(parser)
    add_progress_option(parser)
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    import time

    from keepersim.runs.compare import compare
    from keepersim.types.policies import RUN_POLICIES, get_unknown_policy_problem

    # parse_name_list: a non-empty list without empty names
    policies = (
        list(RUN_POLICIES) if args.policies is None or args.policies == ["all"] else args.policies
    )
    unknown = get_unknown_policy_problem(policies)
    if unknown:
        raise UsageError(f"--policies: {unknown}")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    if not args.no_plots:
        require_extra("plots", "plotting", " (or --no-plots)")
    check_output_args(args, folders=("out",))
    started = time.perf_counter()
    report = compare(
        args.scenarios or [DEFAULT_COMPARE_SCENARIO],
        policies,
        args.seeds,
        args.out,
        store=args.store,
        progress=is_progress_on(args),
        jobs=args.jobs,
        plots=not args.no_plots,
        reputation_weighting=args.reputation_weighting,
        selection_path=args.selection_path,
        slot_filter=args.slot_filter,
        preset=args.preset,
    )
    wall = time.perf_counter() - started
    print(
        f"\n{len(report['runs'])} runs in {wall:.1f} s; report: "
        f"{os.path.join(args.out, 'report.json')}"
    )
    return 0
