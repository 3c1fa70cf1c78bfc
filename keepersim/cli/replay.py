"""``keepersim replay``: replay a trace as recorded (policies watching) or what-if (a policy
choosing), write report.json (and exclusions.png) to --out, print a short table.

The handler returns the exit status: 0 done, 1 the as-recorded replay found mismatches or
rejected transactions, or replayed a partial trace (``--allow-partial``); bad input (a trace
without its closing record: cut, or its run did not finish) (a malformed trace line, a bad governance file, an unknown
policy) raises one of :func:`keepersim.cli.common.get_input_errors`, exit status 2. Heavy modules
are imported inside the handler, so registering the command costs nothing.

The governance file is the simulator's format (``keepersim.sim.governance.parse_governance``), each
entry resolved against the trace's first params. Replays run as trace tasks on the runs engine
(:mod:`keepersim.runs.traces`): as-recorded one task (its policies in lockstep), what-if one
task per policy (``--jobs`` workers).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from keepersim.cli.argtypes import get_int_type, parse_name_list, parse_seed
from keepersim.cli.common import PROGRESS_HELP, read_json, require_extra, write_json
from keepersim.inputs import check_stream_file
from keepersim.outputs import check_output_folder, get_atomic_path

if TYPE_CHECKING:
    from keepersim.replay.estimator import BetaPrior
    from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams

__all__ = ["add_replay_command", "load_governance_file", "run_replay_command"]

_MAX_PLOTTED = 40


def add_replay_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``replay`` on an ``argparse`` subparsers object; returns the subparser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="replay a trace: as recorded (policies watch) or what-if (a policy chooses)",
        description=(
            "Replay a keepersim trace (docs/trace-format.md). as-recorded: the recorded "
            "assignments and outcomes go through the chain once per policy, each policy in "
            "shadow mode; the chain's epoch summaries and statuses are checked against the "
            "recording, and each policy's would-be exclusions are reported. what-if: the "
            "recorded requests are replayed with each policy choosing executors and outcomes "
            "drawn from per-participant estimates (paired across policies by --seed)."
        ),
    )
    parser.add_argument("trace", help="trace file (JSON lines)")
    parser.add_argument(
        "--mode", choices=("as-recorded", "what-if"), default="as-recorded", help="replay mode"
    )
    parser.add_argument(
        "--policies",
        type=parse_name_list,
        default="gonka",
        help="comma-separated policy names (default: gonka)",
    )
    parser.add_argument(
        "--seed",
        type=parse_seed,
        default=None,
        help="what-if seed (default: the trace's seed, or 0)",
    )
    parser.add_argument(
        "--store", choices=("leveldb", "memory"), default="memory", help="chain store"
    )
    parser.add_argument(
        "--store-dir",
        default=None,
        help="folder for leveldb stores, one per policy (default: OUT/stores); a replay with "
        "its own --store-dir commits a checkpoint with every block so that --resume can go on",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --store leveldb --store-dir D: go on with the replay in D's stores from their "
        "last committed block (same trace and options); ends as an uninterrupted replay would",
    )
    parser.add_argument(
        "--skip-bad", action="store_true", help="skip malformed lines (listed in the report)"
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="replay a trace without its closing record (cut, or its run did not finish) up to "
        "its last whole line; the report says partial: true and where the trace ends, and an "
        "as-recorded replay is then never ok (exit 1)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="as-recorded: stop at the first rejected transaction",
    )
    parser.add_argument(
        "--governance", default=None, help="JSON schedule of params changes by height"
    )
    parser.add_argument("--out", default=None, help="folder for report.json and exclusions.png")
    parser.add_argument(
        "--estimator",
        choices=("segments", "windows"),
        default=None,
        help="what-if estimator: change-point segments per participant (the default, "
        "calibrated: docs/what-if.md) or fixed windows (the default with --window-blocks)",
    )
    parser.add_argument(
        "--window-blocks",
        type=get_int_type(1),
        default=None,
        help="what-if estimator window (blocks; --estimator windows, default 1000)",
    )
    parser.add_argument(
        "--prior", default="1,30", help="what-if Beta prior a,b of miss probabilities"
    )
    parser.add_argument(
        "--jobs",
        type=get_int_type(1),
        default=1,
        help="what-if: worker processes, the policies run in parallel (default 1: one after "
        "another in this process)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=PROGRESS_HELP,
    )
    parser.set_defaults(handler=run_replay_command)
    return parser


def _parse_policies(value: str | list[str]) -> list[str]:
    """The --policies list (already checked by parse_name_list when it came from argparse)."""
    from keepersim.replay.common import ReplayError
    from keepersim.types.policies import get_unknown_policy_problem

    try:
        names = value if isinstance(value, list) else parse_name_list(value)
    except argparse.ArgumentTypeError as exc:
        raise ReplayError(f"--policies: {exc}") from None
    unknown = get_unknown_policy_problem(names, on_chain=True)
    if unknown:
        raise ReplayError(f"--policies: {unknown}")
    return names


def _parse_prior(text: str) -> BetaPrior:
    from keepersim.replay.common import ReplayError
    from keepersim.replay.estimator import BetaPrior

    try:
        a, b = (float(x) for x in text.split(","))
        return BetaPrior(a, b)
    except ValueError as exc:
        raise ReplayError(f"--prior: expected 'a,b' with a, b > 0, got {text!r} ({exc})") from None


def _read_base_params(trace: str, skip_bad: bool, allow_partial: bool) -> ModuleParams:
    from keepersim.replay.common import open_trace
    from keepersim.trace.records import BadLines

    prologue, records = open_trace(
        trace, skip_bad=skip_bad, bad_lines=BadLines(), allow_partial=allow_partial
    )
    close = getattr(records, "close", None)
    if close is not None:
        close()
    return prologue.params.params


def load_governance_file(path: str, base: ModuleParams) -> list[tuple[int, ModuleParams]]:
    """A governance schedule file in the simulator's format, resolved against ``base``."""
    from keepersim.sim.governance import parse_governance

    return parse_governance(read_json(path, "governance file"), base, source=path)


