"""Upstream's devshard tests at gonka ee730031, as data (``vectors/*.json``), run against
keepersim: slot sampling (``calculations/slots_test.go``), the settlement's per-slot bound
(``keeper/devshard_settlement_test.go``), the gateway's ParticipantRequestLimiter
(``devshardctl/gateway_test.go``, ``capacity_state_test.go``) and session picker
(``devshardctl/session_picker_test.go``). Each vector names its upstream test and line; which
are ported, adapted (how) or out of scope (why): docs/design/devshard.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from keepersim.gateway import limiter as lim
from keepersim.gateway.limiter_params import (
    TOKEN_UNITS,
    ThrottleSettings,
    compute_limiter_params,
    compute_new_limiter_params,
)
from keepersim.gateway.picker import (
    HostChecks,
    PickerEvent,
    PickerRequest,
    PickerState,
    process_picker_run,
    process_submit,
)
from keepersim.gateway.signals import Signal, get_http_signal, get_transport_signal
from keepersim.keeper.devshard.host_stats import get_slot_stats_error
from keepersim.keeper.devshard.slots import (
    compute_escrow_slots,
    compute_sampled_slot_count,
    compute_slots_from_sorted,
    compute_sorted_entries,
    get_slot_from_sorted,
)
from keepersim.keeper.devshard.timing import DEFAULT_BLOCK_TIME_MS, compute_blocks_ceil
from keepersim.types.bech32 import compute_bech32

VECTORS = Path(__file__).resolve().parent / "vectors"
T0 = 100  # the height of an upstream test's t0


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return data


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["test"] for c in cases]


# --- slots ---

SLOTS = load("slots.json")


def slots_of(case: dict[str, Any], **override: Any) -> list[str]:
    c = {**case, **override}
    entries, total = compute_sorted_entries(c["weights"])
    return compute_slots_from_sorted(
        c["app_hash"], c["participant"], c["model"], entries, total, c["n_slots"]
    )


@pytest.mark.parametrize("case", SLOTS["cases"], ids=ids(SLOTS["cases"]))
def test_slots_vector(case: dict[str, Any]) -> None:
    expect = case["expect"]
    entries, total = compute_sorted_entries(case["weights"])
    if expect.get("entries_empty"):
        assert (entries, total) == ([], 0)
    if "single_slot" in case:
        got = [
            get_slot_from_sorted(
                case["app_hash"],
                case["participant"],
                case["model"],
                entries,
                total,
                case["single_slot"],
            )
        ]
    elif "single_slots" in case:
        got = [
            get_slot_from_sorted(
                case["app_hash"], case["participant"], case["model"], entries, total, i
            )
            for i in range(case["single_slots"])
        ]
    elif "n_slots" in case:
        got = slots_of(case)
    else:
        return
    counts = Counter(got)
    if expect.get("empty"):
        assert got in ([], [""])
    if "length" in expect:
        assert len(got) == expect["length"]
    if "counts" in expect:
        assert dict(counts) == expect["counts"]
    for address, (ratio, delta) in expect.get("ratios", {}).items():
        assert abs(counts[address] / len(got) - ratio) <= delta
    if "all_in" in expect:
        assert set(got) <= set(expect["all_in"])
    for address in expect.get("never", []):
        assert address not in counts
    for address in expect.get("positive", []):
        assert counts[address] > 0
    if expect.get("deterministic"):
        assert slots_of(case) == got
    for other in expect.get("differs_from", []):
        assert slots_of(case, **other) != got
    if expect.get("single_matches_bulk"):
        for i, address in enumerate(got):
            assert (
                get_slot_from_sorted(
                    case["app_hash"], case["participant"], case["model"], entries, total, i
                )
                == address
            )
    if expect.get("insertion_order_independent"):
        items = list(case["weights"].items())
        for order in (items[::-1], items[2:] + items[:2], sorted(items, key=lambda kv: kv[1])):
            assert slots_of(case, weights=dict(order)) == got


@pytest.mark.parametrize("mvp,total,n,want", SLOTS["sampled_slot_count"]["cases"])
def test_sampled_slot_count_vector(mvp: int, total: int, n: int, want: int) -> None:
    assert compute_sampled_slot_count(mvp, total, n) == want


def member_address(first_byte: int) -> str:
    """makeDevshardAddrs's address (msg_server_create_devshard_escrow_test.go:49-57)."""
    return compute_bech32("gonka", bytes([first_byte]) + bytes(19))


