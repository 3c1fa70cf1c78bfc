"""A sweep's SPEC.json: parsed and validated in full before any run (docs/sweeps.md).

``{"scenarios": [names or files], "policies": [...], "seeds": N or [list],
"grid": {"dotted.param.path": [values], ...}, "traces": [...]}``. Every error is one line naming
the spec file, the key and the rule (:class:`SpecError`). A grid path must reach one scalar or
Decimal field of ``keepersim.v1.ModuleParams`` (checked against its descriptor), and every grid
point must give valid params for every (scenario, policy): each is built and run through
``validate_params`` here.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keepersim.inputs import InputError, read_json_input
from keepersim.limits import MAX_SWEEP_GRID_POINTS, MAX_SWEEP_RUNS
from keepersim.runs.sources import order_policies, resolve_scenarios
from keepersim.sim.governance import compute_params_with_changes
from keepersim.sim.run_errors import GovernanceError
from keepersim.sim.run_genesis import build_params
from keepersim.sim.scenario import Scenario, ScenarioError, dump_scenario, get_json_type
from keepersim.types.errors import KeepersimError
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import BASELINES, POLICY_NAMES, is_baseline

__all__ = [
    "BASELINE_NEUTRAL_PREFIXES",
    "SPEC_KEYS",
    "SpecError",
    "SweepScenario",
    "SweepSpec",
    "is_baseline_neutral",
    "is_path_for_policy",
    "load_spec",
    "parse_spec",
]

SPEC_KEYS = ("scenarios", "policies", "seeds", "grid", "traces")
#: Paths the baselines do not read: a health policy's own params (``none`` filters nothing and
#: the oracle is the harness's) and the #942 circuit breaker's (read by the gonka policies
#: only). A grid over these alone runs ``none`` and ``oracle`` once per (scenario, seed); any
#: other path (the chain's params, selection, SPRT, shadow) runs them at every grid point.
BASELINE_NEUTRAL_PREFIXES = ("extension_params.health_params.", "extension_params.cb_")
_BASELINE_AFFECTING = ("extension_params.health_params.shadow",)
#: Set by the sweep itself (the ``policies`` axis), never by the grid.
_RESERVED_PATHS = {
    "extension_params.health_params.policy": "the policy is the spec's 'policies' axis",
}


class SpecError(KeepersimError):
    """An invalid sweep spec (one line: the file, the key, the rule)."""


@dataclass(frozen=True)
class SweepScenario:
    """A scenario of the sweep: its label, and a built-in name or the scenario's JSON."""

    label: str
    source: str | dict[str, Any]
    first: Scenario

    def get_run_seeds(self, seeds: int | tuple[int, ...]) -> list[int]:
        """The run seeds: a list as given; ``N``: a built-in's 1..N, a file's own seed + 0..N-1
        (as compare)."""
        if not isinstance(seeds, int):
            return list(seeds)
        start = 1 if isinstance(self.source, str) else self.first.seed
        return list(range(start, start + seeds))


@dataclass(frozen=True)
class SweepSpec:
    """A validated spec. ``seeds``: a count or the run seeds (:meth:`SweepScenario.get_run_seeds`);
    ``grid``: path -> values, in file order."""

    path: str
    scenarios: tuple[SweepScenario, ...]
    policies: tuple[str, ...]
    seeds: int | tuple[int, ...]
    grid: dict[str, list[Any]]
    traces: tuple[str, ...]
    data: dict[str, Any]

    @property
    def grid_paths(self) -> list[str]:
        return list(self.grid)

    def get_points(self) -> list[dict[str, Any]]:
        """Every grid point ``{path: value}`` (the cartesian product; ``[{}]`` without a grid)."""
        paths = self.grid_paths
        return [
            dict(zip(paths, combo, strict=True)) for combo in itertools.product(*self.grid.values())
        ]


def is_baseline_neutral(path: str) -> bool:
    """Whether the baselines ignore ``path`` (see :data:`BASELINE_NEUTRAL_PREFIXES`)."""
    if path in _BASELINE_AFFECTING:
        return False
    return path.startswith(BASELINE_NEUTRAL_PREFIXES)


