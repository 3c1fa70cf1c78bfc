"""How a served chain advances: a background thread delivering blocks while queries keep working.

* :class:`BlockSink` is the one door blocks go through (runners and ``POST /keepersim/v1/blocks``):
  it times ``deliver_block``, feeds the metrics and calls listeners, one block at a time.
* :class:`ScenarioRunner` runs a scenario (:mod:`keepersim.sim.scenario`) the way ``keepersim
  simulate`` does, minus governance schedules: it steps the simulator's own block loop
  (:class:`keepersim.sim.stepper.ScenarioStepper`: arrivals, assignment, outcomes, capacity and
  pushback) one block at a time through the sink. Same genesis, same messages in the same order:
  the chain reaches the same app hash as ``simulate`` with the same scenario, policy and seed.
* :class:`TraceRunner` replays a trace (``docs/trace-format.md``, read with
  :func:`keepersim.trace.reader.iterate_trace`) with the genesis and the blocks as-recorded replay
  uses: genesis from the trace's prologue at height ``first_height - 1``
  (:func:`keepersim.trace.genesis.build_genesis`, which forms the recorded epoch of a trace that
  starts mid-chain), then every height up to ``last_height`` with the recorded messages, from
  the feeder replay uses (:func:`keepersim.trace.blocks.iter_recorded_blocks`: params and
  participant changes, starts, finishes, declines); expiries come from the chain itself. Epoch summaries are not replayed
  (the chain computes its own). Unlike :mod:`keepersim.replay.as_recorded`'s shadow replay, the
  recorded params go in as recorded (no policy override).
* :class:`TickerRunner` delivers empty blocks at a fixed rate (a chain served from a store, where
  blocks are otherwise posted).

Every runner runs as fast as it can (``block_rate=None``) or at ``block_rate`` blocks per second,
in a daemon thread, and stops at its last block or on :meth:`Runner.stop`.

A runner that fails (a bad trace line, a block the chain rejects, a scenario error) stops there
and says so three ways, since the server keeps answering from the last committed block: one ERROR
record on the ``keepersim.server.runner`` logger naming the file, line and height
(:class:`RunnerFailure`), ``state: "failed"`` with the failure in :meth:`Runner.status` (``GET
/keepersim/v1/status``), and ``keepersim_runner_up`` 0 (``ServerMetrics.record_runner_failure``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from keepersim.chain import BlockResult, Chain, Selection
from keepersim.run_chain import open_run_chain
from keepersim.server.metrics import ServerMetrics
from keepersim.types.errors import KeepersimError

if TYPE_CHECKING:  # the simulator is imported only when a scenario is served
    from keepersim.sim.scenario import Scenario

__all__ = [
    "BlockSink",
    "Runner",
    "RunnerError",
    "RunnerFailure",
    "ScenarioRunner",
    "TickerRunner",
    "TraceRunner",
    "TraceSource",
    "open_scenario_chain",
]

BlockListener = Callable[[BlockResult], None]

_log = logging.getLogger(__name__)


class RunnerError(KeepersimError):
    """A runner cannot start (bad scenario/trace) or a block it built was rejected."""


class BlockSink:
    """Delivers blocks to the chain one at a time, times them, feeds metrics and listeners."""

    def __init__(self, chain: Chain, metrics: ServerMetrics | None = None) -> None:
        self.chain = chain
        self.metrics = metrics
        self._lock = threading.Lock()
        self._listeners: list[BlockListener] = []
        self.blocks = 0
        self.rejected_txs = 0

    def add_listener(self, listener: BlockListener) -> None:
        """Call ``listener(result)`` after each block (from the delivering thread)."""
        self._listeners.append(listener)

    def deliver(self, txs: Sequence[Message] = (), *, strict: bool = False) -> BlockResult:
        with self._lock:
            started = time.perf_counter()
            result = self.chain.deliver_block(txs, strict=strict)
            seconds = time.perf_counter() - started
            self.blocks += 1
            self.rejected_txs += sum(1 for r in result.tx_results if not r.ok)
            if self.metrics is not None:
                self.metrics.observe_block(result, seconds, self.chain)
            for listener in self._listeners:
                listener(result)
            return result


@dataclass(frozen=True, slots=True)
class RunnerFailure:
    """Why a runner stopped before its last block, and where.

    Attributes:
        error: ``"<ExceptionType>: <message>"``.
        height: the block being built when it failed (not committed: the chain stays at
            ``height - 1``).
        file: the input file (the trace; None for a scenario, which may be built in).
        line: for a bad trace line, that line; for another failure of a trace replay, the last
            trace line read (the failed block's messages come from lines up to it).
        field: the bad field of a trace line (``<line>`` for the whole line), else None.
    """

    error: str
    height: int
    file: str | None = None
    line: int | None = None
    field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "height": self.height,
            "file": self.file,
            "line": self.line,
            "field": self.field,
        }


@dataclass
class _Status:
    blocks: int = 0
    last_height: int = 0
    rejected_txs: int = 0
    error: str | None = None
    finished: bool = False
    # idle (not started), running, finished (last block delivered), stopped (stop() before
    # the last block), failed (see failure)
    state: str = "idle"
    failure: RunnerFailure | None = None


class Runner:
    """Base: a daemon thread delivering the blocks :meth:`iter_blocks` yields (or making the
    calls :meth:`iter_steps` yields, each delivering one block).

    ``iter_blocks`` is resumed after each block is committed, so it reads the state of the
    previous block when it builds the next one.
    """

    mode = "runner"

    def __init__(self, sink: BlockSink, *, block_rate: float | None = None) -> None:
        if block_rate is not None and not block_rate > 0:
            raise RunnerError(f"block rate must be > 0 blocks/s, got {block_rate!r}")
        self.sink = sink
        self.chain = sink.chain
        self.block_rate = block_rate
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = _Status(last_height=sink.chain.height)
        self._lock = threading.Lock()
        self.target_height: int | None = None

    def iter_blocks(self) -> Iterator[list[Message]]:
        raise NotImplementedError

    def iter_steps(self) -> Iterator[Callable[[], BlockResult]]:
        """Per block, a call that delivers it through the sink (the next one is asked for after
        it is committed). By default the blocks :meth:`iter_blocks` yields."""
        for txs in self.iter_blocks():
            yield partial(self._deliver, txs)

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RunnerError("runner already started")
        with self._lock:
            self._status.state = "running"
        self._thread = threading.Thread(
            target=self._run, name=f"keepersim-{self.mode}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Ask the thread to stop after the current block; wait at most ``timeout`` seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; True when it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """The run so far. ``finished`` is true once the run is over however it ended; ``state``
        says how (``finished`` normally, ``stopped``, ``failed`` with ``failure``)."""
        with self._lock:
            s = self._status
            return {
                "mode": self.mode,
                "state": s.state,
                "running": self.running,
                "finished": s.finished,
                "blocks_delivered": s.blocks,
                "last_height": s.last_height,
                "target_height": self.target_height,
                "block_rate": self.block_rate,
                "rejected_txs": s.rejected_txs,
                "error": s.error,
                "failure": s.failure.to_dict() if s.failure is not None else None,
            }

    def get_failure_location(self, exc: Exception) -> tuple[str | None, int | None, str | None]:
        """(file, line, field) of the input a failure comes from, as far as known."""
        return None, None, None

    def run_blocking(self, max_blocks: int | None = None) -> None:
        """Deliver the blocks in the calling thread (tests, benchmarks); no pacing. A failure is
        processed as in the thread (logged, status, metric), then raised."""
        with self._lock:
            self._status.state = "running"
        try:
            for i, step in enumerate(self.iter_steps()):
                if max_blocks is not None and i >= max_blocks:
                    self._process_end(stopped=True)
                    return
                step()
        except Exception as exc:
            self._process_failure(exc)
            raise
        self._process_end(stopped=False)

    # internals ---------------------------------------------------------------------------

    def _deliver(self, txs: Sequence[Message]) -> BlockResult:
        result = self.sink.deliver(txs)
        rejected = sum(1 for r in result.tx_results if not r.ok)
        with self._lock:
            self._status.blocks += 1
            self._status.last_height = result.height
            self._status.rejected_txs += rejected
        return result

    def _run(self) -> None:
        started = time.monotonic()
        n = 0
        stopped = False
        try:
            for step in self.iter_steps():
                if self._stop.is_set():
                    stopped = True
                    break
                if self.block_rate is not None:
                    delay = started + n / self.block_rate - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        stopped = True
                        break
                step()
                n += 1
        except Exception as exc:  # the server keeps serving the last committed block
            self._process_failure(exc)
        finally:
            self._process_end(stopped=stopped)

    def _process_end(self, *, stopped: bool) -> None:
        with self._lock:
            self._status.finished = True
            if self._status.state != "failed":
                self._status.state = "stopped" if stopped else "finished"

    def _process_failure(self, exc: Exception) -> None:
        """Record a failure once: status, metric, one log record (the traceback at DEBUG)."""
        file, line, field = self.get_failure_location(exc)
        failure = RunnerFailure(
            error=f"{type(exc).__name__}: {exc}",
            height=self.chain.height + 1,
            file=file,
            line=line,
            field=field,
        )
        with self._lock:
            self._status.error = failure.error
            self._status.failure = failure
            self._status.state = "failed"
        if self.sink.metrics is not None:
            self.sink.metrics.record_runner_failure()
        where = ", ".join(
            f"{name} {value}"
            for name, value in (("file", file), ("line", line), ("field", field))
            if value is not None
        )
        _log.error(
            "%s runner failed at height %d%s: %s; the chain stays at height %d and is served "
            "from there",
            self.mode,
            failure.height,
            f" ({where})" if where else "",
            failure.error,
            failure.height - 1,
            extra={
                "runner_mode": self.mode,
                "runner_file": file,
                "runner_line": line,
                "runner_height": failure.height,
            },
        )
        _log.debug("%s runner failure traceback", self.mode, exc_info=exc)


# --------------------------------------------------------------------------------------------
# Scenario
# --------------------------------------------------------------------------------------------


def open_scenario_chain(
    scenario: Scenario,
    policy: str,
    *,
    path: str | os.PathLike[str] | None = None,
    shadow: bool = False,
    reputation_weighting: bool = False,
) -> Chain:
    """A chain with the scenario's genesis, as ``keepersim simulate`` builds it (in memory
    unless ``path``, which must be an empty folder)."""
    from keepersim.sim.oracle import get_policy_override
    from keepersim.sim.run_genesis import build_genesis, build_params
    from keepersim.types.policies import get_unknown_policy_problem

    unknown = get_unknown_policy_problem([policy])
    if unknown:
        raise RunnerError(unknown)
    if scenario.devshard is not None:
        raise RunnerError(
            f"scenario {scenario.name!r} has a 'devshard' key: the server runs the classic path "
            "only (use keepersim simulate or compare for the devshard path)"
        )
    params = build_params(
        scenario, policy, shadow=shadow, reputation_weighting=reputation_weighting
    )
    genesis = build_genesis(scenario, params)
    override = get_policy_override(policy, scenario)
    return open_run_chain(
        "memory" if path is None else "leveldb",
        path,
        genesis=genesis,
        error=RunnerError,
        needs="a scenario needs an empty one",
        policy_override=override,
    )


class ScenarioRunner(Runner):
    """Runs a scenario on a chain opened with :func:`open_scenario_chain` (see the module doc):
    a :class:`keepersim.sim.stepper.ScenarioStepper` stepped through the sink."""

    mode = "scenario"

    def __init__(
        self,
        sink: BlockSink,
        scenario: Scenario,
        *,
        seed: int | None = None,
        blocks: int | None = None,
        block_rate: float | None = None,
    ) -> None:
        super().__init__(sink, block_rate=block_rate)
        from keepersim.sim.stepper import ScenarioStepper

        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.blocks = scenario.blocks if blocks is None else blocks
        if self.blocks < 1:
            raise RunnerError(f"blocks must be >= 1, got {self.blocks}")
        self.target_height = self.blocks
        self.stepper = ScenarioStepper(
            scenario,
            self.chain,
            seed=self.seed,
            blocks=self.blocks,
            deliver=self._deliver,
            on_selection=self._record_selection,
        )

    def _record_selection(self, height: int, selection: Selection, p_miss: float) -> None:
        if self.sink.metrics is not None:
            self.sink.metrics.record_selection(selection.fallback)

    @property
    def requests(self) -> int:
        """Requests that arrived so far (re-selections not counted)."""
        return self.stepper.requests

    @property
    def unassigned(self) -> int:
        """Requests dropped because no executor could be selected."""
        return self.stepper.unassigned

    def iter_steps(self) -> Iterator[Callable[[], BlockResult]]:
        while not self.stepper.is_done():
            yield self.stepper.step


# --------------------------------------------------------------------------------------------
# Trace replay
# --------------------------------------------------------------------------------------------


class TraceSource:
    """A trace opened for replay: header and genesis read, the rest streamed by a runner."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from keepersim.trace.genesis import build_genesis, read_prologue
        from keepersim.trace.reader import iterate_trace
        from keepersim.trace.records import TraceError

        self.path = os.fspath(path)
        self._records = iterate_trace(self.path)
        try:
            self.prologue = read_prologue(self._records)
        except TraceError as exc:
            raise RunnerError(str(exc)) from exc
        except StopIteration:
            raise RunnerError(
                f"{self.path}: the trace ends before its first params and participants lines"
            ) from None
        self.header = self.prologue.header
        self.params = self.prologue.params.params
        # the last line genesis read
        self.genesis_line = max(self.prologue.params.line, self.prologue.participants.line)
        self.genesis = build_genesis(self.prologue)

    def open_chain(self, path: str | os.PathLike[str] | None = None) -> Chain:
        """A chain with the trace's genesis (memory unless ``path``, which must be empty)."""
        return open_run_chain(
            "memory" if path is None else "leveldb",
            path,
            genesis=self.genesis,
            error=RunnerError,
            needs="a replay needs an empty one",
        )

    def iter_records(self) -> Iterator[Any]:
        """The records after the prologue: those read along with it, then the rest."""
        yield from self.prologue.extra
        yield from self._records


