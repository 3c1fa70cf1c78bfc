"""One scenario run's result: its identity, final app hash and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RunResult",
]


@dataclass
class RunResult:
    """One run's identity, final app hash and metrics (see :mod:`keepersim.sim.metrics`)."""

    scenario: str
    policy: str
    seed: int
    blocks: int
    store: str
    shadow: bool
    chain_id: str
    selection: str
    app_hash: str
    metrics: dict[str, Any]
    wall_seconds: float
    governance_heights: list[int] = field(default_factory=list)
    trace_path: str | None = None

    @property
    def inferences(self) -> int:
        return int(self.metrics["inferences"])

    @property
    def misses(self) -> int:
        return int(self.metrics["misses"])

    @property
    def miss_rate(self) -> float:
        return float(self.metrics["miss_rate"])

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-able record: identity, every metric, timing."""
        inferences = self.inferences
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "seed": self.seed,
            "blocks": self.blocks,
            "store": self.store,
            "shadow": self.shadow,
            "selection": self.selection,
            "chain_id": self.chain_id,
            "app_hash": self.app_hash,
            **self.metrics,
            "governance_heights": list(self.governance_heights),
            "trace_path": self.trace_path,
            "wall_seconds": self.wall_seconds,
            "inferences_per_second": inferences / self.wall_seconds if self.wall_seconds else 0.0,
            "blocks_per_second": self.blocks / self.wall_seconds if self.wall_seconds else 0.0,
        }
