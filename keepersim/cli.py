"""The ``keepersim`` command.

Subcommands are a registry: each command is one ``add_<name>_command(subparsers)`` function that
adds its parser and sets ``handler`` (a function ``(argparse.Namespace) -> int``) with
``set_defaults``. To add a command, write such a function (import heavy modules inside the
handler, so ``keepersim --help`` stays fast) and append it to :data:`COMMANDS`, or decorate it
with :func:`register_command`.

Errors from bad input (a missing or invalid scenario, an unknown policy, an invalid governance
entry...) print ``keepersim: error: ...`` on stderr, without a traceback, and exit with status 2
(as argparse does for bad arguments). Handlers signal such errors by raising :class:`UsageError`
or one of :data:`INPUT_ERRORS`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from keepersim.argtypes import get_float_type, get_int_type, parse_name_list, parse_seed

__all__ = [
    "COMMANDS",
    "UsageError",
    "add_compare_command",
    "add_scenarios_command",
    "add_simulate_command",
    "build_parser",
    "main",
    "register_command",
]

CommandAdder = Callable[[Any], object]
DEFAULT_REPORT_DIR = "keepersim-report"
DEFAULT_COMPARE_SCENARIO = "mainnet_like"
DEFAULT_COMPARE_SEEDS = 3


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def _input_errors() -> tuple[type[BaseException], ...]:
    from keepersim.report.compare import CompareError
    from keepersim.sim.scenario import ScenarioError
    from keepersim.types.errors import KeepersimError

    return (UsageError, ScenarioError, CompareError, KeepersimError, OSError)


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _progress(args: argparse.Namespace) -> bool:
    """On unless ``--no-progress`` (keepersim.progress picks a bar or plain lines)."""
    return getattr(args, "progress", None) is not False


def _add_progress_option(parser: argparse.ArgumentParser) -> None:
    from keepersim.progress import PROGRESS_HELP

    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=PROGRESS_HELP,
    )


def _add_resume_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run in --store-dir from its last committed block (same inputs; "
        "an empty folder starts afresh); ends as an uninterrupted run would",
    )


def _add_reputation_weighting_option(parser: Any) -> None:
    parser.add_argument(
        "--reputation-weighting",
        action="store_true",
        help="select executors by weight x reputation (the fork's PR #8) instead of by weight "
        "alone as upstream (the default)",
    )


def _check_resume_option(args: argparse.Namespace) -> None:
    if args.resume and (args.store_dir is None or args.store != "leveldb"):
        raise UsageError("--resume needs --store-dir (and --store leveldb): the run to go on with")


def _load_scenario_arg(value: str, seed: int | None) -> tuple[Any, int | None]:
    """A built-in name (built with ``seed``, default 1) or a scenario file. Returns the scenario
    and the run seed override (None: the scenario's own seed)."""
    from keepersim.sim.scenario import load_scenario
    from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios

    if value in list_builtin_scenarios() and not Path(value).exists():
        return get_builtin_scenario(value, 1 if seed is None else seed), seed
    path = Path(value)
    if not path.exists():
        raise UsageError(
            f"{value!r} is neither a built-in scenario ({', '.join(list_builtin_scenarios())}) "
            "nor an existing file (see `keepersim scenarios list`)"
        )
    return load_scenario(path), seed


def _read_json(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{what} {path!r}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc


def _write_json(path: str, data: Any) -> None:
    from keepersim.outputs import write_text_atomic

    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(path, text)


def _check_output_args(
    args: argparse.Namespace, files: Sequence[str] = (), folders: Sequence[str] = ()
) -> None:
    """Check (and create) the output paths given by the flags ``files`` / ``folders`` (argparse
    dests) before any work; '-' (stdout) and unset flags are skipped."""
    from keepersim.outputs import check_output_file, check_output_folder

    for dest in files:
        value = getattr(args, dest, None)
        if value is not None and value != "-":
            check_output_file(value, "--" + dest.replace("_", "-"))
    for dest in folders:
        value = getattr(args, dest, None)
        if value is not None:
            check_output_folder(value, "--" + dest.replace("_", "-"))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------


def add_simulate_command(subparsers: Any) -> None:
    from keepersim.sim.driver import GOVERNANCE_HELP

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
    parser.add_argument("--policy", default="gonka", help="health policy (default: gonka)")
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
    _add_resume_option(parser)
    _add_reputation_weighting_option(parser)
    parser.add_argument(
        "--shadow",
        action="store_true",
        help="shadow mode: the policy only reports whom it would exclude",
    )
    _add_progress_option(parser)
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    from keepersim.sim.driver import (
        build_params,
        get_known_policies,
        parse_governance,
        run_scenario,
    )

    if args.policy not in get_known_policies():
        raise UsageError(
            f"--policy: unknown policy {args.policy!r}; known: {', '.join(get_known_policies())}"
        )
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if args.store == "memory" and args.store_dir is not None:
        raise UsageError("--store-dir needs --store leveldb")
    _check_resume_option(args)
    scenario, seed = _load_scenario_arg(args.scenario, args.seed)
    governance: list[Any] = []
    if args.governance is not None:
        data = _read_json(args.governance, "governance file")
        base = build_params(
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
    _check_output_args(args, files=("out", "trace_out"), folders=("store_dir",))
    result = run_scenario(
        scenario,
        args.policy,
        seed=seed,
        store=args.store,
        store_dir=args.store_dir,
        governance=governance,
        trace_out=args.trace_out,
        progress=_progress(args),
        shadow=args.shadow,
        resume=args.resume,
        reputation_weighting=args.reputation_weighting,
    )
    record = result.to_dict()
    if args.out is not None:
        _write_json(args.out, record)
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
            "excluded_weight_share",
            "transitions",
            "in_flight_at_end",
            "app_hash",
            "wall_seconds",
            "inferences_per_second",
        )
        width = max(len(k) for k in shown)
        for key in shown:
            print(f"{key.ljust(width)}  {_fmt(record[key])}")
        for key in ("detection_delay", "recovery_delay"):
            d = record[key]
            print(
                f"{key.ljust(width)}  median {d['median']}, mean {_fmt(d['mean'])}, n {d['count']}"
            )
    return 0


# --------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------


def add_compare_command(subparsers: Any) -> None:
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
        help=f"built-in names or scenario files (default: {DEFAULT_COMPARE_SCENARIO})",
    )
    parser.add_argument(
        "--policies",
        type=parse_name_list,
        default=None,
        help="comma-separated policies (default: every registered policy)",
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
    _add_reputation_weighting_option(parser)
    _add_progress_option(parser)
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    import time

    from keepersim.report.compare import compare
    from keepersim.sim.driver import get_known_policies

    # parse_name_list: a non-empty list without empty names
    policies = get_known_policies() if args.policies is None else args.policies
    unknown = [p for p in policies if p not in get_known_policies()]
    if unknown:
        raise UsageError(
            f"--policies: unknown policy {unknown[0]!r}; known: {', '.join(get_known_policies())}"
        )
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    _check_output_args(args, folders=("out",))
    started = time.perf_counter()
    report = compare(
        args.scenarios or [DEFAULT_COMPARE_SCENARIO],
        policies,
        args.seeds,
        args.out,
        store=args.store,
        progress=_progress(args),
        jobs=args.jobs,
        plots=not args.no_plots,
        reputation_weighting=args.reputation_weighting,
    )
    wall = time.perf_counter() - started
    print(
        f"\n{len(report['runs'])} runs in {wall:.1f} s; report: "
        f"{os.path.join(args.out, 'report.json')}"
    )
    return 0


# --------------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------------


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
    _add_progress_option(parser)
    parser.set_defaults(handler=run_sweep_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    """0 when every run finished, 1 when some failed (their rows say why), 2 on bad input."""
    from keepersim.runs.sweep import run_sweep

    if args.address is not None and args.engine != "ray":
        raise UsageError("--address is for --engine ray only")
    result = run_sweep(
        args.spec,
        args.out,
        engine=args.engine,
        jobs=args.jobs,
        address=args.address,
        resume=args.resume,
        store=args.store,
        progress=_progress(args),
        plots=not args.no_plots,
    )
    skipped = f", {result.skipped} already done" if result.skipped else ""
    failed = f", {result.failed} failed" if result.failed else ""
    print(
        f"\n{result.executed} runs in {result.wall_seconds:.1f} s{skipped}{failed}; "
        f"results: {os.path.join(args.out, 'runs.csv')}, summary.csv"
    )
    return 1 if result.failed else 0


# --------------------------------------------------------------------------------------------
# proposal
# --------------------------------------------------------------------------------------------


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
    _add_progress_option(parser)
    parser.set_defaults(handler=run_proposal_command)


def run_proposal_command(args: argparse.Namespace) -> int:
    """0 with a report, 2 on an invalid proposal (the rule it breaks) or bad input."""
    from keepersim.outputs import check_output_folder
    from keepersim.proposal import load_proposal
    from keepersim.proposal.compare import DEFAULT_SCENARIOS, compare_proposal
    from keepersim.proposal.report import format_table, format_verdicts, write_proposal_report

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
        progress=_progress(args),
    )
    write_proposal_report(report, args.out, plots=not args.no_plots)
    when = "from genesis" if args.at_height is None else f"sent at height {args.at_height}"
    print(f"proposal: {proposal.title} ({', '.join(proposal.get_message_types())}; {when})\n")
    print(format_table(report))
    for line in format_verdicts(report):
        print(line)
    print(f"\nreport: {os.path.join(args.out, 'proposal.json')}, proposal.csv, plots")
    return 0


# --------------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------------


def _pair(kind: type[float] | type[int]) -> Callable[[str], tuple[float, float]]:
    def parse(text: str) -> tuple[float, float]:
        parts = text.split(",")
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(f"expected LO,HI, got {text!r}")
        try:
            return kind(parts[0]), kind(parts[1])
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected two numbers LO,HI, got {text!r}") from exc

    return parse


def add_scenarios_command(subparsers: Any) -> None:
    from keepersim.sim import scenario as lim

    parser = subparsers.add_parser(
        "scenarios", help="list the built-in scenarios or generate a new one"
    )
    sub = parser.add_subparsers(dest="scenarios_command", metavar="{list,generate}")
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
    gen.add_argument("--degraded-miss", type=_pair(float), default=(0.15, 0.3), metavar="LO,HI")
    gen.add_argument("--healthy-miss", type=_pair(float), default=(0.005, 0.02), metavar="LO,HI")
    gen.add_argument(
        "--outage-share", type=get_float_type(0, 1), default=0.0, help="weight share with outages"
    )
    gen.add_argument(
        "--capacity",
        type=get_int_type(1, lim.MAX_CAPACITY),
        default=None,
        help="in-flight capacity per node",
    )
    gen.add_argument("--latency", type=_pair(int), default=(1, 8), metavar="LO,HI")
    gen.add_argument(
        "--expiration-blocks", type=get_int_type(1, lim.MAX_EXPIRATION_BLOCKS), default=150
    )
    gen.set_defaults(handler=run_scenarios_generate)


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

    _check_output_args(args, files=("out",))
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


# --------------------------------------------------------------------------------------------
# Registry and entry point
# --------------------------------------------------------------------------------------------

from keepersim.export.cli import add_export_command  # noqa: E402
from keepersim.replay.cli import add_replay_command  # noqa: E402
from keepersim.server.cli import add_serve_command  # noqa: E402
from keepersim.termination import (  # noqa: E402
    Terminated,
    process_sigterm,
    reset_terminated,
)


#: Every subcommand, in help order. Append an ``add_<name>_command`` function to add one.
def add_params_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "params",
        help="print the module's params (the chain's, and keepersim's extension)",
        description=(
            "Print the params of a preset as the chain's REST gateway answers "
            '/productscience/inference/inference/params ({"params": {...}}: the chain\'s '
            "Params, every field, 64-bit integers as strings, unset messages as null), with "
            'keepersim\'s extension params beside them ("extension_params"). '
            "default: the chain's code defaults (DefaultParams() at gonka v0.2.14, ee730031); "
            "mainnet: the live network's values reconstructed from its genesis and upgrade "
            "handlers."
        ),
    )
    parser.add_argument(
        "--preset", choices=("default", "mainnet"), default="default", help="(default: default)"
    )
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    parser.set_defaults(handler=run_params)


def run_params(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from keepersim.types.chain_json import compute_chain_json
    from keepersim.types.params import get_preset_params

    if args.out:
        from keepersim.outputs import check_output_file

        check_output_file(args.out, "--out")
    params = get_preset_params(args.preset)
    data = {
        "params": compute_chain_json(params.params),
        "extension_params": json_format.MessageToDict(
            params.extension_params,
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        ),
    }
    if args.out:
        _write_json(args.out, data)
    else:
        print(json.dumps(data, indent=2))
    return 0


COMMANDS: list[CommandAdder] = [
    add_simulate_command,
    add_compare_command,
    add_sweep_command,
    add_proposal_command,
    add_scenarios_command,
    add_params_command,
    add_replay_command,
    add_serve_command,
    add_export_command,
]


class _Parser(argparse.ArgumentParser):
    """argparse with the command's one-line error style: ``keepersim: error: argument --port:
    expected ...``, exit status 2 (subcommand parsers inherit the class)."""

    def error(self, message: str) -> Any:  # argparse's signature: NoReturn
        print(f"keepersim: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def register_command(adder: CommandAdder) -> CommandAdder:
    """Decorator: add a subcommand (``adder(subparsers)``) to the registry."""
    if adder not in COMMANDS:
        COMMANDS.append(adder)
    return adder


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="keepersim",
        description="Deterministic simulator of the Gonka chain's inference module.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for adder in COMMANDS:
        adder(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input, 130 interrupted,
    143 terminated by SIGTERM)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    reset_terminated()
    previous = signal.signal(signal.SIGTERM, process_sigterm)
    try:
        return _main(argv)
    except Terminated:  # arrived outside the handler's own try (e.g. while parsing)
        print("keepersim: terminated", file=sys.stderr)
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)
        reset_terminated()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status = handler(args)
    except _input_errors() as exc:
        message = str(exc).strip() or type(exc).__name__
        print(f"keepersim: error: {message}", file=sys.stderr)
        return 2
    except Terminated:
        print("keepersim: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("keepersim: interrupted", file=sys.stderr)
        return 130
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
