"""``keepersim simulate``: one scenario under one policy on a fresh chain; prints its metrics.

The run is one :class:`~keepersim.runs.RunTask` on the runs engine, in this process (the task
carries the store folder, trace, resume and progress options)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from keepersim.cli.argtypes import parse_seed
from keepersim.cli.common import (
    UsageError,
    add_progress_option,
    add_reputation_weighting_option,
    add_resume_option,
    check_output_args,
    check_resume_option,
    format_value,
    is_progress_on,
    load_scenario_arg,
    read_json,
    write_json,
)

__all__ = ["add_simulate_command", "run_simulate"]


def add_simulate_command(subparsers: Any) -> None:
    from keepersim.sim.governance import GOVERNANCE_HELP
    from keepersim.sim.live_network import RUN_PRESETS

    parser = subparsers.add_parser(
        "simulate",
        help="run one scenario under one policy",
        description=(
            "Run one scenario under one policy on a fresh chain and print its metrics.\n\n"
            "SCENARIO is a built-in name (`keepersim scenarios list`; --seed also builds the fleet,"
            " default 1) or a scenario file (--seed overrides the file's seed)."
        ),
        epilog="governance file (--governance):\n" + GOVERNANCE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="built-in scenario name or file")
    parser.add_argument(
        "--policy",
        default=None,
        help="health policy (default: gonka; with --preset mainnet: devshard-limiter)",
    )
    parser.add_argument(
        "--preset",
        choices=RUN_PRESETS,
        default="default",
        help=(
            "mainnet: run as the live network at v0.2.14 does: every request through devshard "
            "escrows (unless the scenario has its own 'devshard' key), the chain's downtime SPRT "
            "on with the live values (0.98 / 0.99 / 100, unless the scenario's params set them), "
            "default policy devshard-limiter (docs/design/devshard.md); default: as the scenario "
            "says"
        ),
    )
    parser.add_argument("--seed", type=parse_seed, default=None, help="run seed")
    parser.add_argument(
        "--store", choices=("leveldb", "memory"), default="leveldb", help="chain store"
    )
    parser.add_argument(
        "--store-dir",
        default=None,
        help="keep the LevelDB chain in this (empty) folder (default: a temporary folder)",
    )
    parser.add_argument("--trace-out", default=None, help="write the run's trace (JSON lines)")
    parser.add_argument("--out", default=None, help="write the full result JSON here ('-': stdout)")
    parser.add_argument("--governance", default=None, help="governance schedule file (see below)")
    add_resume_option(parser)
    add_reputation_weighting_option(parser)
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="shadow mode: the policy only reports whom it would exclude",
    )
    add_progress_option(parser)
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    from keepersim.runs.engines import execute_runs
    from keepersim.runs.task import make_task
    from keepersim.sim.governance import parse_governance
    from keepersim.sim.live_network import (
        LIVE_POLICY,
        compute_live_params,
        compute_live_scenario,
        get_live_preset,
    )
    from keepersim.sim.run_genesis import build_params
    from keepersim.types.params import params_to_dict
    from keepersim.types.policies import get_unknown_policy_problem

    live = get_live_preset(args.preset)
    if args.policy is None:
        args.policy = LIVE_POLICY if live else "gonka"
    unknown = get_unknown_policy_problem([args.policy])
    if unknown:
        raise UsageError(f"--policy: {unknown}")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if args.store == "memory" and args.store_dir is not None:
        raise UsageError("--store-dir needs --store leveldb")
    check_resume_option(args)
    scenario, seed = load_scenario_arg(args.scenario, args.seed)
    params = None
    if live:
        scenario = compute_live_scenario(scenario)
        params = compute_live_params(
            build_params(
                scenario,
                args.policy,
                shadow=args.shadow,
                reputation_weighting=args.reputation_weighting,
            )
        )
    governance: list[Any] = []
    if args.governance is not None:
        data = read_json(args.governance, "governance file")
        base = params or build_params(
            scenario,
            args.policy,
            shadow=args.shadow,
            reputation_weighting=args.reputation_weighting,
        )
        governance = parse_governance(data, base, source=args.governance)
        late = [h for h, _ in governance if h > scenario.blocks]
        if late:
            raise UsageError(
                f"{args.governance}: height {late[0]} is beyond the run's last block "
                f"{scenario.blocks}"
            )
    check_output_args(args, files=("out", "trace_out"), folders=("store_dir",))
    task = dataclasses.replace(
        make_task(scenario, args.policy, scenario.seed if seed is None else seed, store=args.store),
        initial_params=None if params is None else params_to_dict(params),
        governance=[[h, params_to_dict(p)] for h, p in governance],
        store_dir=args.store_dir,
        trace_out=args.trace_out,
        progress=is_progress_on(args),
        shadow=args.shadow,
        resume=args.resume,
        reputation_weighting=args.reputation_weighting,
    )
    [record] = execute_runs([task], 1, False, desc="simulate", retries=0)
    del record["scenario_name"]  # a task's record names its scenario twice; the run's once
    if args.out is not None:
        write_json(args.out, record)
    if args.out != "-":
        shown = (
            "scenario",
            "policy",
            "seed",
            "selection",
            "blocks",
            "requests",
            "inferences",
            "misses",
            "miss_rate",
            "declines",
            "fallback_selections",
            "panic_selections",
            "false_exclusion_weight_share",
            "withheld_weight_share",
            "excluded_weight_share",
            "transitions",
            "in_flight_at_end",
            "app_hash",
            "wall_seconds",
            "inferences_per_second",
        )
        width = max(len(k) for k in shown)
        for key in shown:
            print(f"{key.ljust(width)}  {format_value(record[key])}")
        for key in ("detection_delay", "recovery_delay"):
            d = record[key]
            print(
                f"{key.ljust(width)}  median {d['median']}, mean {format_value(d['mean'])}, n {d['count']}"
            )
    return 0
