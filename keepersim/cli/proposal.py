"""``keepersim proposal``: check a governance proposal as the chain would, then run current vs proposed params on paired seeds."""

from __future__ import annotations

import argparse
import os
from typing import Any

from keepersim.cli.argtypes import get_int_type, parse_name_list
from keepersim.cli.common import add_progress_option, is_progress_on, require_extra

__all__ = ["add_proposal_command", "run_proposal_command"]


def add_proposal_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "proposal",
        help="check a governance proposal as the chain would, then compare current vs proposed",
        description=(
            "Validate PROPOSAL.json (the file `inferenced tx gov submit-proposal` takes: "
            "/inference.inference.MsgUpdateParams and/or /keepersim.v1.MsgUpdateExtensionParams "
            "from the x/gov module account) as the chain would, then run each scenario or trace "
            "under the current and the proposed params on paired seeds and print metric | "
            "current | proposed | diff | 95%% CI and a verdict. DIR gets proposal.json, "
            "proposal.csv and PNG plots. Exit 2 on an invalid proposal. See docs/governance.md."
        ),
    )
    parser.add_argument("proposal", metavar="PROPOSAL.json", help="the proposal file")
    parser.add_argument(
        "--scenarios",
        type=parse_name_list,
        default=None,
        help="built-in names or scenario files, comma-separated (default: mainnet_like; "
        "none when --trace is given)",
    )
    parser.add_argument(
        "--trace", action="append", default=[], metavar="FILE", help="a trace (what-if; repeat)"
    )
    parser.add_argument(
        "--seeds", type=get_int_type(1), default=3, help="paired seeds per scenario (default 3)"
    )
    parser.add_argument(
        "--at-height",
        type=get_int_type(1),
        default=None,
        metavar="H",
        help="send the proposal as governance in block H (default: in force from genesis)",
    )
    parser.add_argument(
        "--policy", default=None, help="the current health policy (default: the default params')"
    )
    parser.add_argument(
        "--blocks", type=get_int_type(1), default=None, help="cut each scenario to N blocks"
    )
    parser.add_argument("--jobs", type=get_int_type(1), default=None, help="worker processes")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_progress_option(parser)
    parser.set_defaults(handler=run_proposal_command)


def run_proposal_command(args: argparse.Namespace) -> int:
    """0 with a report, 2 on an invalid proposal (the rule it breaks) or bad input."""
    from keepersim.inputs import check_stream_file
    from keepersim.outputs import check_output_folder
    from keepersim.proposal import load_proposal
    from keepersim.proposal.compare import DEFAULT_SCENARIOS, compare_proposal
    from keepersim.proposal.report import format_table, format_verdicts, write_proposal_report

    if not args.no_plots:
        require_extra("plots", "plotting", " (or --no-plots)")
    for trace in args.trace:
        check_stream_file(trace, "trace")
    check_output_folder(args.out, "--out")
    proposal = load_proposal(args.proposal)
    scenarios = args.scenarios
    if scenarios is None:
        scenarios = [] if args.trace else list(DEFAULT_SCENARIOS)
    report = compare_proposal(
        proposal,
        scenarios=scenarios,
        traces=args.trace,
        seeds=args.seeds,
        at_height=args.at_height,
        policy=args.policy,
        blocks=args.blocks,
        jobs=args.jobs,
        progress=is_progress_on(args),
    )
    write_proposal_report(report, args.out, plots=not args.no_plots)
    when = "from genesis" if args.at_height is None else f"sent at height {args.at_height}"
    print(f"proposal: {proposal.title} ({', '.join(proposal.get_message_types())}; {when})\n")
    print(format_table(report))
    for line in format_verdicts(report):
        print(line)
    print(f"\nreport: {os.path.join(args.out, 'proposal.json')}, proposal.csv, plots")
    return 0
