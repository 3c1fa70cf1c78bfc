"""The chain's verdict memo: the selection data of the committed height, kept between blocks.

A participant's verdict is asked again only when a block wrote what it rests on (the block's
hints, keepersim.keeper.acceleration.hints) or its ``valid_until`` passed; a table is rebuilt
only when a verdict changed, verdict by verdict (keepersim.keeper.selection.IncrementalTable);
when every verdict that moved was handed over with its commit, the memo answers alone, without
the store (SelectionIndex.get_memo_table). Proven equal to fresh verdicts and the reference
pipeline at every height by tests/policies/test_properties.py,
tests/core/test_core_selection_memo.py and tests/policies/test_acceleration.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from keepersim.keeper.policies.base import NEVER, Health
from keepersim.keeper.selection import (
    Candidate,
    IncrementalTable,
    PipelineRules,
    SelectionTable,
    compute_restamped_table,
)


class ModelTable:
    """One model's memo: its candidates' verdicts (in an :class:`IncrementalTable`), the last
    table, and a min-heap of (valid_until, position) that says whose verdict lapses next."""

    __slots__ = ("candidates", "state", "position", "expiry", "table", "weights")

    def __init__(self, candidates: list[Candidate], healths: list[Health]) -> None:
        self.candidates = candidates
        self.weights: dict[str, int] | None = None  # address -> candidate weight, when asked
        self.state = IncrementalTable(candidates, healths)
        self.position = {c.address: i for i, c in enumerate(candidates)}
        self.expiry = [(h.valid_until, i) for i, h in enumerate(healths) if h.valid_until < NEVER]
        heapq.heapify(self.expiry)
        self.table: SelectionTable | None = None

    def get_expired(self, height: int) -> list[int]:
        """Positions whose verdict's valid_until passed before ``height``; stale entries (the
        verdict was replaced since) are dropped on the way."""
        expiry, healths = self.expiry, self.state.healths
        out = []
        while expiry and expiry[0][0] < height:
            valid_until, i = heapq.heappop(expiry)
            if healths[i].valid_until == valid_until:
                out.append(i)
        return out

    def process_due(
        self, due: dict[int, Health | None], ask: Callable[[str], Health], height: int
    ) -> bool:
        """Recompute the due verdicts at ``height`` (position -> the verdict to start from: a
        touched participant's handed over with the commit, None to ask for it, a lapsed one's
        last); True if the table selects differently. A verdict that lapsed is followed by the
        verdicts it says come next (Health.then), else asked for. Keeps the heap holding every
        lapsing verdict's (valid_until, i)."""
        healths, candidates, expiry = self.state.healths, self.candidates, self.expiry
        changes: list[tuple[int, Health]] = []
        push = heapq.heappush
        for i, health in sorted(due.items()):
            old = healths[i]
            while health is not None and health.valid_until < height:
                health = None if health.then is None else health.then()
            if health is None:
                health = ask(candidates[i].address)
            if health is old:
                continue  # not due after all: its heap entry is still there
            if health.is_same_verdict(old):
                healths[i] = health
            else:
                changes.append((i, health))
            valid_until = health.valid_until
            # Unchanged and not yet due, its heap entry is still there; a due one was popped.
            if valid_until < NEVER and (valid_until != old.valid_until or valid_until < height):
                push(expiry, (valid_until, i))
        if changes:
            self.state.process_healths(changes)
        if len(expiry) > 4 * len(candidates) + 64:  # mostly stale entries
            self.expiry = [
                (h.valid_until, j) for j, h in enumerate(healths) if h.valid_until < NEVER
            ]
            heapq.heapify(self.expiry)
        return bool(changes)


