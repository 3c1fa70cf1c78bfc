"""What a set of runs is made of: scenario sources (built-in names rebuilt per seed, files,
folders of the chain's recorded epochs (one scenario per epoch) or Scenario objects with their
own seeds) and the ordered policy list with the baselines.

Seeds (compare and sweep alike): a built-in scenario is rebuilt for each seed ``1..N``
(``get_builtin_scenario(name, seed)``) and run with that seed; a scenario file (or a
:class:`Scenario`) keeps its fleet and runs with seeds ``scenario.seed + 0 .. + N - 1``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from keepersim.chaindata.fleet import load_epoch_scenarios
from keepersim.sim.devshard_path import compute_path_scenario, get_path_variants
from keepersim.sim.live_network import compute_live_scenario
from keepersim.sim.scenario import Scenario, load_scenario
from keepersim.sim.suite import get_builtin_scenario, list_builtin_scenarios
from keepersim.types.policies import (
    NO_POLICY,
    ORACLE,
    get_unknown_policy_problem,
    is_baseline,
)

__all__ = [
    "CompareError",
    "ScenarioSource",
    "order_policies",
    "resolve_scenarios",
]


class CompareError(ValueError):
    """Bad input of a set of runs (unknown policy or scenario, bad seeds or jobs); compare's
    and sweep's."""


@dataclass(frozen=True)
class ScenarioSource:
    label: str
    builtin: str | None = None
    scenario: Scenario | None = None
    #: The selection path the runs take (:func:`~keepersim.sim.devshard_path.compute_path_scenario`).
    selection_path: str = "scenario"
    slot_filter: bool = False
    #: The ``mainnet`` run preset (:mod:`keepersim.sim.live_network`), before the path.
    live: bool = False

    def get(self, index: int) -> tuple[Scenario, int]:
        """The scenario and run seed of the ``index``-th seed (0-based)."""
        if self.builtin is not None:
            seed = index + 1
            scenario = get_builtin_scenario(self.builtin, seed)
        else:
            assert self.scenario is not None
            scenario, seed = self.scenario, self.scenario.seed + index
        if self.live:
            scenario = compute_live_scenario(scenario)
        path = compute_path_scenario(scenario, self.selection_path, slot_filter=self.slot_filter)
        return path, seed


def resolve_scenarios(
    items: Sequence[Scenario | str | os.PathLike[str]],
    *,
    selection_path: str = "scenario",
    slot_filter: bool = False,
    live: bool = False,
) -> list[ScenarioSource]:
    """Built-in names, scenario file paths or Scenario objects -> sources with unique labels;
    each on ``selection_path`` (``both``: two sources, ``NAME@classic`` and ``NAME@devshard``),
    with the chain's filter at slot sampling when ``slot_filter``; ``live``: the ``mainnet``
    run preset first (its devshard path, then ``selection_path`` as asked)."""
    try:
        paths = get_path_variants(selection_path)
    except ValueError as exc:
        raise CompareError(str(exc)) from exc
    out: list[ScenarioSource] = []
    builtins = set(list_builtin_scenarios())
    for item in items:
        if isinstance(item, Scenario):
            out.append(ScenarioSource(item.name, scenario=item))
        elif isinstance(item, str) and item in builtins and not os.path.lexists(item):
            out.append(ScenarioSource(item, builtin=item))
        else:
            path = Path(item)
            if not os.path.lexists(path):  # a symlink loop: load_scenario names it
                raise CompareError(
                    f"{os.fspath(item)!r} is neither a built-in scenario "
                    f"({', '.join(sorted(builtins))}) nor an existing file or epoch folder"
                )
            if path.is_dir():
                # The chain's recorded epochs (an epoch_N folder, or one holding them): one
                # scenario per epoch (keepersim.chaindata.fleet, defaults of from-chain).
                for scenario in load_epoch_scenarios(path):
                    out.append(ScenarioSource(scenario.name, scenario=scenario))
                continue
            scenario = load_scenario(path)
            out.append(ScenarioSource(scenario.name, scenario=scenario))
    out = [
        dataclasses.replace(
            src,
            label=src.label if len(paths) == 1 else f"{src.label}@{path}",
            selection_path=path,
            slot_filter=slot_filter,
            live=live,
        )
        for src in out
        for path in paths
    ]
    seen: dict[str, int] = {}
    unique: list[ScenarioSource] = []
    for src in out:
        n = seen.get(src.label, 0) + 1
        seen[src.label] = n
        label = src.label if n == 1 else f"{src.label}#{n}"
        unique.append(dataclasses.replace(src, label=label))
    return unique


def order_policies(policies: Sequence[str]) -> list[str]:
    """``none`` first, the given policies in order (duplicates dropped), ``oracle`` last."""
    unknown = get_unknown_policy_problem(policies)
    if unknown:
        raise CompareError(unknown)
    middle: list[str] = []
    for p in policies:
        if not is_baseline(p) and p not in middle:
            middle.append(p)
    return [NO_POLICY, *middle, ORACLE]
