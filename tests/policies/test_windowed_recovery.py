"""windowed's recovery rules on the real chain (issue 16), each against the same inputs with the
rule off: readmit_successes, short_window, incident_blocks, strikes_until_proven and
recovered_max_cooldown_blocks; and a property test with all five on."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import Net, NetFactory, make_policy_genesis, to_names
from test_windowed import exclude, make_w_params, reach_probe, record

from keepersim.chain import Chain
from keepersim.keeper.policies.base import PolicyReader
from keepersim.keeper.policies.windowed import (
    FLEET,
    MAX_STRIKES,
    RECOVERY_EVIDENCE,
    WindowedBreaker,
    get_probation_blocks,
)
from keepersim.store.cache import forget_all_derived
from keepersim.types.messages import MsgStartInference
from keepersim.types.params import validate_params
from keepersim.types.pb.keepersim.v1.extension_params_pb2 import ModuleParams
from keepersim.types.pb.keepersim.v1.health_pb2 import WindowedEntry

WEIGHTS = {"a": 100, "b": 100, "c": 100}


def get_entry(net: Net, address: str) -> WindowedEntry:
    """The stored entry (the state view shows neither the fleet's lists nor recoveries)."""
    with net.chain.read() as k:
        raw = PolicyReader(k, WindowedBreaker()).get_raw(address)
    return WindowedBreaker.get_entry(raw, address)


def make_rule_net(make_net: NetFactory, **rules: object) -> Net:
    params = make_w_params(**rules)
    validate_params(params)
    return make_net(params, WEIGHTS)


def readmit(net: Net, address: str) -> int:
    """Probe successes one at a time until re-admitted; how many it took."""
    count = 0
    while net.state(address)["state"] == "probe":
        net.succeed(address)
        count += 1
    assert to_names(net.transitions(address))[-1] == ("probe", "healthy")
    return count


def prove_recovery(net: Net, address: str) -> None:
    """From probing: RECOVERY_EVIDENCE successes in one block, re-admitted on the way."""
    assert net.state(address)["state"] == "probe"
    recoveries = get_entry(net, address).recoveries
    net.succeed_many(address, RECOVERY_EVIDENCE)
    assert net.state(address)["state"] == "healthy"
    assert get_entry(net, address).recoveries == recoveries + 1


# --- readmit_successes --------------------------------------------------------------------


def test_readmit_successes_readmits_on_the_probe_evidence(make_net: NetFactory) -> None:
    """4 misses of 4, then probe successes: with readmit_successes 3, the third re-admits
    (the old misses are not read); with the rule off, 4 misses of 7 still fail the gate."""
    probed = {}
    for readmit_successes in (3, 0):
        net = make_rule_net(make_net, readmit_successes=readmit_successes)
        exclude(net, "a", successes=0, misses=4)
        reach_probe(net, "a")
        states = []
        for _ in range(3):
            net.succeed("a")
            states.append(net.state("a")["state"])
        probed[readmit_successes] = states
        if readmit_successes:
            last = net.transitions("a")[-1]
            assert "window 0/3 missed" in last.reason
            # The exclusion gate still reads the whole window: 5 of 8, out on the next miss.
            net.miss("a")
            assert net.state("a")["state"] == "excluded"
            assert (net.state("a")["window_misses"], net.state("a")["window_samples"]) == (5, 8)
    assert probed[3] == ["probe", "probe", "healthy"]
    assert probed[0] == ["probe", "probe", "probe"]


def test_readmit_successes_counts_from_the_latest_probing(make_net: NetFactory) -> None:
    """Probe successes before a failed probe do not count: the next probing counts from its
    own start (process_promote resets probe_from_seq)."""
    net = make_rule_net(make_net, readmit_successes=3, initial_cooldown_blocks=10)
    exclude(net, "a", successes=0, misses=4)
    reach_probe(net, "a")
    net.succeed("a")
    net.succeed("a")
    net.miss("a")  # the probe misses: excluded again
    assert to_names(net.transitions("a"))[-1] == ("probe", "excluded")
    reach_probe(net, "a")
    assert get_entry(net, "a").probe_from_seq == get_entry(net, "a").outcome_seq
    net.succeed("a")
    net.succeed("a")
    assert net.state("a")["state"] == "probe"  # 2 fresh successes: the earlier 2 do not count
    net.succeed("a")
    assert net.state("a")["state"] == "healthy"


# --- short_window -------------------------------------------------------------------------


def test_short_window_excludes_a_burst_after_a_clean_record(make_net: NetFactory) -> None:
    """28 successes then 4 misses: 4 of 32 passes the gate, 4 of the newest 8 fails it."""
    for short_window, expected in ((8, "excluded"), (0, "healthy")):
        net = make_rule_net(make_net, short_window=short_window)
        record(net, "a", 28, 4)
        view = net.state("a")
        assert (view["window_misses"], view["window_samples"]) == (4, 32)
        assert view["window_failing"] is False  # the long window alone passes
        assert view["state"] == expected, short_window


def test_short_window_passes_misses_spread_out(make_net: NetFactory) -> None:
    """The same 4 misses spread out (one every 8 outcomes): no short window fails."""
    net = make_rule_net(make_net, short_window=8)
    for _ in range(4):
        record(net, "a", 7, 1)
    view = net.state("a")
    assert (view["window_misses"], view["window_samples"], view["state"]) == (4, 32, "healthy")


# --- incident_blocks ----------------------------------------------------------------------


def run_incident(make_net: NetFactory, incident_blocks: int) -> Net:
    """a excluded, then b 21 blocks later (their episodes 21 blocks apart); a's cooldown ends
    first and a proves its recovery while b still sits out its cooldown."""
    net = make_rule_net(make_net, incident_blocks=incident_blocks)
    exclude(net, "a")
    exclude(net, "b")
    started_a = get_entry(net, "a").episode_started_at
    started_b = get_entry(net, "b").episode_started_at
    assert started_b - started_a == 21
    assert sorted(get_entry(net, FLEET).excluded) == ["a", "b"]
    reach_probe(net, "a")
    prove_recovery(net, "a")
    assert net.height < get_entry(net, "b").probe_at_block  # b's cooldown is not over
    return net


def test_incident_over_probes_the_others_of_the_incident(make_net: NetFactory) -> None:
    net = run_incident(make_net, incident_blocks=30)
    assert net.state("b")["state"] == "probe"
    last = net.transitions("b")[-1]
    assert (last.from_state, last.to_state) == ("excluded", "probe")
    assert last.reason == "incident over: a recovered"
    assert list(get_entry(net, FLEET).excluded) == []
    assert list(get_entry(net, FLEET).probing) == ["b"]
    assert "b" in net.admitted()


def test_a_stale_cooldown_wakeup_judges_no_window(make_net: NetFactory) -> None:
    """b, probed early by the incident's end, is re-admitted on its probe evidence while its
    whole window still fails the gate. Its old cooldown wake-up (the exclusion ended before it)
    judges nothing: only a miss (or reaching min_samples) has the gate judge a window, so b
    stays in until its next miss."""
    net = make_rule_net(make_net, incident_blocks=30, readmit_successes=3)
    exclude(net, "a")
    exclude(net, "b", successes=0, misses=4)
    reach_probe(net, "a")
    prove_recovery(net, "a")
    assert net.state("b")["state"] == "probe"
    old_wakeup = get_entry(net, "b").probe_at_block
    readmit(net, "b")
    assert net.state("b")["window_failing"] is True
    assert net.height < old_wakeup
    net.run_until(old_wakeup + 1)
    assert net.state("b")["state"] == "healthy"
    net.miss("b")
    assert net.state("b")["state"] == "excluded"


def test_incident_over_is_off_at_zero(make_net: NetFactory) -> None:
    net = run_incident(make_net, incident_blocks=0)
    assert net.state("b")["state"] == "excluded"
    assert list(get_entry(net, FLEET).excluded) == ["b"]
    assert "b" not in net.admitted()


def test_incident_over_leaves_episodes_begun_too_far_apart(make_net: NetFactory) -> None:
    net = run_incident(make_net, incident_blocks=20)  # 21 blocks apart: another incident
    assert net.state("b")["state"] == "excluded"
    assert "b" not in net.admitted()


def test_a_readmission_without_proof_ends_no_incident(make_net: NetFactory) -> None:
    """Re-admitted on 3 probe successes (2 of 7), short of RECOVERY_EVIDENCE: b stays out."""
    net = make_rule_net(make_net, incident_blocks=30)
    exclude(net, "a")
    exclude(net, "b")
    reach_probe(net, "a")
    assert readmit(net, "a") == 3
    assert get_entry(net, "a").recoveries == 0
    assert net.state("b")["state"] == "excluded"


# --- strikes_until_proven -----------------------------------------------------------------


def run_late_reexclusion(make_net: NetFactory, strikes_until_proven: bool) -> Net:
    """Excluded, re-admitted by luck on 3 probe successes (no recovery proven), then out
    again after the probation."""
    net = make_rule_net(make_net, strikes_until_proven=strikes_until_proven)
    exclude(net, "a")
    reach_probe(net, "a")
    readmit(net, "a")
    readmitted = net.transitions("a")[-1].height
    probation = get_probation_blocks(net.chain.get_params().extension_params.health_params.windowed)
    net.run_until(readmitted + probation)
    net.miss("a", 2)
    assert net.state("a")["state"] == "excluded"
    assert net.transitions("a")[-1].height > readmitted + probation
    return net


def test_strikes_until_proven_keeps_strikes_across_a_late_reexclusion(
    make_net: NetFactory,
) -> None:
    kept = run_late_reexclusion(make_net, strikes_until_proven=True)
    reset = run_late_reexclusion(make_net, strikes_until_proven=False)
    assert (kept.state("a")["strikes"], kept.state("a")["cooldown_blocks"]) == (1, 100)
    assert (reset.state("a")["strikes"], reset.state("a")["cooldown_blocks"]) == (0, 50)
    # The episode: still the first exclusion's with the rule, a new one without it.
    first = kept.transitions("a")[0].height
    assert get_entry(kept, "a").episode_started_at == first
    assert get_entry(reset, "a").episode_started_at == reset.transitions("a")[-1].height


def run_quick_reexclusion_after_proof(make_net: NetFactory, strikes_until_proven: bool) -> Net:
    """Excluded, a recovery proven, then out again well within the probation."""
    net = make_rule_net(make_net, strikes_until_proven=strikes_until_proven)
    exclude(net, "a")
    reach_probe(net, "a")
    prove_recovery(net, "a")
    readmitted = [t for t in net.transitions("a") if t.to_state == "healthy"][-1].height
    net.miss("a", 4)  # 6 of 24
    assert net.state("a")["state"] == "excluded"
    probation = get_probation_blocks(net.chain.get_params().extension_params.health_params.windowed)
    assert net.transitions("a")[-1].height < readmitted + probation
    return net


def test_strikes_until_proven_resets_strikes_on_a_proven_recovery(make_net: NetFactory) -> None:
    fresh = run_quick_reexclusion_after_proof(make_net, strikes_until_proven=True)
    quick = run_quick_reexclusion_after_proof(make_net, strikes_until_proven=False)
    assert (fresh.state("a")["strikes"], fresh.state("a")["cooldown_blocks"]) == (0, 50)
    assert (quick.state("a")["strikes"], quick.state("a")["cooldown_blocks"]) == (1, 100)
    assert get_entry(fresh, "a").episode_started_at == fresh.transitions("a")[-1].height


# --- recovered_max_cooldown_blocks --------------------------------------------------------


def run_failed_probes_after_proof(
    make_net: NetFactory, recovered_max: int
) -> tuple[Net, dict[str, object]]:
    """A recovery proven, a quick re-exclusion (strike 1), then a failed probe (strike 2:
    initial 50 * 4 = 200 uncapped); b never proved a recovery and fails the same probes.
    The net and a's view right after its failed probe."""
    net = make_rule_net(make_net, recovered_max_cooldown_blocks=recovered_max)
    exclude(net, "a")
    reach_probe(net, "a")
    prove_recovery(net, "a")
    net.miss("a", 4)
    assert net.state("a")["strikes"] == 1
    reach_probe(net, "a")
    net.miss("a")
    view = net.state("a")
    exclude(net, "b")
    for _ in range(2):
        reach_probe(net, "b")
        net.miss("b")
    return net, view


def test_recovered_max_cooldown_caps_a_recovered_participant(make_net: NetFactory) -> None:
    capped, a = run_failed_probes_after_proof(make_net, recovered_max=100)
    _, a_off = run_failed_probes_after_proof(make_net, recovered_max=0)
    b = capped.state("b")
    assert (a["strikes"], a["cooldown_blocks"]) == (2, 100)
    assert a["probe_at_block"] == int(a["excluded_at_block"]) + 100  # type: ignore[call-overload]
    # Without a proven recovery the cap is max_cooldown_blocks: b's 2 strikes cost 200.
    assert get_entry(capped, "b").recoveries == 0
    assert (b["strikes"], b["cooldown_blocks"]) == (2, 200)
    assert (a_off["strikes"], a_off["cooldown_blocks"]) == (2, 200)


# --- all five rules on, random outcomes ---------------------------------------------------

ADDRESSES = ("p0", "p1", "p2")
PROPERTY_EXPIRY = 6


def make_property_params() -> ModuleParams:
    params = make_w_params(
        expiration_blocks=PROPERTY_EXPIRY,
        window=16,
        min_samples=3,
        short_window=6,
        readmit_successes=3,
        incident_blocks=30,
        strikes_until_proven=True,
        initial_cooldown_blocks=4,
        max_cooldown_blocks=64,
        recovered_max_cooldown_blocks=16,
        jitter_pct=50,
        ramp_blocks=6,
        overdue_min_blocks=2,
    )
    validate_params(params)
    return params


@dataclass(frozen=True)
class Step:
    """``repeat`` times: ``count`` inferences of one participant started in one block, each
    resolved ``delay`` blocks later as ``kind`` (s: finished, d: declined, m: never: it
    expires), then ``wait`` empty blocks."""

    who: int
    kind: str
    count: int
    delay: int
    wait: int
    repeat: int = 1


steps_strategy = st.lists(
    st.builds(
        Step,
        who=st.integers(0, len(ADDRESSES) - 1),
        kind=st.sampled_from("sssssmmd"),
        count=st.integers(1, 8),
        delay=st.sampled_from((1, 1, 1, 2, 4)),  # 4: past the overdue threshold of 3
        wait=st.integers(0, 3),
        repeat=st.integers(1, 4),
    ),
    min_size=1,
    max_size=60,
)


def check_consistent(net: Net, max_cooldown: int) -> None:
    fleet = get_entry(net, FLEET)
    for address in ADDRESSES:
        view = net.state(address)
        assert (address in fleet.excluded) == (view["state"] == "excluded"), address
        assert (address in fleet.probing) == (view["state"] == "probe"), address
        assert int(view["strikes"]) <= MAX_STRIKES  # type: ignore[call-overload]
        assert int(view["cooldown_blocks"]) * 2 <= max_cooldown * 3  # type: ignore[call-overload]
    assert len(set(fleet.excluded)) == len(fleet.excluded)
    assert len(set(fleet.probing)) == len(fleet.probing)


def run_steps(
    chain: Chain, steps: list[Step], cold: bool = False
) -> list[tuple[bytes, list[tuple[str, str, str, str]]]]:
    """Every block's app hash and transitions; the state view checked after every block.
    ``cold``: the policy's in-memory hints forgotten before every other block (as after a
    reopen)."""
    net = Net(chain)
    max_cooldown = chain.get_params().extension_params.health_params.windowed.max_cooldown_blocks
    due: dict[int, list[object]] = {}
    out = []

    def deliver(msgs: list[object]) -> None:
        msgs = [*due.pop(net.height + 1, []), *msgs]
        if cold and net.height % 2:
            forget_all_derived()
        result = net.block(*msgs)
        out.append(
            (
                result.app_hash,
                [(t.address, t.from_state, t.to_state, t.reason) for t in net.transitions()],
            )
        )
        net.results.clear()
        check_consistent(net, max_cooldown)

    for step in steps:
        for _ in range(step.repeat):
            starts: list[MsgStartInference] = [
                net.start(ADDRESSES[step.who]) for _ in range(step.count)
            ]
            at = net.height + 1 + step.delay
            if step.kind == "s":
                due.setdefault(at, []).extend(net.finish(s) for s in starts)
            elif step.kind == "d":
                due.setdefault(at, []).extend(net.decline(s) for s in starts)
            deliver(list(starts))
            for _ in range(step.wait):
                deliver([])
    while due:
        deliver([])
    for _ in range(PROPERTY_EXPIRY + 1):
        deliver([])
    return out


def open_property_chain(folder: Path | None) -> Chain:
    genesis = make_policy_genesis(make_property_params(), dict.fromkeys(ADDRESSES, 100))
    if folder is None:
        return Chain.open(memory=True, genesis=genesis)
    return Chain.open(folder, genesis=genesis)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy)