@pytest.mark.parametrize("case", SLOTS["escrow_cases"], ids=ids(SLOTS["escrow_cases"]))
def test_escrow_slots_vector(case: dict[str, Any]) -> None:
    start, count = case["members"]
    members = [member_address(start + i) for i in range(count)]
    got = compute_escrow_slots(
        b"", case["escrow_id"], case["model"], [(m, 100) for m in members], case["group_size"]
    )
    assert len(got) == case["expect"]["length"]
    assert set(got) <= set(members)


SETTLEMENT = load("settlement.json")


@pytest.mark.parametrize("case", SETTLEMENT["cases"], ids=ids(SETTLEMENT["cases"]))
def test_settlement_slot_bound_vector(case: dict[str, Any]) -> None:
    err = get_slot_stats_error(
        case["latest_nonce"], case["slot_count"], case["slot_id"], case["missed"], case["invalid"]
    )
    if case["error_contains"] is None:
        assert err is None
    else:
        assert err is not None and case["error_contains"] in err


# --- limiter ---

LIMITER = load("limiter.json")


class LimiterRun:
    """Runs one limiter vector: upstream's method names over heights."""

    def __init__(self, burst: int, rate: int) -> None:
        self.state = lim.compute_new_limiter(compute_new_limiter_params(burst, rate))
        self.height = T0

    def at(self, step: dict[str, Any]) -> int:
        if "at_ms" in step:
            h = T0 + compute_blocks_ceil(step["at_ms"], DEFAULT_BLOCK_TIME_MS)
        elif "at_blocks" in step:
            h = T0 + step["at_blocks"]
        else:
            h = self.height
        assert h >= self.height, "heights never go back"
        self.height = h
        return h

    def observe(self, step: dict[str, Any], signal: Signal | None, h: int) -> None:
        if signal is not None:
            for _ in range(step.get("repeat", 1)):
                lim.process_signal(self.state, step["host"], step.get("model", ""), signal, h)

    def step(self, step: dict[str, Any]) -> None:
        op, h = step["op"], self.at(step)
        host, model = step.get("host", ""), step.get("model", "")
        want: Any = step.get("want")
        s = self.state
        if op == "observe_result":
            self.observe(
                step, get_http_signal(step["path"], step["status"], step.get("body", "")), h
            )
        elif op == "observe_transport_failure":
            self.observe(step, get_transport_signal(step["path"], step["error"]), h)
        elif op.startswith("observe_"):
            self.observe(step, Signal(op.removeprefix("observe_")), h)
        elif op == "clear_quarantine":
            assert lim.process_clear_quarantine(s, host, h) is want
        elif op == "update_settings":
            lim.process_update_params(
                s, compute_limiter_params(ThrottleSettings(**step["settings"]))
            )
        elif op == "load_state":
            last = h + step["last_refill_ms"] // DEFAULT_BLOCK_TIME_MS
            lim.process_load_state(s, host, [], step["tokens"] * TOKEN_UNITS, last, 0, None, 0, h)
        elif op == "reload":
            row = s.hosts[host]
            self.state = lim.compute_new_limiter(compute_new_limiter_params(*step["limiter"]))
            lim.process_load_state(
                self.state, host, row.model_ids, row.tokens, row.last_refill, step["status"],
                row.quarantine_until, row.failure_strikes, h,
            )  # fmt: skip
        elif op == "allow":
            assert lim.is_admitted(s, host, model, h) is want
            assert lim.process_admission(s, host, model, h) is want
        elif op == "is_blocked":
            assert lim.is_blocked(s, host, model, h) is want
        elif op == "is_no_winner":
            got = host in step.get("suspicious", []) or lim.is_no_winner(s, host, model, h)
            assert got is want
        elif op == "is_available":
            assert lim.process_availability(s, host, model, h) is want
        elif op == "is_recently_quarantined":
            assert lim.is_recently_quarantined(s, host, model, h) is want
        elif op == "tracked_count":
            assert lim.get_tracked_count(s) == want
        elif op == "exhausted_count":
            assert lim.process_exhausted_count(s, h) == want
        elif op == "can_accept_escrow":
            assert (not lim.process_blocked_participants(s, step["hosts"], h)) is want
        elif op == "failure_strikes":
            assert s.hosts[host].failure_strikes == want
        elif op == "snapshot":
            snap = lim.process_snapshot(s, [host], h)[host]
            for name, value in want.items():
                got_value = getattr(snap, name)
                if name == "model_ids":
                    got_value = list(got_value)
                if name == "tokens":
                    got_value = got_value // TOKEN_UNITS
                assert got_value == value, name
        elif op == "state":
            entry = s.hosts.get(host)
            assert (entry is not None) is want.get("tracked", True)
            if entry is not None:
                got_row = {
                    "tracked": True,
                    "tokens": entry.tokens // TOKEN_UNITS,
                    "failure_strikes": entry.failure_strikes,
                    "model_ids": sorted(entry.model_ids),
                    "quarantined": entry.quarantine_until is not None,
                }
                assert {k: got_row[k] for k in want} == want
        else:
            raise AssertionError(f"unknown op {op}")


