"""The as-recorded replay's checks against the recording, on the reference chain (the first
lane's; the counts do not depend on the policy): each epoch summary line against the chain's
settled summaries and its settlement height, each inference's recorded status against what the
module did with it (see :mod:`keepersim.replay.as_recorded`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from keepersim.replay.as_recorded_report import (
    MAX_MISMATCHES,
    SUMMARY_FIELDS,
    ReplayReport,
    get_status_class,
)
from keepersim.replay.lanes import Lane
from keepersim.trace.format import get_status_name
from keepersim.trace.records import EpochSummaryRecord

__all__ = ["RecordedChecks"]


class RecordedChecks:
    """The checks, a part of the as-recorded run: ``inflight`` holds the recorded inferences
    the reference chain has not resolved yet (id -> (recorded status, line, start, end)),
    ``deferred`` the summary lines waiting for their height to be committed."""

    report: ReplayReport
    lanes: list[Lane]
    committed: int
    inflight: dict[str, tuple[int, int, int, int]]
    deferred: deque[EpochSummaryRecord]
    deferred_dirty: list[bool]
    settled_at: dict[int, int]

    def resolve(self, inference_id: str, module_status: str, height: int) -> None:
        entry = self.inflight.pop(inference_id, None)
        if entry is None:
            return
        if get_status_class(entry[0], entry[3]) != module_status:
            self.add_status_mismatch(inference_id, entry, module_status, height)

    def add_status_mismatch(
        self,
        inference_id: str,
        entry: tuple[int, int, int, int],
        module_status: str,
        module_height: int,
    ) -> None:
        """A recorded inference (``inflight`` entry) the module left in another status."""
        status, line, start, end = entry
        recorded = get_status_class(status, end)
        self.report.status_mismatch_kinds[f"{recorded}->{module_status}"] += 1
        self.report.status_mismatches.add(
            {
                "inference_id": inference_id,
                "line": line,
                "start_height": start,
                "recorded": recorded if recorded == "DECLINED" else get_status_name(status),
                "recorded_end_height": end,
                "module": module_status,
                "module_height": module_height,
            }
        )

    def check_summaries(self) -> None:
        while self.deferred and self.deferred[0].height <= self.committed:
            self.compare_summaries(self.deferred.popleft())
            self.deferred_dirty = [True for _ in self.lanes]

    def compare_summaries(self, record: EpochSummaryRecord) -> None:
        report = self.report
        epoch = record.epoch_index
        exported = {s.participant_id: s for s in record.summaries}
        recorded_declines = (
            None
            if record.declines is None
            else {d.address: d.declined_requests for d in record.declines}
        )
        with self.lanes[0].chain.read() as keeper:
            computed = {s.participant_id: s for s in keeper.get_summaries_for_epoch(epoch)}
            computed_declines = {
                address: keeper.get_declines(epoch, address)
                for address in set(exported) | set(computed) | set(recorded_declines or ())
            }
        settled = self.settled_at.get(epoch)
        if settled != record.height:
            report.settlement_mismatches.append(
                {
                    "epoch": epoch,
                    "line": record.line,
                    "exported_height": record.height,
                    "computed_height": settled,
                }
            )
        mismatches = 0
        for participant in sorted(set(exported) | set(computed)):
            if recorded_declines is not None:
                ev, cv = recorded_declines.get(participant, 0), computed_declines[participant]
                if ev != cv:
                    self.add_mismatch(epoch, participant, "declined_requests", ev, cv, record.line)
                    mismatches += 1
            e = exported.get(participant)
            c = computed.get(participant)
            if e is None or c is None:
                self.add_mismatch(
                    epoch,
                    participant,
                    "(summary)",
                    "present" if e is not None else "missing",
                    "present" if c is not None else "missing",
                    record.line,
                )
                mismatches += 1
                continue
            for name in SUMMARY_FIELDS:
                ev, cv = getattr(e, name), getattr(c, name)
                if ev != cv:
                    self.add_mismatch(epoch, participant, name, ev, cv, record.line)
                    mismatches += 1
        report.summaries_checked.append(
            {
                "epoch": epoch,
                "line": record.line,
                "height": record.height,
                "participants": len(exported),
                "declines_compared": recorded_declines is not None,
                "mismatches": mismatches,
            }
        )

    def add_mismatch(
        self, epoch: int, participant: str, name: str, exported: Any, computed: Any, line: int
    ) -> None:
        self.report.summary_mismatch_count += 1
        if len(self.report.summary_mismatches) < MAX_MISMATCHES:
            self.report.summary_mismatches.append(
                {
                    "epoch": epoch,
                    "participant": participant,
                    "field": name,
                    "exported": exported,
                    "computed": computed,
                    "line": line,
                }
            )

    def check_unresolved_at_end(self) -> None:
        """The recorded inferences still unresolved at the trace's last height: a mismatch
        when the recording resolved them by then (or the module should have expired them)."""
        last = self.report.last_height
        for record in self.deferred:
            self.report.summaries_unchecked.append(
                {"epoch": record.epoch_index, "line": record.line, "height": record.height}
            )
        expiration = self.lanes[0].chain.get_params().params.validation_params.expiration_blocks
        for inference_id, entry in sorted(self.inflight.items()):
            status, _, start, end = entry
            recorded = get_status_class(status, end)
            resolves_at = end if recorded in ("FINISHED", "DECLINED") else start + expiration
            if recorded == "STARTED" or resolves_at > last:
                self.report.unresolved_at_end[recorded] += 1
                continue
            self.add_status_mismatch(inference_id, entry, "STARTED", last)