def test_all_rules_on_same_hashes_on_leveldb_and_memory_and_consistent_state(
    steps: list[Step],
) -> None:
    """Under all five rules: every block's app hash and transitions the same on LevelDB, in
    memory and in memory with the hints forgotten; after every block the state view agrees
    with the fleet's lists and strikes and cooldowns stay bounded (check_consistent)."""
    with tempfile.TemporaryDirectory() as tmp, open_property_chain(Path(tmp) / "db") as chain:
        on_disk = run_steps(chain, steps)
        assert chain.verify_app_hash()
    with open_property_chain(None) as chain:
        in_memory = run_steps(chain, steps)
    with open_property_chain(None) as chain:
        cold = run_steps(chain, steps, cold=True)
        assert chain.verify_app_hash()
    assert on_disk == in_memory == cold


def test_the_property_driver_reaches_the_rules() -> None:
    """Not vacuous: through the same driver, p1 (excluded with p0, missing on) is probed early
    when p0, succeeding on, proves its recovery."""
    steps = [Step(1, "m", 4, 1, 0), Step(0, "m", 4, 1, 0)]
    for _ in range(10):
        steps += [Step(1, "m", 1, 1, 0), Step(0, "s", 4, 1, 0)]
    with open_property_chain(None) as chain:
        transitions = [t for _, ts in run_steps(chain, steps) for t in ts]
        assert get_entry(Net(chain), "p0").recoveries == 1
    assert ("p0", "probe", "healthy") in [t[:3] for t in transitions]
    assert ("p1", "excluded", "probe", "incident over: p0 recovered") in transitions


# --- a recovery proven however late the re-admission came (found by this file) -------------


@pytest.mark.parametrize(
    ("misses", "readmit_successes"), [(6, 0), (4, 20)], ids=["whole-window", "readmit-20"]
)
def test_a_late_readmission_still_proves_the_recovery(
    make_net: NetFactory, misses: int, readmit_successes: int
) -> None:
    """6 misses of 6 need 27 probe successes to pass the whole window (5 of 32), and
    readmit_successes 20 needs 20: either way the participant has shown well over
    RECOVERY_EVIDENCE clean outcomes since probing began, and goes on succeeding."""
    net = make_rule_net(make_net, readmit_successes=readmit_successes)
    exclude(net, "a", successes=0, misses=misses)
    reach_probe(net, "a")
    assert readmit(net, "a") > RECOVERY_EVIDENCE
    for _ in range(RECOVERY_EVIDENCE):
        net.succeed("a")
    assert get_entry(net, "a").recoveries == 1
