"""Say so when a policy never acted: a comparison row equal to ``none`` needs a reason in words.

A policy *never acted* on a scenario when, on every seed, it made no health transition, kept
nobody out (``excluded_weight_share`` 0) and sent every participant exactly the traffic ``none``
sent it on the same seed (so a weight-factor policy that reshuffled traffic has acted). Then the
summary row has ``acted: false`` and an ``inaction`` sentence naming the rule that never fired,
with the run's thresholds (e.g. "consecutive never opened a breaker: no participant reached 5
consecutive misses"). A policy that acted on some seed but changed no run's miss count (a
breaker open for a few blocks) gets a sentence saying how little it did.
See docs/metrics.md ("acted", "inaction").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keepersim.types.params import get_cb_settings, get_decimal_value
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.policies import BASELINES, NO_POLICY

__all__ = ["compute_inaction_note", "get_inaction_reason", "is_policy_idle"]

#: The baselines never get a note: ``none`` never acts by design, ``oracle`` is the yardstick.
_NO_NOTE = frozenset(BASELINES)


def get_inaction_reason(policy: str, params: ModuleParams) -> tuple[str, str]:
    """``(what it never did, why)`` in words, with the params' thresholds, e.g. ``("never
    opened a breaker", "no participant reached 5 consecutive misses")``."""
    h = params.extension_params.health_params
    if policy == "consecutive":
        n = h.consecutive.failure_threshold
        return "never opened a breaker", f"no participant reached {n} consecutive misses"
    if policy == "gonka":
        c = get_cb_settings(params.extension_params)
        return "never opened a breaker", (
            f"no participant missed more than {c.miss_threshold_pct}% of at least "
            f"{c.min_samples} inferences in an epoch"
        )
    if policy == "windowed":
        w = h.windowed
        return "never excluded anybody", (
            f"no participant's miss rate over its last {w.window} outcomes was significantly "
            f"(z {w.confidence_z_milli / 1000:g}) above {w.baseline_miss_pct}%"
        )
    if policy == "sprt":
        v = params.params.validation_params
        if not params.extension_params.sprt_enabled:
            return "never deactivated anybody", "SPRT is disabled in the params"
        return "never deactivated anybody", (
            "no participant's SPRT log-likelihood ratio reached "
            f"{get_decimal_value(v.downtime_h_threshold)} "
            f"(p0 {get_decimal_value(v.downtime_good_percentage)}, "
            f"p1 {get_decimal_value(v.downtime_bad_percentage)})"
        )
    if policy.startswith("trin"):
        return "never moved traffic", (
            "its scores left every participant the requests that no policy sends it"
        )
    return "never acted", "no health transition and nobody kept out"


def is_policy_idle(record: dict[str, Any], none_record: dict[str, Any]) -> bool:
    """One run: no transition, nobody kept out, and the same traffic per participant as ``none``."""
    if record["transitions"] or record["excluded_weight_share"]:
        return False
    if record["misses"] != none_record["misses"]:
        return False
    mine = {p["address"]: p["assigned"] for p in record["participants"]}
    base = {p["address"]: p["assigned"] for p in none_record["participants"]}
    return mine == base


def compute_inaction_note(
    policy: str,
    records: Sequence[dict[str, Any]],
    none_records: Sequence[dict[str, Any]],
    params: ModuleParams,
) -> tuple[bool, str | None]:
    """``(acted, note)`` of a (scenario, policy) row; ``none_records``: the same scenario's
    ``none`` runs (matched by seed).

    ``acted`` is False when no run made a transition, kept anybody out or moved traffic. The
    note (None when the policy changed some run's misses) says why the row equals ``none``'s:
    the rule that never fired, or, when it acted on some seed without changing a miss count,
    how little it did."""
    if policy in _NO_NOTE or not records:
        return policy != NO_POLICY, None
    base = {r["seed"]: r for r in none_records}
    pairs = [(r, base[r["seed"]]) for r in records if r["seed"] in base]
    if len(pairs) < len(records):
        return True, None
    idle = sum(is_policy_idle(r, n) for r, n in pairs)
    runs = len(records)
    plural = "run" if runs == 1 else "runs"
    verb, why = get_inaction_reason(policy, params)
    if idle == runs:
        return False, (
            f"{policy} {verb}: {why} (0 transitions in {runs} {plural}; every number equals none's)"
        )
    if any(r["misses"] != n["misses"] for r, n in pairs):
        return True, None
    transitions = sum(r["transitions"] for r in records)
    most = max(r["excluded_weight_share"] for r in records)
    text = (
        f"{policy} changed no miss: {transitions} transitions in {runs} {plural} kept out "
        f"{100 * most:.4f}% of the weight (mean over blocks, largest run), and every run's misses equal none's"
    )
    if idle:
        text += f"; in {idle} of the {runs} runs it {verb} ({why})"
    return True, text
