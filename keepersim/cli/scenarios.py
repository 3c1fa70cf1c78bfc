"""``keepersim scenarios``: list the built-in scenarios, generate a scenario file, or build
scenario files from the chain's recorded epochs (``from-chain``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from keepersim.cli.argtypes import get_float_type, get_int_type, parse_seed
from keepersim.cli.common import UsageError, check_output_args

__all__ = [
    "add_scenarios_command",
    "run_scenarios_from_chain",
    "run_scenarios_generate",
    "run_scenarios_list",
]


def _pair(
    kind: type[float] | type[int], lo: float, hi: float
) -> Callable[[str], tuple[float, float]]:
    """A flag type: ``LO,HI`` with ``lo <= LO <= HI <= hi``."""
    what = "integers" if kind is int else "numbers"
    expected = f"two {what} LO,HI with {lo:g} <= LO <= HI <= {hi:g}"

    def parse(text: str) -> tuple[float, float]:
        parts = text.split(",")
        try:
            if len(parts) != 2:
                raise ValueError(text)
            low, high = kind(parts[0].strip()), kind(parts[1].strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not lo <= low <= high <= hi:  # also NaN
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return low, high

    return parse


def add_scenarios_command(subparsers: Any) -> None:
    from keepersim.sim import scenario as lim

    parser = subparsers.add_parser(
        "scenarios", help="list the built-in scenarios or generate a new one"
    )
    sub = parser.add_subparsers(dest="scenarios_command", metavar="{list,generate,from-chain}")
    sub.required = True
    lister = sub.add_parser("list", help="the built-in scenarios and what they model")
    lister.set_defaults(handler=run_scenarios_list)
    gen = sub.add_parser(
        "generate",
        help="generate a scenario file from a few knobs and a seed",
        description=(
            "Generate a scenario (lognormal weights; healthy, degraded and outage nodes) and save "
            "it as a scenario file; or save a built-in scenario with --builtin."
        ),
    )
    gen.add_argument("--seed", type=parse_seed, default=1, help="generator seed (default 1)")
    gen.add_argument("--out", default="-", help="output file (default: stdout)")
    gen.add_argument("--builtin", default=None, help="save this built-in scenario instead")
    gen.add_argument("--name", default="generated", help="scenario name")
    gen.add_argument("--participants", type=get_int_type(1, lim.MAX_PARTICIPANTS), default=150)
    gen.add_argument("--blocks", type=get_int_type(1, lim.MAX_BLOCKS), default=12000)
    gen.add_argument("--epoch-length", type=get_int_type(1, lim.MAX_EPOCH_LENGTH), default=4000)
    gen.add_argument(
        "--arrivals",
        type=get_float_type(0, lim.MAX_ARRIVALS_PER_BLOCK),
        default=4.6,
        help="requests per block",
    )
    gen.add_argument(
        "--degraded-share", type=get_float_type(0, 1), default=0.1, help="weight share degraded"
    )
    gen.add_argument(
        "--degraded-miss", type=_pair(float, 0, 1), default=(0.15, 0.3), metavar="LO,HI"
    )
    gen.add_argument(
        "--healthy-miss", type=_pair(float, 0, 1), default=(0.005, 0.02), metavar="LO,HI"
    )
    gen.add_argument(
        "--outage-share", type=get_float_type(0, 1), default=0.0, help="weight share with outages"
    )
    gen.add_argument(
        "--capacity",
        type=get_int_type(1, lim.MAX_CAPACITY),
        default=None,
        help="in-flight capacity per node",
    )
    gen.add_argument(
        "--latency", type=_pair(int, 1, lim.MAX_LATENCY_BLOCKS), default=(1, 8), metavar="LO,HI"
    )
    gen.add_argument(
        "--expiration-blocks", type=get_int_type(1, lim.MAX_EXPIRATION_BLOCKS), default=150
    )
    gen.set_defaults(handler=run_scenarios_generate)
    add_from_chain_command(sub)


def add_epoch_options(parser: argparse.ArgumentParser) -> None:
    """The options shared by ``scenarios from-chain`` and ``fidelity``."""
    from keepersim.chaindata.fleet import (
        DEFAULT_TRAFFIC_PROFILE,
        MISS_TIMINGS,
        TRAFFIC_PROFILES,
        TRAFFIC_SOURCES,
    )

    parser.add_argument(
        "source",
        metavar="DIR",
        help="the chain's recorded epochs: an epoch_N folder, or a folder holding them",
    )
    parser.add_argument(
        "--epochs",
        type=parse_epochs,
        default=None,
        metavar="A-B",
        help="only these epochs (A-B or A; default: every epoch_N folder)",
    )
    parser.add_argument(
        "--miss-timing",
        choices=MISS_TIMINGS,
        default="constant",
        help="when in the epoch a participant misses (the record does not say): constant "
        "(its recorded rate all epoch, the default) or bursts (the same expected misses in "
        "3 windows covering 10%% of the epoch, placed from the seed)",
    )
    parser.add_argument(
        "--traffic",
        choices=TRAFFIC_SOURCES,
        default="auto",
        help="the epoch's requests: the parent group's number_of_requests (requests), the "
        "summaries' total (summaries), or auto (the default: requests, unless the summaries "
        "count over 1.1x as many: devshard traffic, not modelled)",
    )

    parser.add_argument(
        "--traffic-profile",
        choices=TRAFFIC_PROFILES,
        default=DEFAULT_TRAFFIC_PROFILE,
        help="the arrival rate over the epoch (the record gives totals only): trend (the "
        "default: geometric from the previous epoch's requests to this one's, continuous across "
        "the boundary) or flat (constant); an epoch whose traffic is the summaries' runs flat",
    )


def parse_epochs(text: str) -> list[int]:
    from keepersim.chaindata.fleet import get_epoch_numbers

    try:
        return list(get_epoch_numbers(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_from_chain_command(sub: Any) -> None:
    parser = sub.add_parser(
        "from-chain",
        help="build one scenario file per epoch from the chain's recorded epoch data",
        description=(
            "Build a scenario per recorded epoch (the node's REST answers in epoch_N/ folders): "
            "the sub-groups' members and weights, the epoch's requests and params, each "
            "participant's recorded miss rate, the recorded exclusions at their heights "
            "(docs/mainnet-epochs.md). Files: OUTDIR/mainnet-epoch-N.json."
        ),
    )
    add_epoch_options(parser)
    parser.add_argument("--seed", type=parse_seed, default=1, help="the scenarios' seed (1)")
    parser.add_argument(
        "--selection-path",
        choices=("auto", "classic"),
        default="auto",
        help="auto (the default): an epoch whose summaries count 2x the group's requests or "
        "more (devshard's, 251 and 252) sends its devshard share through the devshard path "
        "(the scenario key 'devshard'); classic: every request through GetRandomExecutor",
    )
    parser.add_argument(
        "--out", default=".", metavar="OUTDIR", help="folder for the scenario files (default .)"
    )
    parser.set_defaults(handler=run_scenarios_from_chain)


def run_scenarios_list(args: argparse.Namespace) -> int:
    from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios

    names = list_builtin_scenarios()
    width = max(len(n) for n in names)
    for name in names:
        s = get_builtin_scenario(name, 1)
        print(
            f"{name.ljust(width)}  {len(s.participants)} participants, {s.blocks} blocks, "
            f"{s.arrivals_per_block:g}/block. {s.description}"
        )
    return 0


def run_scenarios_generate(args: argparse.Namespace) -> int:
    from keepersim.outputs import write_text_atomic
    from keepersim.sim.generate import generate_scenario
    from keepersim.sim.scenario import format_scenario_json
    from keepersim.sim.suite import get_builtin_scenario

    check_output_args(args, files=("out",))
    if args.degraded_share + args.outage_share > 1:
        raise UsageError(
            "--degraded-share + --outage-share: expected at most 1 (shares of the total weight), "
            f"got {args.degraded_share:g} + {args.outage_share:g}"
        )
    if args.builtin is not None:
        scenario = get_builtin_scenario(args.builtin, args.seed)
    else:
        try:
            scenario = generate_scenario(
                args.name,
                args.seed,
                participants=args.participants,
                blocks=args.blocks,
                epoch_length=args.epoch_length,
                arrivals_per_block=args.arrivals,
                degraded_share=args.degraded_share,
                degraded_miss=args.degraded_miss,
                healthy_miss=args.healthy_miss,
                outage_share=args.outage_share,
                capacity=args.capacity,
                latency=args.latency,
                expiration_blocks=args.expiration_blocks,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    text = format_scenario_json(scenario)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(args.out, text)
        print(f"wrote {args.out}: {scenario.name}, {len(scenario.participants)} participants")
    return 0


def run_scenarios_from_chain(args: argparse.Namespace) -> int:
    from keepersim.chaindata.fleet import load_epoch_scenarios
    from keepersim.outputs import write_text_atomic
    from keepersim.sim.scenario import format_scenario_json

    check_output_args(args, folders=("out",))
    scenarios = load_epoch_scenarios(
        args.source,
        args.epochs,
        seed=args.seed,
        miss_timing=args.miss_timing,
        traffic=args.traffic,
        profile=args.traffic_profile,
        selection_path=args.selection_path,
    )
    texts = [(f"{s.name}.json", format_scenario_json(s), s) for s in scenarios]
    for name, text, s in texts:
        path = f"{args.out.rstrip('/')}/{name}"
        write_text_atomic(path, text)
        source = s.source or {}
        print(
            f"wrote {path}: {len(s.participants)} participants, {s.blocks} blocks, "
            f"{s.arrivals_per_block * s.blocks:.0f} requests, {len(s.events)} exclusions; "
            f"selection path: {source.get('selection_path', '')}"
        )
    return 0