@pytest.mark.parametrize("case", LIMITER["cases"], ids=ids(LIMITER["cases"]))
def test_limiter_vector(case: dict[str, Any]) -> None:
    run = LimiterRun(*case["limiter"])
    for i, step in enumerate(case["steps"]):
        try:
            run.step(step)
        except AssertionError as e:
            raise AssertionError(f"{case['test']} step {i} {step}: {e}") from e


# --- picker ---

PICKER = load("picker.json")


def event_json(e: PickerEvent) -> dict[str, Any]:
    if e.kind == "dispatch":
        return {"kind": e.kind, "nonce": e.nonce, "slot": e.slot, "request": e.request_id}
    if e.kind == "ghost":
        assert e.ghost is not None
        return {"kind": e.kind, "nonce": e.nonce, "slot": e.slot, "ghost": e.ghost.value}
    if e.kind == "drop":
        return {"kind": e.kind, "request": e.request_id, "reason": e.reason}
    return {"kind": e.kind, "nonce": e.nonce, "slot": e.slot, "until": e.until}


@pytest.mark.parametrize("case", PICKER["cases"], ids=ids(PICKER["cases"]))
def test_picker_vector(case: dict[str, Any]) -> None:
    state = PickerState(participants=tuple(case["participants"]))
    stale = case.get("stale_blocks", 0)
    for step in case["steps"]:
        if step["op"] == "submit":
            process_submit(
                state,
                PickerRequest(
                    request_id=step["id"],
                    submit_height=step.get("at", 0),
                    exclude=frozenset(step.get("exclude", [])),
                    incompatible=frozenset(step.get("incompatible", [])),
                    canceled=step.get("canceled", False),
                ),
            )
        elif step["op"] == "run":
            poc = frozenset(step.get("poc", []))
            throttled = step.get("throttled", [])
            checks = HostChecks(
                poc_blocked=poc.__contains__,
                throttled=None if throttled is None else frozenset(throttled).__contains__,
            )
            events = process_picker_run(state, checks, step.get("at", 0), stale)
            assert [event_json(e) for e in events] == step["expect"]
            # the liveness invariant: every nonce used is a dispatch or a ghost, in order
            used = [e.nonce for e in events if e.kind in ("dispatch", "ghost")]
            assert used == list(range(state.nonce - len(used) + 1, state.nonce + 1))
        elif step["op"] == "nonce":
            assert state.nonce == step["want"]