def run_replay_command(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    return _run(args, stdout or sys.stdout)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    from keepersim.replay.calibration import compute_calibration_note
    from keepersim.replay.common import ReplayError
    from keepersim.runs.engines import execute_runs
    from keepersim.runs.traces import get_trace_estimate, make_trace_task

    policies = _parse_policies(args.policies)
    if args.out:
        require_extra("plots", "replay --out (exclusions.png)")
    check_stream_file(args.trace, "trace")
    out_dir = check_output_folder(args.out, "--out") if args.out else None
    if args.store_dir:
        check_output_folder(args.store_dir, "--store-dir")
    store_dir = args.store_dir or (str(out_dir / "stores") if out_dir else None)
    if args.store == "leveldb" and store_dir is None:
        raise ReplayError("--store leveldb needs --store-dir or --out")
    if args.resume and (args.store != "leveldb" or not args.store_dir):
        raise ReplayError("--resume needs --store leveldb and the run's --store-dir")
    # A replay with its own --store-dir checkpoints every block, so that it can be resumed
    # (as simulate with --store-dir); stores kept under --out only are not checkpointed.
    resumable = bool(args.store_dir)
    governance = None
    if args.governance:
        governance = load_governance_file(
            args.governance, _read_base_params(args.trace, args.skip_bad, args.allow_partial)
        )
    progress = args.progress is not False
    jobs = getattr(args, "jobs", 1) or 1
    # One task: its own progress over blocks; several in workers: progress over the runs.
    options: dict[str, Any] = {
        "store_dir": store_dir,
        "skip_bad": args.skip_bad,
        "resume": args.resume,
        "resumable": resumable,
        "allow_partial": args.allow_partial,
        "progress": progress and jobs == 1,
    }
    if args.mode == "as-recorded":
        task = make_trace_task(
            args.trace,
            "as-recorded",
            policies,
            store=args.store,
            governance=governance or (),
            strict=args.strict,
            **options,
        )
        [data] = execute_runs([task], 1, False, desc="replay", retries=0)
        print_as_recorded(data, out)
        if out_dir is not None:
            write_json(out_dir / "report.json", data, allow_nan=True)
            plot_exclusions(
                {p: s["exclusions"] for p, s in data["policies_shadow"].items()},
                out_dir / "exclusions.png",
                title=f"{os.path.basename(args.trace)}: would-be exclusions (start heights)",
                heights=(data["first_height"], data["last_height"]),
            )
        return 0 if data["ok"] else 1
    prior = _parse_prior(args.prior)
    method = args.estimator or ("windows" if args.window_blocks is not None else "segments")
    if method == "segments" and args.window_blocks is not None:
        raise ReplayError("--window-blocks applies to --estimator windows only")
    window_blocks = args.window_blocks or 1000
    header, estimator = get_trace_estimate(
        args.trace,
        method=method,
        window_blocks=window_blocks,
        prior=(prior.a, prior.b),
        skip_bad=args.skip_bad,
        allow_partial=args.allow_partial,
    )
    seed = args.seed if args.seed is not None else (header.seed or 0)
    settings = {"method": method, "window_blocks": window_blocks, "prior": [prior.a, prior.b]}
    tasks = [
        make_trace_task(
            args.trace,
            "what-if",
            [policy],
            seed=seed,
            store=args.store,
            governance=governance or (),
            estimator=settings,
            **options,
        )
        for policy in policies
    ]
    records = execute_runs(tasks, jobs, progress and jobs > 1, desc="what-if", retries=0)
    runs = dict(zip(policies, records, strict=True))
    estimate = next(iter(runs.values()))["estimator"]
    for run in runs.values():
        run.pop("estimator")
    data = {
        "mode": "what-if",
        "trace": args.trace,
        "seed": seed,
        "partial": header.cut is not None,
        "trace_end": None if header.cut is None else header.cut.to_dict(),
        "estimator": estimate,
        "calibration": compute_calibration_note(
            estimator.get_settings(), None, header.scenario, estimator.declines
        ),
        "runs": runs,
    }
    print_what_if(runs, out, data["calibration"])
    if out_dir is not None:
        write_json(out_dir / "report.json", data, allow_nan=True)
        plot_exclusions(
            {p: r["exclusions"] for p, r in runs.items()},
            out_dir / "exclusions.png",
            title=f"{os.path.basename(args.trace)}: what-if exclusions (seed {seed})",
            heights=(header.first_height, header.last_height),
        )
    return 0


def _pct(part: int, whole: int) -> str:
    return f"{part} ({100 * part / whole:.1f}%)" if whole else str(part)


def print_partial(trace: str, end: dict[str, int] | None, out: TextIO) -> None:
    """The table's line for a partial trace (``--allow-partial``): where it ends."""
    if end is not None:
        print(
            f"partial: true: {trace} has no closing record (cut, or its run did not finish); "
            f"replayed to its last whole line {end['line']} (height {end['height']}), not to "
            f"the recorded last height {end['recorded_last_height']}: not a whole replay",
            file=out,
        )


def print_as_recorded(data: dict[str, Any], out: TextIO) -> None:
    """The as-recorded table, from the report's JSON (``ReplayReport.to_dict()``)."""
    r = data["recorded"]
    summaries = data["summaries"]
    print_partial(data["trace"], data["trace_end"], out)
    print(
        f"trace {data['trace']}: heights {data['first_height']}..{data['last_height']} "
        f"({data['blocks']} blocks), {r['inferences']} inferences recorded: "
        f"{r['misses']} misses, {r['successes']} successes, {r['declines']} declines",
        file=out,
    )
    print(
        f"checks: {len(summaries['checked'])} epoch summaries, "
        f"{summaries['mismatch_count']} summary mismatches, "
        f"{data['status']['mismatch_count']} status mismatches, "
        f"{data['tx_failures']['count']} rejected txs, {data['bad_lines']['count']} bad lines "
        "skipped",
        file=out,
    )
    for m in summaries["mismatches"][:10]:
        print(
            f"  epoch {m['epoch']} {m['participant']} {m['field']}: "
            f"exported {m['exported']} computed {m['computed']} (line {m['line']})",
            file=out,
        )
    rows = [("policy", "kept out", "blocks", "misses inside", "successes inside", "fallback")]
    notes: list[str] = []
    for d in data["policies_shadow"].values():
        if d["selection_bias"]:
            notes.append(textwrap.fill(f"* {d['selection_bias']}", 100, subsequent_indent="  "))
        rows.append(
            (
                f"{d['policy']} *" if d["is_recording_policy"] else d["policy"],
                str(d["excluded_participants"]),
                str(d["excluded_blocks"]),
                _pct(d["misses_inside"], r["misses"]),
                _pct(d["successes_inside"], r["successes"]),
                str(d["fallback_blocks"]),
            )
        )
    _print_table(rows, out)
    for note in notes:
        print(note, file=out)


def print_what_if(
    runs: dict[str, dict[str, Any]], out: TextIO, calibration: dict[str, Any] | None = None
) -> None:
    first = next(iter(runs.values()))
    rec = first["recorded"]
    print_partial(first["trace"], first.get("trace_end"), out)
    print(
        f"trace {first['trace']}: {rec['inferences']} requests replayed, seed {first['seed']}; "
        f"recorded miss rate {rec['miss_rate']:.4f}",
        file=out,
    )
    rows = [
        (
            "policy",
            "inferences",
            "misses",
            "miss_rate",
            "fallback",
            "false_excl_share",
            "withheld_share",
            "calib_err_med",
            "calib_err_p90",
        )
    ]
    per_policy = (calibration or {}).get("per_policy") or {}
    for policy, run in runs.items():
        error = per_policy.get(policy) or {}
        rows.append(
            (
                policy,
                str(run["inferences"]),
                str(run["misses"]),
                f"{run['miss_rate']:.4f}",
                str(run["fallback_selections"]),
                f"{run['false_exclusion_weight_share']:.4f}",
                f"{run['withheld_weight_share']:.4f}",
                _format_error(error.get("median_abs_relative_error")),
                _format_error(error.get("p90_abs_relative_error")),
            )
        )
    _print_table(rows, out)
    if calibration is not None:
        print_calibration(calibration, out)


def _format_error(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def print_calibration(calibration: dict[str, Any], out: TextIO) -> None:
    """The estimator's calibration error against simulate, and where it does not apply."""
    if calibration.get("available"):
        share = calibration.get("share_within")
        tolerance = calibration.get("tolerance")
        print(
            "calibration (what-if vs simulate on none-recorded traces, "
            f"{calibration.get('source')}): calib_err = |what-if / simulate - 1| of the miss "
            f"rate; {_format_error(share)} of {calibration.get('cells')} cells (seeds "
            f"{calibration.get('seeds')}) within {_format_error(tolerance)}, "
            f"{calibration.get('rank_disagreements')} rank disagreements in "
            f"{calibration.get('separated_pairs')} separated pairs",
            file=out,
        )
    for warning in calibration.get("warnings", ()):
        print(textwrap.fill(f"* {warning}", 100, subsequent_indent="  "), file=out)


def _print_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)), file=out)


