"""``keepersim serve``: answer a chain node's REST queries over a chain that advances.

Where the chain comes from (one of):

* ``--chain DIR``: a LevelDB store (``--genesis FILE``, the chain's genesis document
  ``{"chain_id", "initial_height", "app_state": {"inference": ...}, "keepersim": {...}}``,
  initialises an empty one); blocks are posted to ``POST /keepersim/v1/blocks``, or empty blocks
  are delivered at ``--block-rate``;
* ``--memory --genesis FILE``: the same in memory;
* ``--scenario NAME_OR_FILE [--policy P] [--seed N] [--blocks N] [--reputation-weighting]``:
  the scenario runs as ``keepersim simulate`` runs it (in memory, or in ``--chain DIR`` if
  given and empty);
* ``--trace FILE``: the trace is replayed (in memory, or in an empty ``--chain DIR``).

``--block-rate R`` paces the runner at R blocks per second (default: as fast as possible; for
``--chain`` / ``--memory``: no blocks unless posted). ``--faults`` injects faults into GET
answers (see :mod:`keepersim.server.faults`).
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from typing import Any

from keepersim.cli.argtypes import get_float_type, get_int_type, parse_port, parse_seed
from keepersim.cli.common import UsageError, load_scenario_arg, read_json, require_extra
from keepersim.inputs import check_stream_file
from keepersim.outputs import check_output_folder

__all__ = ["bind_listener", "add_serve_command", "run_serve"]


def add_serve_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a chain over the node's REST API (+ metrics, fault injection)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_argument_group("chain source")
    source.add_argument("--chain", metavar="DIR", default=None, help="LevelDB store folder")
    source.add_argument("--memory", action="store_true", help="in-memory store (needs --genesis)")
    source.add_argument("--genesis", metavar="FILE", default=None, help="genesis JSON file")
    source.add_argument("--scenario", metavar="NAME_OR_FILE", default=None, help="run a scenario")
    source.add_argument(
        "--policy", default="gonka", help="health policy of --scenario (default gonka)"
    )
    source.add_argument("--seed", type=parse_seed, default=None, help="run seed of --scenario")
    source.add_argument(
        "--blocks",
        type=get_int_type(1),
        default=None,
        help="stop --scenario after this many blocks",
    )
    source.add_argument(
        "--reputation-weighting",
        action="store_true",
        help="--scenario selects by weight x reputation (the fork's PR #8), not by weight alone",
    )
    source.add_argument("--trace", metavar="FILE", default=None, help="replay a trace")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=parse_port, default=8000, help="listen port, 1..65535 (default 8000)"
    )
    parser.add_argument(
        "--block-rate",
        type=get_float_type(0, lo_open=True),
        default=None,
        metavar="R",
        help="blocks per second (default: as fast as possible for --scenario/--trace)",
    )
    parser.add_argument(
        "--faults",
        default=None,
        metavar="SPEC",
        help="inject faults, e.g. 429=0.1,503=0.2,slow=0.05:200,drop=0.02,badjson=0.01",
    )
    parser.add_argument(
        "--fault-seed", type=get_int_type(0), default=0, help="fault injection seed"
    )
    parser.add_argument(
        "--fault-max-streak",
        type=get_int_type(0),
        default=2,
        help="most failing answers in a row per URL (0: no limit; default 2)",
    )
    parser.add_argument(
        "--cold-wait",
        type=get_float_type(0),
        default=5.0,
        help="seconds a query waits for a cold cache computation before a 503 (default 5)",
    )
    parser.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
        default="warning",
        help="log level of uvicorn and keepersim (runner failures are errors; default warning)",
    )
    parser.set_defaults(handler=run_serve)


def _open(args: argparse.Namespace) -> tuple[Any, Any]:
    """(chain, runner factory taking the sink, or None)."""
    from keepersim.chain import Chain
    from keepersim.module.genesis import genesis_from_json
    from keepersim.server.runner import (
        ScenarioRunner,
        TickerRunner,
        TraceRunner,
        TraceSource,
        open_scenario_chain,
    )

    modes = [m for m in ("memory", "scenario", "trace") if getattr(args, m)]
    if len(modes) > 1:
        raise UsageError(f"choose one of --memory, --scenario, --trace (got {', '.join(modes)})")
    if not modes and args.chain is None:
        raise UsageError(
            "give a chain: --chain DIR, --memory --genesis FILE, --scenario or --trace"
        )
    if args.block_rate is not None and not args.block_rate > 0:
        raise UsageError(f"--block-rate must be > 0, got {args.block_rate}")
    if args.scenario is None and (args.seed is not None or args.blocks is not None):
        raise UsageError("--seed and --blocks go with --scenario")
    if args.scenario is None and args.reputation_weighting:
        raise UsageError("--reputation-weighting goes with --scenario")
    mode = modes[0] if modes else "chain"
    if mode in ("scenario", "trace") and args.genesis is not None:
        raise UsageError(f"--genesis does not go with --{mode} (it builds its own)")
    rate = args.block_rate
    if mode == "scenario":
        from keepersim.types.policies import get_unknown_policy_problem

        unknown = get_unknown_policy_problem([args.policy])
        if unknown:
            raise UsageError(f"--policy: {unknown}")
        scenario, seed = load_scenario_arg(args.scenario, args.seed)
        chain = open_scenario_chain(
            scenario, args.policy, path=args.chain, reputation_weighting=args.reputation_weighting
        )
        return chain, lambda sink: ScenarioRunner(
            sink, scenario, seed=seed, blocks=args.blocks, block_rate=rate
        )
    if mode == "trace":
        check_stream_file(args.trace, "trace")
        source = TraceSource(args.trace)
        chain = source.open_chain(args.chain)
        return chain, lambda sink: TraceRunner(sink, source, block_rate=rate)
    genesis = None
    if args.genesis is not None:
        from keepersim.limits import MAX_GENESIS_BYTES

        data = read_json(args.genesis, "genesis file", MAX_GENESIS_BYTES)
        import json

        genesis = genesis_from_json(json.dumps(data), args.genesis)
    if mode == "memory":
        if genesis is None:
            raise UsageError("--memory needs --genesis FILE")
        chain = Chain.open(memory=True, genesis=genesis)
    else:
        chain = Chain.open(args.chain, genesis=genesis)
        if not chain.has_genesis():
            chain.close()
            raise UsageError(f"store {args.chain!r} holds no chain; give --genesis FILE")
    if rate is None:
        return chain, None
    return chain, lambda sink: TickerRunner(sink, block_rate=rate)


def _configure_logging(level: str) -> None:
    """keepersim's log records (a runner failure, cache warnings) on stderr, one line each."""
    import logging

    logger = logging.getLogger("keepersim")
    if not any(h.get_name() == "keepersim-serve" for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name("keepersim-serve")
        handler.setFormatter(logging.Formatter("keepersim serve: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    number = logging.getLevelName(level.upper())
    logger.setLevel(number if isinstance(number, int) else logging.DEBUG)


def run_serve(args: argparse.Namespace) -> int:
    require_extra("server", "keepersim serve")
    import uvicorn

    from keepersim.server.app import ServerConfig, create_app
    from keepersim.server.faults import FaultInjector, FaultSpecError, parse_fault_spec
    from keepersim.server.metrics import ServerMetrics
    from keepersim.server.runner import BlockSink, RunnerError

    faults = None
    if args.faults:
        try:
            faults = FaultInjector(
                parse_fault_spec(args.faults),
                seed=args.fault_seed,
                max_streak=args.fault_max_streak,
            )
        except FaultSpecError as exc:
            raise UsageError(f"--faults: {exc}") from exc
    if not args.cold_wait >= 0:
        raise UsageError(f"--cold-wait must be >= 0, got {args.cold_wait}")
    listener = bind_listener(args.host, args.port)  # a port in use: one line, nothing started
    try:
        if args.chain is not None:  # the LevelDB store is written: check it like an output
            check_output_folder(args.chain, "--chain")
        try:
            chain, make_runner = _open(args)
        except RunnerError as exc:
            raise UsageError(str(exc)) from exc
    except BaseException:
        listener.close()
        raise
    try:
        metrics = ServerMetrics()
        sink = BlockSink(chain, metrics)
        runner = make_runner(sink) if make_runner is not None else None
        app = create_app(
            chain,
            config=ServerConfig(cold_wait=args.cold_wait),
            metrics=metrics,
            sink=sink,
            runner=runner,
            faults=faults,
        )
        _configure_logging(args.log_level)
        what = runner.mode if runner is not None else "blocks posted to /keepersim/v1/blocks"
        print(
            f"keepersim serve: http://{args.host}:{args.port} chain {chain.chain_id!r} at "
            f"height {chain.height}; advancing by: {what}"
            + (f"; faults {faults.spec.to_text()}" if faults is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level=args.log_level, access_log=False
        )
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()
        chain.close()
    return 0


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, for uvicorn to listen on: checked here, before the
    chain is opened or anything printed, so a port in use or a foreign address is one line
    naming --port or --host (not uvicorn's ``[Errno 98]`` after the start-up line)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(
            f"--host: cannot resolve {host!r}; expected an IP address or a host name of this "
            "machine"
        ) from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"--port: port {port} on {host} is already in use; expected a free port "
                "(stop the other server or choose another --port)"
            ) from exc
        if exc.errno == errno.EACCES:
            raise UsageError(
                f"--port: no permission to listen on port {port} (ports below 1024 need "
                "privileges); expected a port of 1024 or more"
            ) from exc
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(
                f"--host: {host} is not an address of this machine; expected one of its "
                "addresses (127.0.0.1, 0.0.0.0, ...)"
            ) from exc
        raise UsageError(f"--host/--port: cannot listen on {host}:{port}") from exc
    return sock