def is_path_for_policy(path: str, policy: str) -> bool:
    """Whether a run of ``policy`` reads ``path``. A policy's own params message
    (``extension_params.health_params.<policy>.``, e.g. ``windowed`` or ``trin_additive``)
    is read by that policy alone; the baselines read what is not baseline-neutral; every other
    path reaches every policy."""
    if is_baseline(policy):
        return not is_baseline_neutral(path)
    parts = path.split(".")
    if len(parts) > 3 and parts[:2] == ["extension_params", "health_params"]:
        owner = parts[2].replace("_", "-")
        return owner == policy or owner not in POLICY_NAMES
    return True


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and validate SPEC.json (a :class:`SpecError` naming the file on any problem)."""
    shown = os.fspath(path)
    try:
        data = read_json_input(path, "sweep spec")
    except InputError as exc:
        raise SpecError(str(exc)) from exc
    return parse_spec(data, shown, base_dir=Path(path).parent)


def _fail(source: str, key: str, rule: str) -> SpecError:
    return SpecError(f"{source}: {key}: {rule}")


def _get_list(data: Mapping[str, Any], key: str, source: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list) or not value:
        got = get_json_type(value) if key in data else "nothing"
        raise _fail(source, key, f"expected a non-empty list, got {got}")
    return value


def _parse_scenarios(
    data: Mapping[str, Any], source: str, base_dir: Path
) -> tuple[SweepScenario, ...]:
    items = _get_list(data, "scenarios", source)
    resolved: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise _fail(source, f"scenarios[{i}]", f"expected a name or a file, got {item!r}")
        candidate = base_dir / item
        resolved.append(
            os.fspath(candidate)
            if not os.path.lexists(item) and os.path.lexists(candidate)
            else item
        )
    try:
        sources = resolve_scenarios(resolved)
    except (ScenarioError, ValueError) as exc:
        raise _fail(source, "scenarios", str(exc)) from exc
    out: list[SweepScenario] = []
    for src in sources:
        first = src.get(0)[0]
        payload: str | dict[str, Any] = (
            src.builtin if src.builtin is not None else dump_scenario(first)
        )
        out.append(SweepScenario(src.label, payload, first))
    return tuple(out)


def _parse_seeds(data: Mapping[str, Any], source: str) -> int | tuple[int, ...]:
    """``N`` (a count) or a list of run seeds (integers, no repeats)."""
    value = data.get("seeds")
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise _fail(source, "seeds", f"expected an integer >= 1 or a list, got {value}")
        return value
    if isinstance(value, list) and value:
        for i, s in enumerate(value):
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise _fail(source, f"seeds[{i}]", f"expected an integer >= 0, got {s!r}")
        if len(set(value)) != len(value):
            raise _fail(source, "seeds", "a seed is listed twice")
        return tuple(value)
    got = get_json_type(value) if "seeds" in data else "nothing"
    raise _fail(source, "seeds", f"expected an integer >= 1 or a non-empty list, got {got}")


def _check_path(path: str, source: str) -> None:
    """The path reaches one non-repeated scalar or Decimal field of ModuleParams."""
    key = f"grid[{path!r}]"
    if path in _RESERVED_PATHS:
        raise _fail(source, key, _RESERVED_PATHS[path])
    descriptor = ModuleParams.DESCRIPTOR
    parts = path.split(".")
    for i, part in enumerate(parts):
        fd = descriptor.fields_by_name.get(part)
        where = ".".join(parts[:i]) or "ModuleParams"
        if fd is None:
            known = ", ".join(sorted(descriptor.fields_by_name))
            raise _fail(source, key, f"{where} has no field {part!r} (fields: {known})")
        repeated = bool(getattr(fd, "is_repeated", False) or getattr(fd, "label", 0) == 3)
        if repeated:
            raise _fail(source, key, f"{'.'.join(parts[: i + 1])} is a list; a grid sets one value")
        message = fd.message_type
        last = i == len(parts) - 1
        if last:
            if message is not None and not message.full_name.endswith(".Decimal"):
                raise _fail(
                    source, key, f"{path} is a message ({message.name}); name one of its fields"
                )
            return
        if message is None:
            raise _fail(source, key, f"{'.'.join(parts[: i + 1])} is not a message field")
        descriptor = message


def _parse_grid(data: Mapping[str, Any], source: str) -> dict[str, list[Any]]:
    grid = data.get("grid", {})
    if not isinstance(grid, dict):
        raise _fail(
            source, "grid", f"expected an object {{path: [values]}}, got {get_json_type(grid)}"
        )
    out: dict[str, list[Any]] = {}
    for path, values in grid.items():
        _check_path(path, source)
        key = f"grid[{path!r}]"
        if not isinstance(values, list) or not values:
            raise _fail(
                source, key, f"expected a non-empty list of values, got {get_json_type(values)}"
            )
        cells = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(cells)) != len(cells):
            raise _fail(source, key, "a value is listed twice")
        for j, value in enumerate(values):
            if isinstance(value, dict | list) or value is None:
                raise _fail(
                    source,
                    f"{key}[{j}]",
                    f"expected a number, string or boolean, got {get_json_type(value)}",
                )
        out[path] = list(values)
    return out


def _count(value: Any) -> int:
    """How many items a spec's list (or a seed count) asks for; 1 when it is malformed (the
    key's own check names that)."""
    if isinstance(value, list):
        return max(len(value), 1)
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, 1)
    return 1


