"""The as-recorded replay's report: what was recorded, what the checks against the recording
found, and per policy what it would have done (:class:`PolicyShadow`); ``to_dict()`` is the
JSON report (:mod:`keepersim.replay.as_recorded` runs the replay).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from keepersim.replay.common import IntervalTracker
from keepersim.trace.format import FINISHED_LIKE, get_status_name
from keepersim.trace.messages import Listed
from keepersim.trace.records import BadLines, Header, InferenceRecord
from keepersim.types.messages import EXPIRED, STARTED

__all__ = [
    "COMPARED_FIELDS",
    "MAX_MISMATCHES",
    "NOT_MODELLED_FIELDS",
    "SUMMARY_FIELDS",
    "PolicyShadow",
    "ReplayReport",
    "get_outcome_key",
    "get_selection_bias_note",
    "get_status_class",
]

# Fields the module computes from the replayed traffic: the summaries' inference_count and
# missed_requests, and keepersim's declined_requests (the line's epoch_declines, when recorded).
COMPARED_FIELDS: Final = ("inference_count", "missed_requests", "declined_requests")
SUMMARY_FIELDS: Final = COMPARED_FIELDS[:2]
# Summary fields keepersim does not model (coins, validation): never compared.
NOT_MODELLED_FIELDS: Final = (
    "earned_coins",
    "rewarded_coins",
    "burned_coins",
    "validated_inferences",
    "invalidated_inferences",
    "claimed",
)
MAX_MISMATCHES: Final = 10_000


def get_outcome_key(record: InferenceRecord) -> str:
    """The counter a recorded inference goes to: successes, misses, declines or unresolved."""
    status = record.status
    if status in FINISHED_LIKE:
        return "successes"
    if status == EXPIRED:
        return "misses"
    if record.is_declined():
        return "declines"
    return "unresolved"


def get_status_class(status: int, end: int) -> str:
    """A recorded (status, end height) as the module can reproduce it (no validation in
    keepersim): FINISHED, EXPIRED, DECLINED (STARTED with an end) or STARTED."""
    if status in FINISHED_LIKE:
        return "FINISHED"
    if status == STARTED and end != 0:
        return "DECLINED"
    return get_status_name(status)


def get_selection_bias_note(policy: str) -> str:
    """Why the recording policy's own row shows (almost) no misses inside its exclusions."""
    return (
        f"{policy} recorded this trace: while it kept a participant out, the recorded traffic "
        "was not sent to that participant, so its own exclusions cannot show misses (selection "
        "bias, not a perfect policy). Compare the other policies' rows, or replay with "
        "--mode what-if."
    )


@dataclass(slots=True)
class PolicyShadow:
    """What one policy would have done with the recorded traffic (it only watched)."""

    policy: str
    intervals: IntervalTracker = field(default_factory=IntervalTracker)
    transitions: Counter[str] = field(default_factory=Counter)
    transitions_by_participant: dict[str, int] = field(default_factory=dict)
    fallback_blocks: int = 0
    panic_blocks: int = 0
    inside: Counter[str] = field(default_factory=Counter)
    inside_by_participant: dict[str, Counter[str]] = field(default_factory=dict)
    app_hash: str = ""

    def to_dict(self, recorded: Counter[str], recorded_policy: str | None = None) -> dict[str, Any]:
        """``recorded_policy``: the policy that recorded the trace (the header's); its row is
        marked ``is_recording_policy`` with :func:`get_selection_bias_note`."""
        misses = self.inside["misses"]
        successes = self.inside["successes"]
        is_recorder = recorded_policy is not None and self.policy == recorded_policy
        return {
            "policy": self.policy,
            "is_recording_policy": is_recorder,
            "selection_bias": get_selection_bias_note(self.policy) if is_recorder else None,
            "excluded_participants": len(self.intervals.closed),
            "excluded_blocks": sum(self.intervals.blocks.values()),
            "misses_inside": misses,
            "successes_inside": successes,
            "declines_inside": self.inside["declines"],
            "unresolved_inside": self.inside["unresolved"],
            "share_of_misses_inside": misses / recorded["misses"] if recorded["misses"] else 0.0,
            "share_of_successes_inside": (
                successes / recorded["successes"] if recorded["successes"] else 0.0
            ),
            "fallback_blocks": self.fallback_blocks,
            "panic_blocks": self.panic_blocks,
            "transitions": dict(sorted(self.transitions.items())),
            "exclusions": {
                address: {
                    **entry,
                    "misses_inside": self.inside_by_participant.get(address, Counter())["misses"],
                    "successes_inside": self.inside_by_participant.get(address, Counter())[
                        "successes"
                    ],
                    "transitions": self.transitions_by_participant.get(address, 0),
                }
                for address, entry in self.intervals.to_dict().items()
            },
            "app_hash": self.app_hash,
        }