class TraceRunner(Runner):
    """Replays a :class:`TraceSource` on the chain it opened (see the module docstring)."""

    mode = "trace"

    def __init__(
        self, sink: BlockSink, source: TraceSource, *, block_rate: float | None = None
    ) -> None:
        super().__init__(sink, block_rate=block_rate)
        self.source = source
        self.target_height = source.header.last_height
        # Starts read after their block was built: 0, since the trace reader refuses inference
        # lines out of start-height order (kept in the status for its readers).
        self.late_records = 0
        self.skipped_params = 0
        self.last_line = source.genesis_line  # the last trace line read

    def iter_blocks(self) -> Iterator[list[Message]]:
        from keepersim.trace.blocks import iter_recorded_blocks
        from keepersim.trace.messages import Schedule

        schedule = Schedule()
        blocks = iter_recorded_blocks(
            self.source.prologue,
            self.source.iter_records(),
            first_height=self.chain.height + 1,
            schedule=schedule,
        )
        for block in blocks:
            self.skipped_params = schedule.late.count
            self.last_line = block.last_line
            yield block.txs

    def get_failure_location(self, exc: Exception) -> tuple[str | None, int | None, str | None]:
        from keepersim.trace.records import TraceError

        if isinstance(exc, TraceError):
            return exc.path, exc.line, exc.field
        return self.source.path, self.last_line, None

    def status(self) -> dict[str, Any]:
        out = super().status()
        out["trace"] = self.source.path
        out["late_records"] = self.late_records
        out["skipped_params"] = self.skipped_params
        return out


# --------------------------------------------------------------------------------------------
# Empty blocks
# --------------------------------------------------------------------------------------------


class TickerRunner(Runner):
    """Empty blocks at ``block_rate`` blocks/s (expiries, epochs and cooldowns still happen)."""

    mode = "ticker"

    def __init__(self, sink: BlockSink, *, block_rate: float, blocks: int | None = None) -> None:
        super().__init__(sink, block_rate=block_rate)
        self.blocks = blocks
        if blocks is not None:
            self.target_height = sink.chain.height + blocks

    def iter_blocks(self) -> Iterator[list[Message]]:
        n = 0
        while self.blocks is None or n < self.blocks:
            n += 1
            yield []
