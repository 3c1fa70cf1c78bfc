"""``keepersim sweep``: policies over a grid of params, scenarios and seeds (process pool or Ray)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from keepersim.cli.argtypes import get_int_type
from keepersim.cli.common import UsageError, add_progress_option, is_progress_on, require_extra

__all__ = ["add_sweep_command", "run_sweep_command"]


def add_sweep_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run policies over a grid of params, scenarios and seeds (process pool or Ray)",
        description=(
            "Run every scenario x policy x grid point x seed of SPEC.json (plus the `none` and "
            "`oracle` baselines), streaming one row per run to DIR/runs.csv; then write "
            "DIR/summary.csv (means and 95% CIs over seeds), PNG plots and print a table.\n\n"
            'SPEC: {"scenarios": [names or files], "policies": [...], "seeds": N or [list],\n'
            '       "grid": {"extension_params.health_params.windowed.max_cooldown_blocks":\n'
            "                [200, 800], ...}}\n"
            "Grid paths start at keepersim.v1.ModuleParams (params.* the chain's, "
            "extension_params.* keepersim's). See docs/sweeps.md."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", metavar="SPEC.json", help="the sweep spec")
    parser.add_argument(
        "--engine", choices=("process", "ray"), default="process", help="where runs go"
    )
    parser.add_argument(
        "--address", default=None, help="ray: the cluster to use (default: a local one)"
    )
    parser.add_argument(
        "--jobs",
        type=get_int_type(1),
        default=None,
        help="workers (default: every core; process with 1: in this process)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip the runs already in DIR/runs.csv (the same spec only)",
    )
    parser.add_argument(
        "--store", choices=("memory", "leveldb"), default="memory", help="chain store of each run"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_progress_option(parser)
    parser.set_defaults(handler=run_sweep_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    """0 when every run finished, 1 when some failed (their rows say why), 2 on bad input."""
    from keepersim.runs.sweep import run_sweep

    if args.address is not None and args.engine != "ray":
        raise UsageError("--address is for --engine ray only")
    if not args.no_plots:
        require_extra("plots", "plotting", " (or --no-plots)")
    result = run_sweep(
        args.spec,
        args.out,
        engine=args.engine,
        jobs=args.jobs,
        address=args.address,
        resume=args.resume,
        store=args.store,
        progress=is_progress_on(args),
        plots=not args.no_plots,
    )
    skipped = f", {result.skipped} already done" if result.skipped else ""
    failed = f", {result.failed} failed" if result.failed else ""
    print(
        f"\n{result.executed} runs in {result.wall_seconds:.1f} s{skipped}{failed}; "
        f"results: {os.path.join(args.out, 'runs.csv')}, summary.csv"
    )
    return 1 if result.failed else 0
