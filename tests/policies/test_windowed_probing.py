"""windowed's probing by weight (probe_weight_pct, issue 16): past its cooldown a participant is
admitted at a fraction of its weight with no cap on its probes in flight, instead of at full
weight with at most max_probes (kept out while they are taken: ``probe_full``)."""

from __future__ import annotations

from policy_helpers import NetFactory
from test_windowed import FLEET, exclude, make_w_params, reach_probe, weights

from keepersim.types.params import get_default_health_params

RULE = {"probe_weight_pct": 10, "max_probes": 1}


def test_the_default_probes_by_weight_at_the_ramps_first_step() -> None:
    """The probe weight equals ramp_start_pct, so a re-admission does not jump."""
    w = get_default_health_params().windowed
    assert w.probe_weight_pct == w.ramp_start_pct == 10


def test_probes_are_not_capped_and_weigh_the_probe_weight(make_net: NetFactory) -> None:
    net = make_net(make_w_params(**RULE), FLEET)
    exclude(net, "a")
    assert "a" not in net.admitted()
    reach_probe(net, "a")
    assert weights(net)["a"] == 10  # 10% of 100
    starts = [net.start("a") for _ in range(3)]
    net.block(*starts)
    view = net.state("a")
    assert (view["state"], view["verdict"], view["probes_in_flight"]) == ("probe", "probe", 3)
    assert view["factor_pct"] == 10
    assert "a" in net.admitted()  # with max_probes 1 at full weight it would be probe_full
    assert weights(net)["a"] == 10


def test_the_same_probes_at_full_weight_fill_the_cap(make_net: NetFactory) -> None:
    """The rule off: the cap of one probe keeps the participant out while it flies."""
    net = make_net(make_w_params(**{**RULE, "probe_weight_pct": 0}), FLEET)
    exclude(net, "a")
    reach_probe(net, "a")
    assert weights(net)["a"] == 100
    net.block(net.start("a"))
    assert net.state("a")["verdict"] == "probe_full"
    assert "a" not in net.admitted()


def test_one_missed_probe_among_several_sends_it_back(make_net: NetFactory) -> None:
    net = make_net(make_w_params(**RULE), FLEET)
    exclude(net, "a")
    reach_probe(net, "a")
    starts = [net.start("a") for _ in range(3)]
    net.block(*starts)
    net.block(*[net.finish(s) for s in starts[:2]])  # two succeed, the third expires
    assert net.state("a")["state"] == "probe"
    net.run_until(net.height + 20)
    last = net.transitions("a")[-1]
    assert (last.from_state, last.to_state) == ("probe", "excluded")
    assert "probe missed" in last.reason
    assert "a" not in net.admitted()


def test_clean_probes_readmit_and_the_ramp_starts_where_probing_was(
    make_net: NetFactory,
) -> None:
    net = make_net(
        make_w_params(readmit_successes=3, ramp_blocks=20, ramp_start_pct=10, **RULE), FLEET
    )
    exclude(net, "a")
    reach_probe(net, "a")
    for _ in range(3):
        assert net.state("a")["state"] == "probe"
        net.succeed("a", latency=0)
    readmitted = net.transitions("a")[-1]
    assert (readmitted.from_state, readmitted.to_state) == ("probe", "healthy")
    assert weights(net)["a"] == 10  # the ramp's first step: no jump from the probe weight
    net.run(20)
    assert weights(net)["a"] == 100
