"""Every limit on what a user gives keepersim, in one place (the README's "Limits" paragraph).

Each is checked before the work, while the input is read, so a bad or huge input ends in one
line ``keepersim: error: ...`` naming the limit and its value, within seconds and well under
1 GB, instead of a run of hours, a traceback or the kernel's out-of-memory killer. They are
generous for real use (measured where said).

Scenario files (also in the JSON Schema ``keepersim/sim/schema/scenario.schema.json``; a
scenario within them runs in about 10 minutes and well under 1 GB: mainnet_like, 55,000
requests, 7 s and 66 MB; 200,000 requests, 19 s and 79 MB).

Whole-JSON input files (scenario, governance schedule, proposal, sweep spec, genesis): their
size is checked from ``stat`` before a byte is read (a folder, FIFO, device or socket is refused
by what it is, never read), and their nesting depth by a scan of the bytes before they are
parsed (:mod:`keepersim.inputs`). Traces are streamed line by line and have no size limit.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_ARRIVALS_PER_BLOCK",
    "MAX_BLOCKS",
    "MAX_CAPACITY",
    "MAX_EPOCH_LENGTH",
    "MAX_EXPECTED_REQUESTS",
    "MAX_EXPIRATION_BLOCKS",
    "MAX_GENESIS_BYTES",
    "MAX_GOVERNANCE_ENTRIES",
    "MAX_INPUT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LATENCY_BLOCKS",
    "MAX_PARTICIPANTS",
    "MAX_PROPOSAL_MESSAGES",
    "MAX_RESELECTS",
    "MAX_SEED",
    "MAX_SWEEP_GRID_POINTS",
    "MAX_SWEEP_RUNS",
    "MAX_TRACE_LINE_BYTES",
    "MAX_WEIGHT",
    "MAX_EVENTS",
    "MAX_ARRIVAL_SHAPE",
    "MAX_MODELS",
]

# --- scenario files ---------------------------------------------------------------------------
#: The chain stores weights as int32.
MAX_WEIGHT: Final = 2**31 - 1
MAX_PARTICIPANTS: Final = 10_000
MAX_BLOCKS: Final = 1_000_000
#: ``blocks x arrivals_per_block``: about 90x mainnet_like, 40x overload (~10 min at 7,500-10,000/s).
MAX_EXPECTED_REQUESTS: Final = 5_000_000
MAX_ARRIVALS_PER_BLOCK: Final = 10_000
MAX_EPOCH_LENGTH: Final = 1_000_000
MAX_EXPIRATION_BLOCKS: Final = 100_000
MAX_LATENCY_BLOCKS: Final = 10_000
MAX_CAPACITY: Final = 1_000_000
MAX_RESELECTS: Final = 100
MAX_SEED: Final = 2**63 - 1
#: ``events`` (recorded exclusions replayed; an epoch records 8-44).
MAX_EVENTS: Final = 100_000
#: ``arrival_shape`` entries (``--traffic-profile trend`` writes 100).
MAX_ARRIVAL_SHAPE: Final = 10_000
#: ``model_traffic`` models (mainnet serves one to three).
MAX_MODELS: Final = 1_000

# --- whole-JSON input files -------------------------------------------------------------------
#: Bytes of a scenario, governance, proposal or sweep spec file: the largest shipped example is
#: 140 KB, a scenario of 10,000 participants with long miss schedules a few MB.
MAX_INPUT_BYTES: Final = 64 * 2**20
#: Bytes of a genesis file (``serve --genesis``): a node's export holds every participant.
MAX_GENESIS_BYTES: Final = 256 * 2**20
#: Nesting of arrays and objects in any JSON input: the deepest real input (a proposal's
#: Decimal in its params) is 8 levels; Python's parser and the checks after it recurse per level.
MAX_JSON_DEPTH: Final = 100

#: Bytes of one line of a trace (traces are streamed, so the file has no size limit): the
#: longest real line, a participants record of 10,000 participants with their nodes, is a few
#: MB; a line without end (a file of zeros) is refused at the limit instead of read whole.
MAX_TRACE_LINE_BYTES: Final = 64 * 2**20

# --- what an input asks for -------------------------------------------------------------------
#: Entries of a governance schedule (``--governance``): each is validated whole before the run
#: (about 1.5 ms each).
MAX_GOVERNANCE_ENTRIES: Final = 1_000
#: Messages of a proposal's ``body.messages`` (a params proposal has one or two).
MAX_PROPOSAL_MESSAGES: Final = 100
#: Points of a sweep's grid (the product of its value lists), each validated for every
#: (scenario, policy) before the first run.
MAX_SWEEP_GRID_POINTS: Final = 1_000
#: Runs of a sweep: grid points x scenarios x policies (baselines included) x seeds.
MAX_SWEEP_RUNS: Final = 100_000