def plot_exclusions(
    exclusions: dict[str, dict[str, Any]],
    path: Path,
    *,
    title: str,
    heights: tuple[int, int],
) -> None:
    """One panel per policy: each participant's exclusion intervals (the most excluded first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(exclusions), 1)
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.2 + 2.2 * n), squeeze=False)
    for ax, (policy, by_participant) in zip(axes[:, 0], exclusions.items(), strict=False):
        ranked = sorted(by_participant.items(), key=lambda kv: (-kv[1]["blocks"], kv[0]))
        shown = ranked[:_MAX_PLOTTED]
        for row, (_, entry) in enumerate(shown):
            spans = [(a, b - a + 1) for a, b in entry["intervals"]]
            ax.broken_barh(spans, (row - 0.4, 0.8), color="tab:red")
        ax.set_yticks(range(len(shown)))
        ax.set_yticklabels([address for address, _ in shown], fontsize=6)
        ax.set_xlim(heights[0], heights[1] + 1)
        ax.set_ylim(-1, max(len(shown), 1))
        extra = f" (top {_MAX_PLOTTED} of {len(ranked)})" if len(ranked) > _MAX_PLOTTED else ""
        ax.set_title(f"{policy}: {len(ranked)} participants kept out{extra}", fontsize=9)
        ax.set_xlabel("start height")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with get_atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
