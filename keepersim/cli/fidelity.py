"""``keepersim fidelity``: each recorded epoch's fleet under ``none`` against what the chain
recorded (keepersim.chaindata.fidelity; docs/mainnet-epochs.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keepersim.cli.argtypes import get_int_type
from keepersim.cli.common import (
    add_progress_option,
    check_output_args,
    is_progress_on,
    require_extra,
    write_json,
)
from keepersim.cli.scenarios import add_epoch_options

__all__ = ["add_fidelity_command", "run_fidelity"]


def add_fidelity_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fidelity",
        help="run recorded epochs under none and compare with what the chain recorded",
        description=(
            "For each recorded epoch: build its fleet (as `scenarios from-chain`), run it under "
            "none (no health filter: what the chain did) with seeds 1..N, and compare totals, "
            "each participant's share of requests and its misses with the recorded summary. "
            "Prints a table; with --out writes fidelity.json, fidelity.csv (per participant) "
            "and fidelity_share.png."
        ),
    )
    add_epoch_options(parser)
    parser.add_argument(
        "--seeds", type=get_int_type(1, 1000), default=5, help="runs per epoch (default 5)"
    )
    parser.add_argument("--out", default=None, metavar="OUTDIR", help="folder for the files")
    parser.add_argument(
        "--jobs",
        type=get_int_type(1),
        default=None,
        help="worker processes (default: every core; 1: in this process)",
    )
    add_progress_option(parser)
    parser.set_defaults(handler=run_fidelity)


def run_fidelity(args: argparse.Namespace) -> int:
    from pathlib import Path

    from keepersim.chaindata.epoch_folder import load_epoch_source
    from keepersim.chaindata.fidelity import (
        compute_epoch_fidelity,
        format_fidelity_table,
        get_fidelity_csv,
        write_fidelity_plot,
    )
    from keepersim.outputs import write_text_atomic

    if args.out is not None:
        require_extra("plots", "fidelity --out (its PNG)")
    check_output_args(args, folders=("out",))
    records = load_epoch_source(args.source, args.epochs)
    results = []
    for record in records:
        results.append(
            compute_epoch_fidelity(
                record,
                seeds=args.seeds,
                miss_timing=args.miss_timing,
                traffic=args.traffic,
                profile=args.traffic_profile,
                jobs=args.jobs,
                progress=is_progress_on(args),
            )
        )
    summaries = [r["summary"] for r in results]
    table = format_fidelity_table(summaries)
    sys.stdout.write(table)
    if args.out is not None:
        out = Path(args.out)
        write_json(out / "fidelity.json", {"epochs": summaries})
        rows = [row for r in results for row in r["participants"]]
        write_text_atomic(out / "fidelity.csv", get_fidelity_csv(rows))
        write_text_atomic(out / "fidelity.txt", table)
        write_fidelity_plot(results, out / "fidelity_share.png")
        print(f"wrote {out}/fidelity.json, fidelity.csv, fidelity.txt, fidelity_share.png")
    return 0
