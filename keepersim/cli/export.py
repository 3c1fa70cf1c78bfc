"""``keepersim export``: a node's epochs as a trace, resumable (see
:mod:`keepersim.export.exporter`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from keepersim.cli.argtypes import get_float_type, get_int_type
from keepersim.cli.common import PROGRESS_HELP, UsageError, require_extra, write_json
from keepersim.outputs import check_output_file, check_output_folder
from keepersim.types.rest_routes import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT

__all__ = ["add_export_command", "run_export"]

# keepersim.export.fetch's defaults, repeated so that building the parser does not import httpx
# (tests check they agree).
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_MAX_ATTEMPTS = 3


def add_export_command(subparsers: Any) -> None:
    from keepersim.export.backoff import DEFAULT_BACKOFF_BASE_SECONDS, DEFAULT_BACKOFF_CAP_SECONDS

    parser = subparsers.add_parser(
        "export",
        help="export a node's epochs (REST API) into a trace",
        description=(
            "Fetch params, epoch groups (weights, models, ML nodes), participants, inferences "
            "and epoch summaries of epochs A..B from a node's REST API (a chain node, a host "
            "root or .../chain-api, or keepersim serve), every query pinned to one height, "
            "into a trace (docs/trace-format.md, docs/export.md). Resumable: rerun the same "
            "command after a failure to continue (state in OUT.progress.json). Prints the "
            "result JSON (fetch counts, pages per epoch, notes); exit status 1 when the export "
            "stopped. With --aggregate, --out is a folder of the chain's own answers per epoch "
            "(params, epoch groups, summaries, exclusions, confirmation PoC events; the layout "
            "of the shared mainnet data), which a node keeps after pruning the inferences."
        ),
    )
    parser.add_argument(
        "--node",
        required=True,
        metavar="URL",
        help="node REST URL: a host root (/chain-api is detected) or a URL ending in /chain-api",
    )
    parser.add_argument("--epochs", required=True, metavar="A-B", help="epoch range, e.g. 3-5")
    parser.add_argument(
        "--out",
        required=True,
        metavar="TRACE|DIR",
        help="trace file to write (with --aggregate: the folder of epoch_N/ folders)",
    )
    parser.add_argument(
        "--aggregate",
        action="store_true",
        help="write each epoch's aggregates as the node answers them (params, groups, "
        "summaries, exclusions, confirmation PoC events) into --out/epoch_N/; works for "
        "epochs whose inferences the node has pruned (docs/export.md)",
    )
    parser.add_argument(
        "--concurrency",
        type=get_int_type(1),
        default=DEFAULT_CONCURRENCY,
        help="worker threads (default 4)",
    )
    parser.add_argument(
        "--timeout",
        type=get_float_type(0, lo_open=True),
        default=DEFAULT_TIMEOUT_SECONDS,
        help="request timeout, s (60)",
    )
    parser.add_argument(
        "--max-attempts",
        type=get_int_type(1),
        default=DEFAULT_MAX_ATTEMPTS,
        help="attempts per request (3)",
    )
    parser.add_argument(
        "--backoff-base",
        type=get_float_type(0),
        default=DEFAULT_BACKOFF_BASE_SECONDS,
        help="pause after a retryable failure, s, doubled per consecutive failure (5)",
    )
    parser.add_argument(
        "--backoff-cap",
        type=get_float_type(0),
        default=DEFAULT_BACKOFF_CAP_SECONDS,
        help="longest pause, s (120)",
    )
    parser.add_argument(
        "--page-limit",
        type=get_int_type(1, MAX_PAGE_LIMIT),
        default=DEFAULT_PAGE_LIMIT,
        help=f"pagination.limit ({DEFAULT_PAGE_LIMIT})",
    )
    parser.add_argument(
        "--height",
        type=get_int_type(1),
        default=None,
        help="pin the snapshot to this height (default: the node's latest)",
    )
    parser.add_argument(
        "--chain-id", default=None, help="the trace's chain id when the node serves no node_info"
    )
    parser.add_argument("--restart", action="store_true", help="ignore a previous run's progress")
    parser.add_argument("--result", default="-", help="write the result JSON here ('-': stdout)")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=PROGRESS_HELP,
    )
    parser.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    require_extra("export", "keepersim export")
    from keepersim.export.export_run import ExportError, ExportOptions, parse_epoch_range
    from keepersim.export.exporter import export_trace

    try:
        epochs = parse_epoch_range(args.epochs)
        options = ExportOptions(
            concurrency=args.concurrency,
            timeout=args.timeout,
            max_attempts=args.max_attempts,
            backoff_base=args.backoff_base,
            backoff_cap=args.backoff_cap,
            page_limit=args.page_limit,
            progress=args.progress is not False,
            restart=args.restart,
            chain_id=args.chain_id,
            height=args.height,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if not args.node.startswith(("http://", "https://")):
        raise UsageError(f"--node must be an http(s) URL, got {args.node!r}")
    if args.aggregate:
        return _run_aggregate(args, epochs, options)
    check_output_file(args.out, "--out")
    if args.result != "-":
        check_output_file(args.result, "--result")
    try:
        result = export_trace(args.node, epochs, args.out, options=options)
    except ExportError as exc:
        if exc.result is not None:
            write_json(args.result, exc.result.to_dict(), allow_nan=True)
        print(f"keepersim: error: {exc}", file=sys.stderr)
        return 1
    write_json(args.result, result.to_dict(), allow_nan=True)
    if not result.summaries_available:
        print(
            "keepersim: note: the node has no epoch_performance_summary/{epoch_index} route "
            "(501, gRPC code 12: older than v0.2.6); the trace has no epoch_summary lines, so a "
            "replay compares inference outcomes only",
            file=sys.stderr,
        )
    return 0


def _run_aggregate(args: argparse.Namespace, epochs: tuple[int, int], options: Any) -> int:
    """``--aggregate``: the epoch folders (keepersim.export.aggregate)."""
    from keepersim.export.aggregate import export_aggregates
    from keepersim.export.export_run import ExportError

    check_output_folder(args.out, "--out")
    a, b = epochs
    for epoch in range(a, b + 1):  # an epoch folder's name taken by a file: before any fetch
        check_output_folder(Path(args.out) / f"epoch_{epoch}", "--out")
    if args.result != "-":
        check_output_file(args.result, "--result")
    try:
        result = export_aggregates(args.node, epochs, args.out, options=options)
    except ExportError as exc:
        if exc.result is not None:
            write_json(args.result, exc.result.to_dict())
        print(f"keepersim: error: {exc}", file=sys.stderr)
        return 1
    write_json(args.result, result.to_dict())
    return 0