def _check_size(data: Mapping[str, Any], source: str) -> None:
    """Refuse a grid above MAX_SWEEP_GRID_POINTS or a sweep above MAX_SWEEP_RUNS, counted from
    the lists' lengths before any scenario is read or any value checked (each costs time)."""
    grid = data.get("grid")
    points = 1
    if isinstance(grid, dict):
        for values in grid.values():
            points *= _count(values)
    if points > MAX_SWEEP_GRID_POINTS:
        raise _fail(
            source,
            "grid",
            f"{points:,} grid points (the product of the value lists' lengths), above the "
            f"limit of {MAX_SWEEP_GRID_POINTS:,}",
        )
    policies = data.get("policies")
    named = set(p for p in policies if isinstance(p, str)) if isinstance(policies, list) else set()
    runs = (
        points
        * _count(data.get("scenarios"))
        * len(named | set(BASELINES))
        * _count(data.get("seeds"))
    )
    if runs > MAX_SWEEP_RUNS:
        raise SpecError(
            f"{source}: {runs:,} runs (grid points x scenarios x policies with the baselines "
            f"x seeds), above the limit of {MAX_SWEEP_RUNS:,} for a sweep"
        )


def _check_values(spec: SweepSpec) -> None:
    """Each value alone, then each grid point, on every (scenario, policy)'s default params."""
    for scenario in spec.scenarios:
        for policy in spec.policies:
            base = build_params(scenario.first, policy)
            for path, values in spec.grid.items():
                for j, value in enumerate(values):
                    where = (
                        f"{spec.path}: grid[{path!r}][{j}] = {value!r} ({scenario.label}, {policy})"
                    )
                    _apply(base, {path: value}, where)
            if len(spec.grid) > 1:
                for point in spec.get_points():
                    shown = ", ".join(f"{p}={v!r}" for p, v in point.items())
                    _apply(
                        base, point, f"{spec.path}: grid point {shown} ({scenario.label}, {policy})"
                    )


def _apply(base: ModuleParams, changes: Mapping[str, Any], where: str) -> None:
    try:
        compute_params_with_changes(base, changes, where)
    except GovernanceError as exc:
        raise SpecError(str(exc)) from exc


def parse_spec(data: object, source: str, *, base_dir: Path | None = None) -> SweepSpec:
    """Validate decoded SPEC.json; scenario files are found as given or next to the spec."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a JSON object, got {get_json_type(data)}")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise _fail(source, unknown[0], f"unknown key (known: {', '.join(SPEC_KEYS)})")
    if "traces" in data:
        traces = data["traces"]
        if not isinstance(traces, list) or not all(isinstance(t, str) and t for t in traces):
            raise _fail(
                source, "traces", f"expected a list of trace files, got {get_json_type(traces)}"
            )
        if traces:
            raise _fail(
                source,
                "traces",
                "what-if runs on traces are not wired into sweeps yet; give scenarios only",
            )
    _check_size(data, source)
    scenarios = _parse_scenarios(data, source, base_dir or Path("."))
    policies_in = _get_list(data, "policies", source)
    for i, p in enumerate(policies_in):
        if not isinstance(p, str):
            raise _fail(source, f"policies[{i}]", f"expected a policy name, got {p!r}")
    try:
        policies = order_policies(policies_in)
    except ValueError as exc:
        raise _fail(source, "policies", str(exc)) from exc
    seeds = _parse_seeds(data, source)
    grid = _parse_grid(data, source)
    spec = SweepSpec(
        path=source,
        scenarios=scenarios,
        policies=tuple(policies),
        seeds=seeds,
        grid=grid,
        traces=(),
        data=dict(data),
    )
    _check_values(spec)
    return spec