class SelectionIndex:
    """Derived selection data of the committed height, kept between blocks.

    A participant's health verdict is recomputed only when its state changed in a block (the
    keeper's touched set) or the verdict's ``valid_until`` height passed, and the table is rebuilt
    only when a verdict actually changed: a block with outcomes costs O(changes), not O(fleet).
    A block that moved nothing a table rests on costs one restamp (:meth:`get_quiet_table`).
    """

    __slots__ = (
        "candidates",
        "tables",
        "models",
        "dirty",
        "pushed",
        "poc_heights",
        "rules",
        "height",
    )

    def __init__(self) -> None:
        # The PoC phase of the effective epoch (get_poc_heights; empty: no epoch), once read.
        self.poc_heights: range | None = None
        self.rules: PipelineRules | None = None  # the pipeline rules of the params in force
        # The committed height these memos describe: set by a table computed under the chain's
        # read lock, one on per commit (a chain commits heights in order), None after a reset.
        self.height: int | None = None
        self.candidates: dict[tuple[str, bool], list[Candidate]] = {}
        self.tables: dict[str, SelectionTable] = {}
        self.models: dict[str, ModelTable] = {}
        self.dirty: dict[str, set[str]] = {}
        # Verdicts the policy handed over with a commit (acceleration.policy_store.hand_verdict), each at the
        # height of the last commit that touched its participant.
        self.pushed: dict[str, Health] = {}

    def process_commit(self, touched: set[str], reset: bool, verdicts: dict[str, Health]) -> None:
        self.tables = {}
        if reset:
            self.poc_heights = None
            self.rules = None
            self.height = None
            self.candidates.clear()
            self.models.clear()
            self.dirty.clear()
            self.pushed.clear()
            return
        if self.height is not None:
            self.height += 1
        pushed = self.pushed
        for address in touched:
            pushed.pop(address, None)
        pushed.update(verdicts)
        for dirty in self.dirty.values():
            dirty.update(touched)
            dirty.update(verdicts)

    def get_memo_table(self, model: str, height: int) -> SelectionTable | None:
        """The table of committed ``height`` from the memo alone, when it needs neither the
        store nor a policy: the memo describes ``height``, the PoC phase (so the candidates)
        is that of the model's last table, no verdict lapsed, and each verdict a commit since
        moved was handed over with it, valid at ``height``. It is then what
        :meth:`process_memo` makes with a policy to ask. None otherwise (the chain computes it,
        Chain._compute_table). Call it under the index lock."""
        if self.height != height or self.poc_heights is None:
            return None
        memo = self.models.get(model)
        if memo is None:
            return None
        if self.candidates.get((model, height in self.poc_heights)) is not memo.candidates:
            return None
        expiry = memo.expiry
        if expiry and expiry[0][0] < height:
            return None  # a verdict lapsed: what comes next may need the policy
        pushed, position = self.pushed, memo.position
        dirty = self.dirty.get(model)
        if dirty:
            healths = memo.state.healths
            moved = False
            for address in dirty:
                i = position.get(address)
                if i is None:
                    continue
                health = pushed.get(address)
                if health is None or health.valid_until < height:
                    return None  # the policy must say it
                if health is not healths[i]:
                    moved = True
            if moved:
                table = self.process_memo(model, memo, height, _ask_nobody)
                self.tables[model] = table
                return table
            # Each one handed over is the very verdict held: process_memo would change nothing
            # (process_due skips them, none lapsed), only restamp.
            dirty.clear()
        last = memo.table
        if last is None:
            table = self.process_memo(model, memo, height, _ask_nobody)
        elif last.height != height:
            table = memo.table = compute_restamped_table(last, height)
        else:
            table = last
        self.tables[model] = table
        return table

    def process_memo(
        self, model: str, memo: ModelTable, height: int, ask: Callable[[str], Health]
    ) -> SelectionTable:
        """``memo``'s table at ``height`` (its candidates are those of ``height``): the verdicts
        due processed (a commit moved them, or they lapsed; ``ask`` says one the commits did not
        hand over), then the table reassembled if one selects differently, else restamped."""
        assert self.rules is not None, "rules are set with the memo's first table"
        dirty = self.dirty.setdefault(model, set())
        expiry = memo.expiry
        changed = False
        if dirty or (expiry and expiry[0][0] < height):  # else nothing is due
            position, pushed = memo.position, self.pushed
            due = {position[a]: pushed.get(a) for a in dirty if a in position}
            dirty.clear()
            healths = memo.state.healths
            for i in memo.get_expired(height):
                if i not in due:
                    due[i] = healths[i]
            changed = memo.process_due(due, ask, height)
        if changed or memo.table is None:
            memo.table = None  # if assembling raises, the next query raises too
            memo.table = memo.state.compute_table(height=height, model=model, rules=self.rules)
        elif memo.table.height != height:
            memo.table = compute_restamped_table(memo.table, height)
        return memo.table


def _ask_nobody(address: str) -> Health:
    """get_memo_table hands process_memo only verdicts valid at the height: none is asked."""
    raise AssertionError(f"the verdict of {address} was asked without a policy")