@dataclass(slots=True)
class ReplayReport:
    """The result of an as-recorded replay (``to_dict()`` is the JSON report)."""

    trace: str
    header: Header
    policies: list[str]
    store: str
    strict: bool
    first_height: int = 0
    last_height: int = 0
    blocks: int = 0
    txs: int = 0
    # The recorded inferences by outcome (get_outcome_key), and in all ("inferences"): the sums
    # of the counts per participant (count_recorded_totals, at the end).
    recorded: Counter[str] = field(default_factory=Counter)
    recorded_by_participant: dict[str, dict[str, int]] = field(default_factory=dict)
    summaries_checked: list[dict[str, Any]] = field(default_factory=list)
    summary_mismatches: list[dict[str, Any]] = field(default_factory=list)
    summary_mismatch_count: int = 0
    summaries_unchecked: list[dict[str, Any]] = field(default_factory=list)
    settlement_mismatches: list[dict[str, Any]] = field(default_factory=list)
    status_mismatches: Listed = field(default_factory=Listed)
    status_mismatch_kinds: Counter[str] = field(default_factory=Counter)
    unresolved_at_end: Counter[str] = field(default_factory=Counter)
    tx_failures: Listed = field(default_factory=Listed)
    late_scheduled: Listed = field(default_factory=Listed)
    bad_lines: BadLines = field(default_factory=BadLines)
    shadows: list[PolicyShadow] = field(default_factory=list)
    max_pending: int = 0
    max_inflight: int = 0
    beyond_trace: int = 0
    elapsed_seconds: float = 0.0

    @property
    def partial(self) -> bool:
        """The trace had no closing record (read with ``allow_partial``): it may be cut."""
        return self.header.cut is not None

    @property
    def ok(self) -> bool:
        """A whole trace, with no summary mismatch, no status mismatch, no rejected transaction
        (skipped bad lines are reported apart). A partial trace is never ok: what is missing
        was not checked."""
        return not (
            self.partial
            or self.summary_mismatch_count
            or self.status_mismatches.count
            or self.tx_failures.count
        )

    def count_recorded_totals(self) -> None:
        """``recorded`` from the counts per participant."""
        self.recorded = Counter()
        for counts in self.recorded_by_participant.values():
            self.recorded.update(counts)

    def get_shadow(self, policy: str) -> PolicyShadow:
        for shadow in self.shadows:
            if shadow.policy == policy:
                return shadow
        raise KeyError(policy)

    def to_dict(self) -> dict[str, Any]:
        header = self.header
        return {
            "mode": "as-recorded",
            "trace": self.trace,
            "chain_id": header.chain_id,
            "source": header.source,
            "scenario": header.get_scenario_name(),
            "seed": header.seed,
            "recorded_policy": header.policy,
            "policies": list(self.policies),
            "store": self.store,
            "strict": self.strict,
            "first_height": self.first_height,
            "last_height": self.last_height,
            "blocks": self.blocks,
            "txs": self.txs,
            "ok": self.ok,
            "partial": self.partial,
            "trace_end": None if header.cut is None else header.cut.to_dict(),
            "recorded": {
                "inferences": self.recorded["inferences"],
                "misses": self.recorded["misses"],
                "successes": self.recorded["successes"],
                "declines": self.recorded["declines"],
                "unresolved": self.recorded["unresolved"],
                "miss_rate": (
                    self.recorded["misses"] / (self.recorded["misses"] + self.recorded["successes"])
                    if self.recorded["misses"] + self.recorded["successes"]
                    else 0.0
                ),
                "by_participant": {
                    a: dict(c) for a, c in sorted(self.recorded_by_participant.items())
                },
            },
            "summaries": {
                "compared_fields": list(COMPARED_FIELDS),
                "not_modelled_fields": list(NOT_MODELLED_FIELDS),
                "checked": self.summaries_checked,
                "mismatch_count": self.summary_mismatch_count,
                "mismatches": self.summary_mismatches,
                "unchecked": self.summaries_unchecked,
                "settlement_mismatches": self.settlement_mismatches,
            },
            "status": {
                "mismatch_count": self.status_mismatches.count,
                "mismatch_kinds": dict(sorted(self.status_mismatch_kinds.items())),
                "mismatches": self.status_mismatches.items,
                "unresolved_at_end": dict(sorted(self.unresolved_at_end.items())),
            },
            "tx_failures": self.tx_failures.to_dict(),
            "late_scheduled": self.late_scheduled.to_dict(),
            "bad_lines": self.bad_lines.to_dict(),
            "policies_shadow": {
                s.policy: s.to_dict(self.recorded, header.policy) for s in self.shadows
            },
            "stats": {
                "max_pending": self.max_pending,
                "max_inflight": self.max_inflight,
                "outcomes_beyond_trace": self.beyond_trace,
                "elapsed_seconds": round(self.elapsed_seconds, 3),
                "blocks_per_second": (
                    round(self.blocks / self.elapsed_seconds, 1) if self.elapsed_seconds else None
                ),
            },
        }
