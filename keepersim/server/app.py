"""The keepersim node: a Starlette app answering a chain node's REST queries over a :class:`Chain`.

This module only assembles it: the route table (:mod:`.routes`), the shared state
(:mod:`.state`: caches, sink, runner), the fault middleware (:mod:`.faults`), the runner's
lifespan and the error handlers (:mod:`.responses`: the gateway's error shape). The handlers are
:mod:`.queries` (the chain's routes), :mod:`.keepersim_queries` (keepersim's) and :mod:`.blocks`
(posted blocks); :mod:`.background` serves an app in a thread.

Every chain answer carries ``X-Cosmos-Block-Height`` and, as the chain's REST gateway sends it,
``Grpc-Metadata-X-Cosmos-Block-Height``: the height it was read at (for
``get_random_executor``, the height of the selection table the executor was drawn from). The
keepersim routes carry them too. After a runner failure the chain stays at its last committed
block and the headers keep saying so.

Chain calls run in the threadpool (``run_in_threadpool``), so the event loop never blocks on
the chain; the chain is thread-safe and a query sees the last committed block only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from keepersim.chain import Chain
from keepersim.keeper.selection import SelectionTable
from keepersim.server.background import BackgroundServer
from keepersim.server.blocks import parse_block_json
from keepersim.server.faults import FaultInjector, FaultMiddleware
from keepersim.server.metrics import ServerMetrics
from keepersim.server.responses import ApiError, error_response
from keepersim.server.routes import build_routes
from keepersim.server.runner import BlockSink, Runner
from keepersim.server.state import ServerConfig, ServerState, TableAnswer
from keepersim.types.rest_routes import CHAIN_PREFIX, GATEWAY_HEIGHT_HEADER, HEIGHT_HEADER

__all__ = [
    "CHAIN_PREFIX",
    "GATEWAY_HEIGHT_HEADER",
    "HEIGHT_HEADER",
    "ApiError",
    "BackgroundServer",
    "ServerConfig",
    "ServerState",
    "TableAnswer",
    "create_app",
    "parse_block_json",
]


async def not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, f"no route for {request.method} {request.url.path}")


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(405, f"method {request.method} not allowed on {request.url.path}")


async def server_error(request: Request, exc: Exception) -> Response:
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def create_app(
    chain: Chain,
    *,
    config: ServerConfig | None = None,
    metrics: ServerMetrics | None = None,
    sink: BlockSink | None = None,
    runner: Runner | None = None,
    faults: FaultInjector | None = None,
    table_compute: Callable[[str], SelectionTable] | None = None,
    start_runner: bool = True,
) -> Starlette:
    """The app over ``chain``. ``runner`` (its sink feeds the same metrics) is started with the
    app's lifespan unless ``start_runner`` is False, and stopped at shutdown. ``faults`` wraps
    the app in :class:`~keepersim.server.faults.FaultMiddleware`. ``table_compute`` replaces
    ``chain.get_selection_table`` (tests inject a slow one)."""
    state = ServerState(
        chain,
        config=config,
        metrics=metrics,
        sink=sink,
        runner=runner,
        faults=faults,
        table_compute=table_compute,
    )
    state.metrics.sync_policy_states(chain)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runner is not None and start_runner and not runner.running:
            runner.start()
        try:
            yield
        finally:
            if runner is not None and start_runner:
                await run_in_threadpool(runner.stop, 10.0)

    middleware = []
    if faults is not None:
        middleware.append(Middleware(FaultMiddleware, injector=faults))
    app = Starlette(
        routes=build_routes(),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: method_not_allowed, 500: server_error},
    )
    app.state.keepersim = state
    return app
